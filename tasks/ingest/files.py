"""Ingesting files and folders for the CLI (``vcm ingest``): discovery by extension, reading and
decoding each file, one outcome per path (one document failing never stops the batch)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vcm.errors import ValidationError, VcmError
from vcm.obs import audit
from vcm.settings import Settings, get_settings
from vcm.store.port import MemoryStore
from vcm.tasks.embedding import Embedder
from vcm.tasks.ingest.checks import decode_document, document_id, identifier, json_text
from vcm.tasks.ingest.documents import IngestResult, Job, Status, audit_ingest, chunker_for, embed_and_finish, prepare
from vcm.tasks.ingest.late_chunking import Mode


@dataclass(frozen=True)
class PathOutcome:
    """One file of an :func:`ingest_paths` batch."""

    path: str
    status: Status
    doc_id: str | None = None
    result: IngestResult | None = None
    error: dict[str, Any] | None = None  # a coded error payload when status == "failed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "doc_id": self.doc_id,
            "result": None if self.result is None else self.result.to_dict(),
            "error": self.error,
        }


@dataclass
class BatchReport:
    outcomes: list[PathOutcome] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def chunks_written(self) -> int:
        return sum(o.result.written for o in self.outcomes if o.result is not None)

    @property
    def failures(self) -> list[PathOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": len(self.outcomes),
            "ingested": self.count("ingested"),
            "unchanged": self.count("unchanged"),
            "failed": self.count("failed"),
            "chunks_written": self.chunks_written,
            "outcomes": [o.to_dict() for o in self.outcomes],
        }


# Called after each file with (outcome, files done, files in the batch); the CLI draws a bar.
ProgressCallback = Callable[[PathOutcome, int, int], None]


def _normalised(extensions: Sequence[str]) -> tuple[str, ...]:
    return tuple(e.lower() if e.startswith(".") else f".{e.lower()}" for e in extensions)


def discover(
    paths: Sequence[str | Path], extensions: Sequence[str], root: Path | None = None
) -> list[tuple[Path, str]]:
    """Files to ingest as (path, relative name), in a stable order, each once.

    A folder is walked recursively (hidden entries and linked folders skipped) for files with
    one of ``extensions``; a file named explicitly is taken whatever its ending. The relative
    name is relative to ``root`` when given and the file lies under it, else to the named
    folder's parent (so the folder's own name is kept), else the file's name. A path that does
    not exist is returned as is, so the caller reports it.
    """
    wanted = _normalised(extensions)
    seen: set[Path] = set()
    out: list[tuple[Path, str]] = []

    def add(path: Path, base: Path) -> None:
        resolved = path.resolve()
        if resolved in seen:
            return
        seen.add(resolved)
        anchor = root.resolve() if root is not None and resolved.is_relative_to(root.resolve()) else base
        out.append((path, resolved.relative_to(anchor).as_posix() if resolved.is_relative_to(anchor) else path.name))

    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            base = path.resolve().parent
            for folder, dirs, files in os.walk(path, followlinks=False):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if not name.startswith(".") and name.lower().endswith(wanted):
                        add(Path(folder) / name, base)
        elif path.exists():
            add(path, path.resolve().parent)
        else:
            out.append((path, path.as_posix()))
    return out


def _read(path: Path, rel: str, max_bytes: int, root: Path | None = None) -> tuple[bytes, str, dict[str, Any]]:
    """A file's bytes, text and provenance metadata, or ValidationError.

    Only regular files are read (no devices, pipes or sockets, which could block or never end);
    with ``root``, only files whose real path (links followed) lies under it."""
    if not path.exists():
        raise ValidationError(f"{path} does not exist", path=str(path))
    if not path.is_file():
        raise ValidationError(f"{path} is not a regular file", path=str(path))
    if root is not None and not path.resolve().is_relative_to(root.resolve()):
        raise ValidationError(f"{path} lies outside the allowed root {root}", path=str(path), root=str(root))
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ValidationError(
                f"{path} is {size} bytes, over ingest.max_document_bytes ({max_bytes})", path=str(path), bytes=size
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read {path}: {exc.strerror or exc}", path=str(path)) from None
    text = decode_document(str(path), data)
    meta: dict[str, Any] = {"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    if path.suffix.lower() == ".json":
        text = json_text(str(path), text)
        meta["format"] = "json"
    return data, text, meta


def ingest_paths(
    store: MemoryStore,
    embedder: Embedder,
    agent_id: str,
    paths: Sequence[str | Path],
    *,
    root: Path | None = None,
    mode: Mode | None = None,
    settings: Settings | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: ProgressCallback | None = None,
    actor: str = audit.CLI,
) -> BatchReport:
    """Ingest files and folders (see :func:`discover`); unchanged files are skipped, bad ones reported.

    Each file's document id is ``<relative path>@<content hash>`` and its ``source`` the
    relative path. Documents are embedded ``ingest.batch_documents`` at a time so their model
    windows share batches; each is written in its own store call, so one failure stays local.
    """
    cfg = settings or get_settings()
    identifier("agent_id", agent_id)
    chunker = chunker_for(embedder)
    chunker.check(cfg.chunking)  # a configuration error would fail every file: raise it once
    files = discover(paths, cfg.ingest.extensions, root)
    report = BatchReport()

    def record(outcome: PathOutcome) -> None:
        report.outcomes.append(outcome)
        if progress is not None:
            progress(outcome, len(report.outcomes), len(files))

    pending: list[tuple[str, Job]] = []

    def flush() -> None:
        outcomes = embed_and_finish(store, chunker, [j for _, j in pending])
        for (name, _), (job, result) in zip(pending, outcomes, strict=True):
            if isinstance(result, IngestResult):
                if result.written:
                    audit_ingest(store, job, result, actor)
                record(PathOutcome(name, "unchanged" if result.skipped else "ingested", job.doc_id, result))
            else:
                record(PathOutcome(name, "failed", job.doc_id, error=result.to_dict()))
        pending.clear()

    for path, rel in files:
        doc_id: str | None = None
        try:
            data, text, meta = _read(path, rel, cfg.ingest.max_document_bytes, root)
            doc_id = document_id(rel, data)
            job = prepare(
                store,
                chunker,
                agent_id,
                doc_id,
                text,
                source=rel,
                metadata={**(metadata or {}), **meta},
                mode=mode,
                embedding_version=None,
                settings=cfg,
                valid_until=None,
            )
        except VcmError as exc:
            record(PathOutcome(str(path), "failed", doc_id, error=exc.to_dict()))
            continue
        pending.append((str(path), job))
        if len(pending) >= cfg.ingest.batch_documents:
            flush()
    flush()
    return report
