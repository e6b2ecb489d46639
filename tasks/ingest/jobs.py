"""The worker side of an archival ingestion job: run the ingester, move the job on, audit it.

The API and the tools open the job and queue the document
(:meth:`vcm.service.search.Search.ingest_archival`); the ``tasks.ingest_archival`` Celery task on
the ``ingest`` queue calls :func:`run_ingest_job`. Everything here is idempotent: the ingester
writes chunks under keys derived from the document and the embedding version, the audit row has a
fixed id, and a job that is done stays done, so a redelivered task changes nothing.

A job whose agent is deleted or reset while it runs ends ``cancelled`` and writes nothing: each
progress report, the last one right before the store write, checks that the agent still exists in
the store (a delete removes the store's rows first) and that its job was not cancelled (a reset
cancels open jobs), and stops the ingester otherwise. What remains is the window between that
last check and the store write's commit (a store read, a Redis read, then the write: milliseconds):
a delete landing there leaves the document's chunks under the deleted agent's id, where a new agent
of the same id would find them; a reset landing there lets them be stored (a reset keeps archival
documents anyway) while the job reads ``cancelled``. Closing it needs the store write itself to
check the agent (a generation fence), which this module cannot give.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vcm.errors import NotFound, StoreUnavailable, VcmError
from vcm.hotpath.state import HotState
from vcm.obs import audit, footprint
from vcm.store.audit_names import EventKind, audit_id
from vcm.store.port import MemoryStore
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
    ) -> Mapping[str, Any]: ...


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

    def progress(done: int, total: int | None = None) -> None:
        if not _wanted(hot, store, agent, job_id):
            raise JobCancelled(job_id)
        hot.jobs.progress(agent, job_id, clock(), chunks_total=total, chunks_done=done)

    try:
        progress(0)
        doc, text = request.doc_id, request.text
        result = dict(ingest(agent, doc, text, source=request.source, metadata=request.metadata, progress=progress))
    except JobCancelled:
        hot.jobs.cancelled(agent, job_id, clock())  # a deleted agent's record is gone: a no-op
        log.info("ingestion job %s of %s cancelled: its agent was deleted or reset", job_id, agent)
        return JobOutcome("cancelled", job_id, agent, {"doc_id": request.doc_id})
    except StoreUnavailable:
        raise
    except VcmError as exc:
        hot.jobs.failed(agent, job_id, exc.to_dict(), clock())
        return JobOutcome("failed", job_id, agent, {"error": exc.to_dict()})
    _audit(store, request, result, clock())
    hot.jobs.done(agent, job_id, {"doc_id": request.doc_id, **result}, clock())
    return JobOutcome("done", job_id, agent, {"doc_id": request.doc_id, **result})


def _wanted(hot: HotState, store: MemoryStore, agent_id: str, job_id: str) -> bool:
    """Whether the job may still write: its agent exists in the store, and its record, when there
    is one (an expired or flushed record lets the job go on), is not cancelled."""
    try:
        store.get_agent(agent_id)
    except NotFound:
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
