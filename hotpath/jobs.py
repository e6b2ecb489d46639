"""Archival ingestion jobs in Redis: what a caller polls while a worker ingests its document.

Ingestion (chunking, embedding, storing) takes seconds to minutes, so the API and the tools only
open a job and hand the document to the ``ingest`` queue; the worker moves the job on::

    queued ──▶ running ──▶ done      (result: chunks, written, embedding_version, ...)
       │           │
       │           ├─────▶ failed    (error: a coded error body; resubmitting reopens the job)
       └───────────┴─────▶ cancelled (the agent was reset, or deleted, before the chunks were
                                      stored: nothing written; resubmitting reopens the job)

A job's id is derived from the agent and the document's content (see
:func:`vcm.service.ingest_job_id`), so submitting the same document again finds the same job
instead of queueing a second one. Records expire ``ttl_s`` after their last change; a reset or a
snapshot restore keeps them (a deleted agent's go with it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import redis

from vcm.errors import NotFound
from vcm.hotpath import keys, lua

Status = Literal["queued", "running", "done", "failed", "cancelled"]
STATUSES: tuple[Status, ...] = ("queued", "running", "done", "failed", "cancelled")


@dataclass(frozen=True)
class IngestJob:
    job_id: str
    agent_id: str
    doc_id: str
    status: Status
    created_at: float
    updated_at: float
    chunks_total: int | None = None  # known once the worker has planned the chunks
    chunks_done: int = 0
    submissions: int = 1  # how many times the job was (re)opened: a failed job reopens on resubmission
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed", "cancelled")

    def as_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "doc_id": self.doc_id,
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "chunks_total": self.chunks_total,
            "chunks_done": self.chunks_done,
            "submissions": self.submissions,
            "result": self.result,
            "error": self.error,
        }


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _pairs(fields: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for name, value in fields.items():
        out += [name, json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else str(value)]
    return out


class JobBoard:
    """The jobs of every agent, one hash each under the agent's hash tag."""

    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        self.redis = client
        self.ttl_s = ttl_s
        self._open = client.register_script(lua.JOB_OPEN)
        self._update = client.register_script(lua.JOB_UPDATE)
        self._cancel = client.register_script(lua.JOB_CANCEL)

    def open(self, agent_id: str, job_id: str, doc_id: str, now: float) -> tuple[IngestJob, bool]:
        """The job, queued anew (True) unless one that has neither failed nor been cancelled exists
        (False)."""
        fields = {"status": "queued", "doc_id": doc_id, "created_at": repr(now), "updated_at": repr(now)}
        fields["chunks_done"] = "0"
        status, _ = self._open(keys=[keys.job(agent_id, job_id)], args=[self.ttl_s, *_pairs(fields)])
        return self.get(agent_id, job_id), _text(status) == "ok"

    def get(self, agent_id: str, job_id: str) -> IngestJob:
        raw = self.redis.hgetall(keys.job(agent_id, job_id))
        if not raw:
            raise NotFound(f"no ingestion job {job_id!r} for this agent (finished jobs expire)", job_id=job_id)
        f = {_text(k): _text(v) for k, v in raw.items()}
        status = f.get("status", "queued")
        return IngestJob(
            job_id=job_id,
            agent_id=agent_id,
            doc_id=f.get("doc_id", ""),
            status=status if status in STATUSES else "queued",
            created_at=float(f.get("created_at", 0)),
            updated_at=float(f.get("updated_at", 0)),
            chunks_total=int(f["chunks_total"]) if f.get("chunks_total") else None,
            chunks_done=int(f.get("chunks_done") or 0),
            submissions=int(f.get("submissions") or 1),
            result=json.loads(f["result"]) if f.get("result") else None,
            error=json.loads(f["error"]) if f.get("error") else None,
        )

    def progress(
        self, agent_id: str, job_id: str, now: float, *, chunks_total: int | None = None, chunks_done: int = 0
    ) -> bool:
        fields: dict[str, Any] = {"status": "running", "updated_at": repr(now), "chunks_done": chunks_done}
        if chunks_total is not None:
            fields["chunks_total"] = chunks_total
        return self._set(agent_id, job_id, fields)

    def done(self, agent_id: str, job_id: str, result: Mapping[str, Any], now: float) -> bool:
        chunks = int(result.get("chunks", 0) or 0)
        fields = {"status": "done", "updated_at": repr(now), "result": dict(result), "error": ""}
        return self._set(agent_id, job_id, fields | {"chunks_total": chunks, "chunks_done": chunks})

    def failed(self, agent_id: str, job_id: str, error: Mapping[str, Any], now: float) -> bool:
        return self._set(agent_id, job_id, {"status": "failed", "updated_at": repr(now), "error": dict(error)})

    def cancelled(self, agent_id: str, job_id: str, now: float) -> bool:
        """The worker found its job's agent gone or reset before its store write: it wrote nothing."""
        return self._set(agent_id, job_id, {"status": "cancelled", "updated_at": repr(now)})

    def cancel_open(self, agent_id: str, now: float, reason: str) -> list[str]:
        """Cancel every job of the agent still queued or running (a reset); the ids cancelled."""
        pattern = keys.job(agent_id, "").replace("[", "\\[").replace("*", "\\*").replace("?", "\\?") + "*"
        error = {"code": "CONFLICT", "message": reason}
        args: list[str | int] = [self.ttl_s, *_pairs({"status": "cancelled", "updated_at": repr(now), "error": error})]
        prefix = len(keys.job(agent_id, ""))
        found = self.redis.scan_iter(match=pattern, count=1000)
        return sorted(_text(k)[prefix:] for k in found if self._cancel(keys=[k], args=args))

    def _set(self, agent_id: str, job_id: str, fields: Mapping[str, Any]) -> bool:
        return bool(self._update(keys=[keys.job(agent_id, job_id)], args=[self.ttl_s, *_pairs(fields)]))
