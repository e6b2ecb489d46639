"""The CLI's bulk jobs through the façade: ingesting files and folders into archival memory
(``vcm ingest``) and re-embedding stored messages after a model change (``vcm reembed``).

Both run in the calling process and need the embedding model and the cold path's code, which the
service may not import (:mod:`vcm.tasks` sits above it): a process entry point wires a
:class:`BulkJobs` in (``vcm.workers.bulk``). The façade checks the agent first, as for any other
call, so these commands see the same NOT_FOUND and rebuild as the rest."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from vcm.errors import ConfigError
from vcm.service.core import Core

# Called after each file with (its path, files done, files in the batch); the CLI draws a bar.
Progress = Callable[[str, int, int], None]


class IngestReport(Protocol):
    @property
    def failures(self) -> Sequence[object]: ...

    def to_dict(self) -> dict[str, Any]: ...


class ReembedReport(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


class BulkJobs(Protocol):
    def ingest_paths(
        self, agent_id: str, paths: Sequence[str | Path], *, root: Path | None, naive: bool, progress: Progress | None
    ) -> IngestReport:
        """Chunk, embed and store these files (folders: their files) as archival documents."""
        ...

    def reembed(self, agent_id: str, *, page: int) -> ReembedReport:
        """Embed the agent's stored messages that lack a vector of the current model."""
        ...


class Bulk:
    """ingest_paths, reembed."""

    def __init__(self, core: Core, jobs: BulkJobs | None) -> None:
        self.core = core
        self.jobs = jobs

    def ingest_paths(
        self,
        agent_id: str,
        paths: Sequence[str | Path],
        *,
        root: Path | None = None,
        naive: bool = False,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Ingest files and folders into the agent's archival memory, here and now (unchanged
        files are skipped, bad ones reported); ``naive``: chunk without late chunking."""
        self.core.agent(agent_id)
        return self._jobs().ingest_paths(agent_id, paths, root=root, naive=naive, progress=progress)

    def reembed(self, agent_id: str, *, page: int = 200) -> ReembedReport:
        """Embed the agent's stored messages that lack a vector of the configured model's
        version (after a model change, or embeddings that failed), ``page`` at a time."""
        return self._jobs().reembed(agent_id, page=page)

    def _jobs(self) -> BulkJobs:
        if self.jobs is None:
            raise ConfigError("this process was wired without bulk jobs (vcm.workers.bulk)", setting="bulk")
        return self.jobs
