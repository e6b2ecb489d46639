"""The bulk jobs a process runs in itself through the façade (:class:`vcm.service.bulk.BulkJobs`):
``vcm ingest`` (files into archival memory) and ``vcm reembed`` (stored messages under the current
embedding model). They need the cold path's code and the embedding model, which the service may
not import; the composition root (:mod:`vcm.workers.wiring`) hands this in."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vcm.errors import ValidationError
from vcm.service.bulk import Progress
from vcm.settings import Settings
from vcm.tasks.deps import Deps
from vcm.tasks.ingest.files import BatchReport, PathOutcome, ingest_paths
from vcm.tasks.recall.reembed import ReembedOutcome, reembed_agent


class LocalBulkJobs:
    """Runs the jobs here, on this process's dependencies (its store, vectorizer and model)."""

    def __init__(self, settings: Settings, deps: Deps) -> None:
        self.settings = settings
        self.deps = deps

    def ingest_paths(
        self, agent_id: str, paths: Sequence[str | Path], *, root: Path | None, naive: bool, progress: Progress | None
    ) -> BatchReport:
        from vcm.tasks.embedding import get_embedder  # the model loads only when a job runs

        def each(outcome: PathOutcome, done: int, total: int) -> None:
            if progress is not None:
                progress(str(outcome.path), done, total)

        return ingest_paths(
            self.deps.store,
            get_embedder(self.settings.embedding),
            agent_id,
            paths,
            root=root,
            settings=self.settings,
            mode="naive" if naive else None,
            progress=each,
        )

    def reembed(self, agent_id: str, *, page: int) -> ReembedOutcome:
        vectorizer = self.deps.vectorizer
        if vectorizer is None:
            raise ValidationError("[recall] vectors is off: there is nothing to embed", field="recall.vectors")
        return reembed_agent(self.deps.store, agent_id, vectorizer, page=page)
