"""The worker side of an archival ingestion job: run the ingester, move the job on, audit it.

The API and the tools open the job and queue the document
(:meth:`vcm.service.search.Search.ingest_archival`); the ``tasks.ingest_archival`` Celery task on
the ``ingest`` queue calls :func:`run_ingest_job`. Everything here is idempotent: the ingester
writes chunks under keys derived from the document and the embedding version, the audit row has a
fixed id, and a job that is done stays done, so a redelivered task changes nothing.

A job whose agent is deleted or reset while it runs ends ``cancelled`` and writes nothing: each
progress report, the last one right before the store write, checks that the agent still exists in
the store with the incarnation the document was submitted under (a delete removes the store's
record with its rows; a re-created agent has another incarnation) and that its job was not
cancelled (a reset cancels open jobs), and stops the ingester otherwise. The store write itself
is fenced by that incarnation (:mod:`vcm.tasks.fence`): a delete landing after the last check
still stops it, in the write's own transaction (``AgentFenced``, counted under ``ingest``). A
reset landing there lets the chunks be stored (a reset keeps archival documents anyway) while the
job reads ``cancelled``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vcm.errors import AgentFenced, NotFound, StoreUnavailable, VcmError
from vcm.hotpath.state import HotState
from vcm.obs import audit, footprint
from vcm.store.audit_names import EventKind, audit_id
from vcm.store.port import MemoryStore
from vcm.tasks.fence import fenced, note_fenced
from vcm.types import IngestRequest

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (chunks done, chunks in the document)


class Ingest(Protocol):
    """Chunks, embeds and stores one document; returns a JSON-ready summary (``chunks``, ...)."""

    def __call__(
        self,
        agent_id: str,
        doc_id: str,
        text: str,
        *,
        source: str,
        metadata: Mapping[str, Any],
        progress: Progress | None = None,
        incarnation: str | None = None,
    ) -> Mapping[str, Any]: ...

    # ``incarnation``: fence every store write by it (vcm.tasks.fence.fenced); None: unfenced.


class JobCancelled(Exception):
    """Raised from the progress report into the ingester: the job's agent is gone or was reset."""


@dataclass(frozen=True)
class JobOutcome:
    outcome: str  # done | failed | already_done | cancelled
    job_id: str
    agent_id: str
    detail: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "job_id": self.job_id, "agent_id": self.agent_id, **self.detail}


def run_ingest_job(
    hot: HotState, store: MemoryStore, ingest: Ingest, request: IngestRequest, *, clock: Callable[[], float]
) -> JobOutcome:
    """Ingest the request's document. A coded error of the request itself (bad input, a key or
    document stored differently) fails the job for good; anything else is raised for a retry."""
    agent, job_id = request.agent_id, request.job_id
    try:
        if hot.jobs.get(agent, job_id).status == "done":
            return JobOutcome("already_done", job_id, agent, {})
    except NotFound:
        log.warning("ingestion job %s of %s has no record (expired?); ingesting anyway", job_id, agent)
    incarnation = request.incarnation if request.incarnation is not None else _incarnation(hot, agent)

    def progress(done: int, total: int | None = None) -> None:
        if not _wanted(hot, store, agent, job_id, incarnation):
            raise JobCancelled(job_id)
        hot.jobs.progress(agent, job_id, clock(), chunks_total=total, chunks_done=done)

    try:
        progress(0)
        doc, text = request.doc_id, request.text
        result = dict(
            ingest(
                agent,
                doc,
                text,
                source=request.source,
                metadata=request.metadata,
                progress=progress,
                incarnation=incarnation,
            )
        )
    except AgentFenced:  # deleted (or re-created) after the last check: its write stored nothing
        # The job's record went with the agent; a job of the same id now is the new agent's own.
        note_fenced("ingest", agent, f"job {job_id}")
        return JobOutcome("cancelled", job_id, agent, {"doc_id": request.doc_id})
    except JobCancelled:
        hot.jobs.cancelled(agent, job_id, clock())  # a deleted agent's record is gone: a no-op
        log.info("ingestion job %s of %s cancelled: its agent was deleted or reset", job_id, agent)
        return JobOutcome("cancelled", job_id, agent, {"doc_id": request.doc_id})
    except StoreUnavailable:
        raise
    except VcmError as exc:
        hot.jobs.failed(agent, job_id, exc.to_dict(), clock())
        return JobOutcome("failed", job_id, agent, {"error": exc.to_dict()})
    _audit(store if incarnation is None else fenced(store, incarnation), request, result, clock())
    hot.jobs.done(agent, job_id, {"doc_id": request.doc_id, **result}, clock())
    return JobOutcome("done", job_id, agent, {"doc_id": request.doc_id, **result})


def _incarnation(hot: HotState, agent_id: str) -> str | None:
    """The agent's incarnation now, for a request queued without one (None: the agent is gone
    from the hot state; the progress check then asks the store)."""
    try:
        return hot.incarnation(agent_id)
    except NotFound:
        return None


def _wanted(hot: HotState, store: MemoryStore, agent_id: str, job_id: str, incarnation: str | None) -> bool:
    """Whether the job may still write: its agent exists in the store (with ``incarnation``, when
    known), and its record, when there is one (an expired or flushed record lets the job go on),
    is not cancelled."""
    try:
        record = store.get_agent(agent_id)
    except NotFound:
        return False
    if incarnation is not None and record.incarnation != incarnation:
        return False
    try:
        return hot.jobs.get(agent_id, job_id).status != "cancelled"
    except NotFound:
        return True


def give_up(hot: HotState, request: IngestRequest, exc: BaseException | str, *, clock: Callable[[], float]) -> None:
    """The job failed after its retries (or its worker died each time): say so to whoever polls."""
    if isinstance(exc, VcmError):
        error = exc.to_dict()
    else:
        error = {"code": "INTERNAL_ERROR", "message": f"ingestion failed after its retries: {exc}"}
    try:
        hot.jobs.failed(request.agent_id, request.job_id, error, clock())
    except Exception as failure:  # Redis may be what is failing; the caller's poll will time out
        log.error("could not mark ingestion job %s failed: %r", request.job_id, failure)


def _audit(store: MemoryStore, request: IngestRequest, result: Mapping[str, Any], now: float) -> None:
    text_digest = hashlib.sha256(request.text.encode("utf-8")).hexdigest()[:12]
    try:
        store.append_event(
            audit.event(
                request.agent_id,
                EventKind.ARCHIVAL_INGEST,
                footprint.ingest(request.text, result),
                actor=request.actor,
                event_id=audit_id(request.agent_id, "ingest", request.doc_id, text_digest),
                idempotency_key=request.idempotency_key,
                created_at=now,
                details={"doc_id": request.doc_id, "job_id": request.job_id, **result},
            )
        )
    except Exception:  # the chunks are stored; an audit gap must not fail (and re-run) the job
        log.exception("could not record the archival_ingest event of %s", request.doc_id)
