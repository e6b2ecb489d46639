"""Archival memory: queue a document (its job answers at once, 202), poll the job, search.
Forgetting a document is :mod:`vcm.api.routes.lifecycle`'s.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from fastapi import APIRouter

from vcm.api.deps import Agent, IdemHeader, ServiceDep, one_key
from vcm.api.models import (
    ERROR_RESPONSES,
    WRITE_ERROR_RESPONSES,
    AgentId,
    ArchivalHitOut,
    ArchivalIngest,
    ArchivalPage,
    ArchivalSearch,
    IngestOut,
)

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["memory"])


@router.post("/archival", response_model=IngestOut, status_code=202, responses=WRITE_ERROR_RESPONSES)
def ingest_archival(
    agent_id: AgentId, body: ArchivalIngest, who: Agent, service: ServiceDep, idem: IdemHeader = None
) -> IngestOut:
    """Queue a document for archival memory (the ``ingest`` workers chunk, embed and store it)
    and return its job at once (202): poll ``GET /archival/jobs/{job_id}`` until ``done`` or
    ``failed``. The same document always maps to the same job; an idempotency key reused for a
    different document answers IDEMPOTENCY_MISMATCH and queues nothing."""
    job = service.ingest_archival(
        agent_id,
        body.text,
        doc_id=body.doc_id,
        source=body.source,
        metadata=body.metadata,
        actor=who.actor,
        idempotency_key=one_key(idem, body.idempotency_key),
    )
    return IngestOut.model_validate(job.as_dict())


@router.get("/archival/jobs/{job_id}", response_model=IngestOut, responses=ERROR_RESPONSES)
def ingest_job(agent_id: AgentId, job_id: str, who: Agent, service: ServiceDep) -> IngestOut:
    """An ingestion job: queued, running (chunks_done of chunks_total), done (result), failed (error) or
    cancelled (a reset of its agent: nothing stored)."""
    return IngestOut.model_validate(service.ingest_job(agent_id, job_id).as_dict())


@router.post("/archival/search", response_model=ArchivalPage, responses=ERROR_RESPONSES)
def search_archival(agent_id: AgentId, body: ArchivalSearch, who: Agent, service: ServiceDep) -> ArchivalPage:
    res = service.search_archival(agent_id, body.query, k=body.k, filters=body.filters, cursor=body.cursor)
    items = [ArchivalHitOut.of(h, mark) for h, mark in zip(res.page.items, res.marks, strict=True)]
    return ArchivalPage(items=items, next_cursor=res.page.next_cursor)
