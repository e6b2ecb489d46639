"""Recall memory: write a note straight into it, search it.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Query

from vcm.api.deps import Agent, IdemHeader, ServiceDep, one_key
from vcm.api.models import (
    ERROR_RESPONSES,
    WRITE_ERROR_RESPONSES,
    AgentId,
    MessageOut,
    RecallHitOut,
    RecallNote,
    RecallPage,
)

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["memory"])


@router.post("/recall", response_model=MessageOut, responses=WRITE_ERROR_RESPONSES)
def write_recall(
    agent_id: AgentId, body: RecallNote, who: Agent, service: ServiceDep, idem: IdemHeader = None
) -> MessageOut:
    """A note straight into recall memory (searchable), never into the context window."""
    key = one_key(idem, body.idempotency_key)
    msg = service.write_recall(agent_id, body.content, role=body.role, idempotency_key=key, actor=who.actor)
    return MessageOut.of(msg)


@router.get("/recall", response_model=RecallPage, responses=ERROR_RESPONSES)
def search_recall(
    agent_id: AgentId,
    who: Agent,
    service: ServiceDep,
    query: Annotated[str, Query(description="search text")],
    mode: Annotated[str, Query(pattern="^(text|vector|hybrid)$")] = "hybrid",
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
    since: Annotated[float | None, Query(allow_inf_nan=False, description="unix time, inclusive")] = None,
    until: Annotated[float | None, Query(allow_inf_nan=False, description="unix time, exclusive")] = None,
) -> RecallPage:
    res = service.search_recall(agent_id, query, limit=limit, cursor=cursor, since=since, until=until, mode=mode)
    items = [
        RecallHitOut(message=MessageOut.of(h.message), score=h.score, **mark)
        for h, mark in zip(res.page.items, res.marks, strict=True)
    ]
    partial = res.page.stats is not None and res.page.stats.partial
    return RecallPage(items=items, next_cursor=res.page.next_cursor, mode=res.mode, partial=partial)
