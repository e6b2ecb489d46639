"""Archival memory: ingestion jobs and vector search (:mod:`vcm.api.routes.archival`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from vcm.api.models.common import IDEMPOTENCY_FIELD, RequestBody
from vcm.store.types import ArchivalHit


class ArchivalSearch(RequestBody):
    query: str
    k: int = Field(10, ge=1, le=1000)
    filters: dict[str, Any] | None = Field(None, description="equalities on doc_id, source or metadata keys")
    cursor: str | None = None


class ArchivalIngest(RequestBody):
    text: str
    doc_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-/]{0,199}$")
    source: str = Field("", max_length=2048)
    metadata: dict[str, Any] | None = None
    idempotency_key: str | None = IDEMPOTENCY_FIELD


class ArchivalHitOut(BaseModel):
    doc_id: str
    chunk_index: int
    text: str
    score: float
    source: str
    metadata: dict[str, Any]
    char_start: int
    char_end: int
    embedding_version: str
    model_id: str
    created_at: float
    valid_until: float | None
    tainted: bool = False
    taint_reasons: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, hit: ArchivalHit, taint: Mapping[str, Any] | None = None) -> ArchivalHitOut:
        c = hit.chunk
        return cls(
            **dict(taint or {}),
            doc_id=c.doc_id,
            chunk_index=c.chunk_index,
            text=c.text,
            score=hit.score,
            source=c.source,
            metadata=dict(c.metadata),
            char_start=c.char_start,
            char_end=c.char_end,
            embedding_version=c.embedding_version,
            model_id=c.model_id,
            created_at=c.created_at,
            valid_until=c.valid_until,
        )


class ArchivalPage(BaseModel):
    items: list[ArchivalHitOut]
    next_cursor: str | None


class IngestOut(BaseModel):
    """An archival ingestion job (:class:`vcm.hotpath.jobs.IngestJob`): poll it until done, failed or
    cancelled (its agent was reset before the chunks were stored)."""

    job_id: str
    doc_id: str
    status: Literal["queued", "running", "done", "failed", "cancelled"]
    created_at: float
    updated_at: float
    chunks_total: int | None = Field(None, description="known once the worker has planned the chunks")
    chunks_done: int
    submissions: int = Field(description="times the job was queued: a failed or cancelled one requeues on resubmission")
    result: dict[str, Any] | None = Field(None, description="when done: chunks, written, embedding_version, ...")
    error: dict[str, Any] | None = Field(None, description="when failed (or cancelled by a reset): the coded error")
