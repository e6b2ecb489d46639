"""Archival ingestion: documents -> late-chunked, embedded :class:`~vcm.store.types.ArchivalChunk` rows.

:func:`ingest_document` is the plain function behind the ``tasks.ingest_archival`` Celery task;
:func:`~vcm.tasks.ingest.files.ingest_paths` ingests files and folders for the CLI (one document failing never stops the
batch; its outcome says why). Both are idempotent: a chunk is identified by (agent, document,
chunk index, embedding version), and a document whose chunks are all stored already is skipped
before the model runs.

Bad input - an empty or whitespace-only text, NUL characters or undecodable bytes (binary),
invalid UTF-8, a document over ``ingest.max_document_bytes`` - raises
:class:`~vcm.errors.ValidationError` (``VALIDATION_ERROR``) and writes nothing for that
document. Re-ingesting a document under the same embedding version with different chunk
boundaries (chunking settings changed) raises :class:`~vcm.errors.IdempotencyMismatch`
instead of mixing two chunkings: bump ``ingest.version_suffix``.

``naive`` mode (chunks embedded without their document) is for comparison only: refused unless
``[ingest] allow_naive`` (:func:`naive_gate`), and every document ingested that way is recorded as
a ``compliance_violation`` memory event.

Input checks are in :mod:`vcm.tasks.ingest.checks`, files and folders in :mod:`vcm.tasks.ingest.files`.
"""

from __future__ import annotations

import hashlib
import logging
import math
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from vcm.errors import IdempotencyMismatch, PolicyRefused, ValidationError, VcmError
from vcm.obs import audit, footprint, metrics
from vcm.settings import Settings, get_settings
from vcm.store.audit_names import EventKind, audit_id
from vcm.store.port import MemoryStore
from vcm.store.types import ArchivalChunk, MemoryEvent
from vcm.tasks.embedding import Embedder
from vcm.tasks.fence import fenced
from vcm.tasks.ingest.checks import RESERVED_METADATA_KEY, check_text, checked_metadata, identifier
from vcm.tasks.ingest.late_chunking import MODES, DocumentPlan, LateChunker, Mode, Vectors

log = logging.getLogger(__name__)


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


_chunkers: weakref.WeakKeyDictionary[Embedder, LateChunker] = weakref.WeakKeyDictionary()


def chunker_for(embedder: Embedder) -> LateChunker:
    """One :class:`LateChunker` per embedder (it reads the tokenizer's special tokens once)."""
    found = _chunkers.get(embedder)
    if found is None:
        found = _chunkers[embedder] = LateChunker(embedder)
    return found


def embedding_version_for(model_id: str, mode: Mode, suffix: str) -> str:
    return f"{model_id}:{mode}:{suffix}"


@dataclass(frozen=True)
class Job:
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


def prepare(
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
) -> Job:
    identifier("agent_id", agent_id)
    identifier("doc_id", doc_id)
    chosen: Mode = settings.ingest.mode if mode is None else mode
    if chosen not in MODES:
        raise ValidationError(f"unknown chunking mode {chosen!r}; use one of {', '.join(MODES)}", field="mode")
    if chosen == "naive":
        naive_gate(store, agent_id, doc_id, source, settings)
    meta = checked_metadata(metadata)
    if valid_until is not None and not (isinstance(valid_until, int | float) and math.isfinite(valid_until)):
        raise ValidationError("valid_until must be a finite unix time or None", field="valid_until")
    check_text(doc_id, text, settings.ingest.max_document_bytes)
    version = embedding_version or embedding_version_for(
        chunker.embedder.model_id, chosen, settings.ingest.version_suffix
    )
    identifier("embedding_version", version)
    plan = chunker.plan(text, settings.chunking)
    if not plan.chunks:
        raise ValidationError(f"document {doc_id!r} has no tokens to embed", doc_id=doc_id)
    stored = _stored_already(store, agent_id, doc_id, version, plan)
    return Job(agent_id, doc_id, plan, version, chosen, source, meta, valid_until, stored)


NAIVE_RULE = "late_chunking"


def naive_gate(store: MemoryStore, agent_id: str, doc_id: str, source: str, settings: Settings) -> None:
    """Seed 000: a naive (non-late) chunking is a compliance violation that blocks ingestion and
    raises the zero-propagation alarm. Refused (POLICY_REFUSED, with its ``compliance_violation``
    row and the ``vcm_compliance_violations`` alarm) unless ``[ingest] allow_naive``; allowed, it
    is counted here and its row written with the chunks (:func:`_compliance_event`)."""
    if settings.ingest.allow_naive:
        metrics.compliance_violation(NAIVE_RULE, "allowed")
        return
    metrics.compliance_violation(NAIVE_RULE, "blocked")
    key = hashlib.sha256(f"{agent_id}\x1f{doc_id}\x1fblocked".encode()).hexdigest()[:32]
    store.append_event(
        MemoryEvent(
            agent_id=agent_id,
            kind=EventKind.COMPLIANCE_VIOLATION,
            payload={"rule": NAIVE_RULE, "mode": "naive", "doc_id": doc_id, "source": source, "blocked": True},
            event_id=f"compliance-{key}",
            actor=audit.worker("ingest"),
        )
    )
    raise PolicyRefused(
        "naive chunking is refused: archival documents are embedded with late chunking (set [ingest] "
        "allow_naive = true to allow it for a comparison; it stays recorded as a compliance violation)",
        field="mode",
        doc_id=doc_id,
    )


def _rows(job: Job, vectors: Vectors, model_id: str) -> list[ArchivalChunk]:
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


def _compliance_event(job: Job) -> MemoryEvent:
    # A fixed id per (agent, document, version) makes a replayed ingestion record it once.
    key = hashlib.sha256(f"{job.agent_id}\x1f{job.doc_id}\x1f{job.version}".encode()).hexdigest()[:32]
    return MemoryEvent(
        agent_id=job.agent_id,
        kind=EventKind.COMPLIANCE_VIOLATION,
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


def audit_ingest(store: MemoryStore, job: Job, result: IngestResult, actor: str) -> None:
    """The audit row of a file ingested outside the service (``vcm ingest``); the service
    records its own ingestions. Best effort: the chunks are already stored."""
    counts = {"chunks": result.chunks, "written": result.written, "tokens": result.tokens}
    try:
        store.append_event(
            audit.event(
                job.agent_id,
                EventKind.ARCHIVAL_INGEST,
                footprint.ingest(job.plan.text, counts),
                actor=actor,
                event_id=audit_id(job.agent_id, "ingest", job.doc_id, job.version)[:500],
                details={"doc_id": job.doc_id, "source": job.source, "embedding_version": job.version},
            )
        )
    except VcmError:
        log.exception("could not record the archival_ingest event of %s", job.doc_id)


def _finish(store: MemoryStore, job: Job, vectors: Vectors | None, model_id: str) -> IngestResult:
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


def embed_and_finish(
    store: MemoryStore,
    chunker: LateChunker,
    jobs: Sequence[Job],
    *,
    before_write: Callable[[Job], None] | None = None,
) -> Iterator[tuple[Job, IngestResult | VcmError]]:
    """Embed the jobs that need it (late and naive each in one batched call), then write each alone,
    ``before_write(job)`` first (it stops the write by raising: the job was cancelled)."""
    vectors: dict[int, Vectors] = {}
    for mode in MODES:
        todo = [i for i, j in enumerate(jobs) if not j.stored and j.mode == mode]
        if todo:
            for i, v in zip(todo, chunker.embed([jobs[i].plan for i in todo], mode), strict=True):
                vectors[i] = v
    for i, job in enumerate(jobs):
        if before_write is not None:
            before_write(job)
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

    ``progress(done, total)`` hears of the chunk count once planned (0 of n), again once embedded,
    right before the store write (0 of n: the caller's last chance to stop it, by raising), and
    when stored.

    ``embedding_version`` defaults to ``"<model_id>:<mode>:<ingest.version_suffix>"``; ``mode``
    to ``ingest.mode``. Raises ValidationError (bad input), IdempotencyMismatch (stored under
    this version with other boundaries), ConfigError (chunk size over the model window) or a
    store error; nothing is written for the document in any of these cases.
    """
    cfg = settings or get_settings()
    chunker = chunker_for(embedder)
    job = prepare(
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
    total = len(job.plan.chunks)

    def last_call(_: Job) -> None:
        if progress is not None:
            progress(0, total)

    for _, outcome in embed_and_finish(store, chunker, [job], before_write=last_call):
        if isinstance(outcome, IngestResult):
            if progress is not None:
                progress(outcome.chunks, outcome.chunks)
            return outcome
        raise outcome
    raise AssertionError("unreachable: one job gives one outcome")


class DocumentIngester:
    """:func:`ingest_document` bound to a store, an embedder and settings.

    Matches :class:`vcm.tasks.ingest.jobs.Ingest` - ``(agent_id, doc_id, text, *, source,
    metadata, progress, incarnation)`` to a JSON-ready mapping - so the ``tasks.ingest_archival`` Celery task
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
        incarnation: str | None = None,
    ) -> dict[str, Any]:
        result = ingest_document(
            # Writes fenced by the job's incarnation (vcm.tasks.fence): none lands once the agent
            # is deleted or re-created.
            self.store if incarnation is None else fenced(self.store, incarnation),
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
