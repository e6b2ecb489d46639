"""Archival ingestion: documents -> late-chunked, embedded :class:`~vcm.store.types.ArchivalChunk` rows.

:func:`ingest_document` is the plain function behind the ``tasks.ingest_archival`` Celery task;
:func:`ingest_paths` ingests files and folders for the CLI (one document failing never stops the
batch; its outcome says why). Both are idempotent: a chunk is identified by (agent, document,
chunk index, embedding version), and a document whose chunks are all stored already is skipped
before the model runs.

Bad input - an empty or whitespace-only text, NUL characters or undecodable bytes (binary),
invalid UTF-8, a document over ``ingest.max_document_bytes`` - raises
:class:`~vcm.errors.ValidationError` (``VALIDATION_ERROR``) and writes nothing for that
document. Re-ingesting a document under the same embedding version with different chunk
boundaries (chunking settings changed) raises :class:`~vcm.errors.IdempotencyMismatch`
instead of mixing two chunkings: bump ``ingest.version_suffix``.

``naive`` mode (chunks embedded without their document) is for comparison only; every document
ingested that way is recorded as a ``compliance_violation`` memory event.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from vcm.errors import IdempotencyMismatch, ValidationError, VcmError
from vcm.obs import audit, footprint
from vcm.settings import Settings, get_settings
from vcm.store.port import MemoryStore
from vcm.store.types import ArchivalChunk, MemoryEvent
from vcm.tasks.embedding import Embedder
from vcm.tasks.ingest.late_chunking import MODES, DocumentPlan, LateChunker, Mode, Vectors

MAX_ID_CHARS = 512  # the store's limit on identifiers
log = logging.getLogger(__name__)
RESERVED_METADATA_KEY = "vcm"  # chunk metadata written by ingestion itself lives under this key
COMPLIANCE_EVENT = "compliance_violation"
_BINARY_SNIFF_BYTES = 8192

Status = Literal["ingested", "unchanged", "failed"]


@dataclass(frozen=True)
class IngestResult:
    """What ingesting one document did."""

    doc_id: str
    mode: Mode
    embedding_version: str
    chunks: int  # chunks the document has under this version
    written: int  # rows new in the store (0 on a replay)
    skipped: bool  # every chunk was stored already: the model did not run
    tokens: int
    windows: int  # model windows the document needed (late mode)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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

_chunkers: weakref.WeakKeyDictionary[Embedder, LateChunker] = weakref.WeakKeyDictionary()


def chunker_for(embedder: Embedder) -> LateChunker:
    """One :class:`LateChunker` per embedder (it reads the tokenizer's special tokens once)."""
    found = _chunkers.get(embedder)
    if found is None:
        found = _chunkers[embedder] = LateChunker(embedder)
    return found


def embedding_version_for(model_id: str, mode: Mode, suffix: str) -> str:
    return f"{model_id}:{mode}:{suffix}"


def document_id(relative_path: str, data: bytes) -> str:
    """``<relative path>@<content hash>``: a changed file is a new document, an unchanged one is skipped."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    name = relative_path[: MAX_ID_CHARS - len(digest) - 1]
    return f"{name}@{digest}"


# --- input checks (pure) --------------------------------------------------------------------


def _identifier(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-empty string", field=name)
    if len(value) > MAX_ID_CHARS:
        raise ValidationError(f"{name} is longer than {MAX_ID_CHARS} characters", field=name)
    return value


def _metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Caller metadata, checked before the model runs (the store would refuse it only after)."""
    meta = dict(metadata or {})
    if RESERVED_METADATA_KEY in meta:
        raise ValidationError(f"metadata key {RESERVED_METADATA_KEY!r} is reserved for ingestion", field="metadata")
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"metadata must be JSON-serialisable: {exc}", field="metadata") from None
    return meta


def check_text(doc_id: str, text: object, max_bytes: int) -> str:
    """The document text, or ValidationError saying what is wrong with it."""
    if not isinstance(text, str):
        raise ValidationError(f"document {doc_id!r}: text must be a string", doc_id=doc_id)
    if not text.strip():
        raise ValidationError(f"document {doc_id!r} is empty (no text to embed)", doc_id=doc_id)
    if "\x00" in text:
        raise ValidationError(f"document {doc_id!r} contains NUL characters: binary content?", doc_id=doc_id)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"document {doc_id!r} is not valid Unicode (lone surrogate at character {exc.start})", doc_id=doc_id
        ) from None
    if size > max_bytes:
        raise ValidationError(
            f"document {doc_id!r} is {size} bytes, over ingest.max_document_bytes ({max_bytes})",
            doc_id=doc_id,
            bytes=size,
        )
    return text


def decode_document(name: str, data: bytes) -> str:
    """File bytes as text: UTF-8 (a BOM is dropped); binary or undecodable bytes raise ValidationError."""
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        raise ValidationError(f"{name} looks binary (NUL bytes); only UTF-8 text can be ingested", path=name)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValidationError(
            f"{name} is not UTF-8 (invalid byte at offset {exc.start}); convert it to UTF-8 first",
            path=name,
            byte_offset=exc.start,
        ) from None


def json_text(name: str, text: str) -> str:
    """The string values of a JSON document, one per line, in document order."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{name} is not valid JSON: {exc}", path=name) from None
    out: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, Mapping):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(value)
    return "\n".join(out)


# --- one document ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """A checked, planned document waiting for (or not needing) the model."""

    agent_id: str
    doc_id: str
    plan: DocumentPlan
    version: str
    mode: Mode
    source: str
    metadata: Mapping[str, Any]
    valid_until: float | None
    stored: bool  # every chunk is in the store already


def _stored_already(store: MemoryStore, agent_id: str, doc_id: str, version: str, plan: DocumentPlan) -> bool:
    """True when every chunk is stored; IdempotencyMismatch when stored chunks disagree with the plan."""
    existing = [c for c in store.get_archival(agent_id, doc_id) if c.embedding_version == version]
    planned = {c.index: (c.char_start, c.char_end) for c in plan.chunks}
    for c in existing:
        if planned.get(c.chunk_index) != (c.char_start, c.char_end):
            raise IdempotencyMismatch(
                f"document {doc_id!r} is stored under embedding_version {version!r} with other chunk "
                "boundaries (chunking settings changed?); set a new ingest.version_suffix to re-chunk it",
                doc_id=doc_id,
                embedding_version=version,
            )
    return len({c.chunk_index for c in existing}) == len(planned)


def _prepare(
    store: MemoryStore,
    chunker: LateChunker,
    agent_id: str,
    doc_id: str,
    text: str,
    *,
    source: str,
    metadata: Mapping[str, Any] | None,
    mode: Mode | None,
    embedding_version: str | None,
    settings: Settings,
    valid_until: float | None,
) -> _Job:
    _identifier("agent_id", agent_id)
    _identifier("doc_id", doc_id)
    chosen: Mode = settings.ingest.mode if mode is None else mode
    if chosen not in MODES:
        raise ValidationError(f"unknown chunking mode {chosen!r}; use one of {', '.join(MODES)}", field="mode")
    meta = _metadata(metadata)
    if valid_until is not None and not (isinstance(valid_until, int | float) and math.isfinite(valid_until)):
        raise ValidationError("valid_until must be a finite unix time or None", field="valid_until")
    check_text(doc_id, text, settings.ingest.max_document_bytes)
    version = embedding_version or embedding_version_for(
        chunker.embedder.model_id, chosen, settings.ingest.version_suffix
    )
    _identifier("embedding_version", version)
    plan = chunker.plan(text, settings.chunking)
    if not plan.chunks:
        raise ValidationError(f"document {doc_id!r} has no tokens to embed", doc_id=doc_id)
    stored = _stored_already(store, agent_id, doc_id, version, plan)
    return _Job(agent_id, doc_id, plan, version, chosen, source, meta, valid_until, stored)


def _rows(job: _Job, vectors: Vectors, model_id: str) -> list[ArchivalChunk]:
    return [
        ArchivalChunk(
            agent_id=job.agent_id,
            doc_id=job.doc_id,
            chunk_index=c.index,
            text=job.plan.chunk_text(c),
            embedding=vectors[i].tolist(),
            metric="cosine",
            embedding_version=job.version,
            model_id=model_id,
            char_start=c.char_start,
            char_end=c.char_end,
            source=job.source,
            metadata={
                **job.metadata,
                RESERVED_METADATA_KEY: {"mode": job.mode, "token_start": c.start, "token_end": c.end},
            },
            valid_until=job.valid_until,
        )
        for i, c in enumerate(job.plan.chunks)
    ]


def _compliance_event(job: _Job) -> MemoryEvent:
    # A fixed id per (agent, document, version) makes a replayed ingestion record it once.
    key = hashlib.sha256(f"{job.agent_id}\x1f{job.doc_id}\x1f{job.version}".encode()).hexdigest()[:32]
    return MemoryEvent(
        agent_id=job.agent_id,
        kind=COMPLIANCE_EVENT,
        payload={
            "rule": "archival chunks must be embedded with late chunking (issue 4)",
            "mode": job.mode,
            "doc_id": job.doc_id,
            "source": job.source,
            "embedding_version": job.version,
            "chunks": len(job.plan.chunks),
        },
        event_id=f"compliance-{key}",
        actor=audit.worker("ingest"),
    )


def _audit_ingest(store: MemoryStore, job: _Job, result: IngestResult, actor: str) -> None:
    """The audit row of a file ingested outside the service (``vcm ingest``); the service
    records its own ingestions. Best effort: the chunks are already stored."""
    counts = {"chunks": result.chunks, "written": result.written, "tokens": result.tokens}
    try:
        store.append_event(
            audit.event(
                job.agent_id,
                "archival_ingest",
                footprint.ingest(job.plan.text, counts),
                actor=actor,
                event_id=f"{job.agent_id}:ingest:{job.doc_id}:{job.version}"[:500],
                details={"doc_id": job.doc_id, "source": job.source, "embedding_version": job.version},
            )
        )
    except VcmError:
        log.exception("could not record the archival_ingest event of %s", job.doc_id)


def _finish(store: MemoryStore, job: _Job, vectors: Vectors | None, model_id: str) -> IngestResult:
    written = 0 if vectors is None else store.ingest_archival(_rows(job, vectors, model_id))
    if job.mode == "naive":
        store.append_event(_compliance_event(job))
    return IngestResult(
        doc_id=job.doc_id,
        mode=job.mode,
        embedding_version=job.version,
        chunks=len(job.plan.chunks),
        written=written,
        skipped=vectors is None,
        tokens=len(job.plan.token_ids),
        windows=len(job.plan.windows),
    )


def _embed_and_finish(
    store: MemoryStore, chunker: LateChunker, jobs: Sequence[_Job]
) -> Iterator[tuple[_Job, IngestResult | VcmError]]:
    """Embed the jobs that need it (late and naive each in one batched call), then write each alone."""
    vectors: dict[int, Vectors] = {}
    for mode in MODES:
        todo = [i for i, j in enumerate(jobs) if not j.stored and j.mode == mode]
        if todo:
            for i, v in zip(todo, chunker.embed([jobs[i].plan for i in todo], mode), strict=True):
                vectors[i] = v
    for i, job in enumerate(jobs):
        try:
            yield job, _finish(store, job, vectors.get(i), chunker.embedder.model_id)
        except VcmError as exc:
            yield job, exc


def ingest_document(
    store: MemoryStore,
    embedder: Embedder,
    agent_id: str,
    doc_id: str,
    text: str,
    *,
    source: str = "",
    metadata: Mapping[str, Any] | None = None,
    mode: Mode | None = None,
    embedding_version: str | None = None,
    settings: Settings | None = None,
    valid_until: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> IngestResult:
    """Chunk, embed (late by default) and store one document; a replay writes nothing new.

    ``progress(done, total)`` hears of the chunk count once planned (0 of n) and when stored.

    ``embedding_version`` defaults to ``"<model_id>:<mode>:<ingest.version_suffix>"``; ``mode``
    to ``ingest.mode``. Raises ValidationError (bad input), IdempotencyMismatch (stored under
    this version with other boundaries), ConfigError (chunk size over the model window) or a
    store error; nothing is written for the document in any of these cases.
    """
    cfg = settings or get_settings()
    chunker = chunker_for(embedder)
    job = _prepare(
        store,
        chunker,
        agent_id,
        doc_id,
        text,
        source=source,
        metadata=metadata,
        mode=mode,
        embedding_version=embedding_version,
        settings=cfg,
        valid_until=valid_until,
    )
    if progress is not None:
        progress(0, len(job.plan.chunks))
    for _, outcome in _embed_and_finish(store, chunker, [job]):
        if isinstance(outcome, IngestResult):
            if progress is not None:
                progress(outcome.chunks, outcome.chunks)
            return outcome
        raise outcome
    raise AssertionError("unreachable: one job gives one outcome")


class DocumentIngester:
    """:func:`ingest_document` bound to a store, an embedder and settings.

    Matches :class:`vcm.tasks.ingest.jobs.Ingest` - ``(agent_id, doc_id, text, *, source,
    metadata, progress)`` to a JSON-ready mapping - so the ``tasks.ingest_archival`` Celery task
    runs it without knowing the model.
    """

    def __init__(self, store: MemoryStore, embedder: Embedder, settings: Settings | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings

    def __call__(
        self,
        agent_id: str,
        doc_id: str,
        text: str,
        *,
        source: str = "",
        metadata: Mapping[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict[str, Any]:
        result = ingest_document(
            self.store,
            self.embedder,
            agent_id,
            doc_id,
            text,
            source=source,
            metadata=metadata,
            settings=self.settings,
            progress=progress,
        )
        return result.to_dict()


# --- files and folders ----------------------------------------------------------------------


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
    _identifier("agent_id", agent_id)
    chunker = chunker_for(embedder)
    chunker.check(cfg.chunking)  # a configuration error would fail every file: raise it once
    files = discover(paths, cfg.ingest.extensions, root)
    report = BatchReport()

    def record(outcome: PathOutcome) -> None:
        report.outcomes.append(outcome)
        if progress is not None:
            progress(outcome, len(report.outcomes), len(files))

    pending: list[tuple[str, _Job]] = []

    def flush() -> None:
        outcomes = _embed_and_finish(store, chunker, [j for _, j in pending])
        for (name, _), (job, result) in zip(pending, outcomes, strict=True):
            if isinstance(result, IngestResult):
                if result.written:
                    _audit_ingest(store, job, result, actor)
                record(PathOutcome(name, "unchanged" if result.skipped else "ingested", job.doc_id, result))
            else:
                record(PathOutcome(name, "failed", job.doc_id, error=result.to_dict()))
        pending.clear()

    for path, rel in files:
        doc_id: str | None = None
        try:
            data, text, meta = _read(path, rel, cfg.ingest.max_document_bytes, root)
            doc_id = document_id(rel, data)
            job = _prepare(
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
