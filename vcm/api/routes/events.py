"""The audit log: one agent's events (the agent or the admin), every agent's (the admin).

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from vcm import validation
from vcm.api.deps import Admin, Agent, ServiceDep
from vcm.api.models import ERROR_RESPONSES, AgentId, EventOut, EventPage, InjectionOut, InjectionPage
from vcm.service import MemoryService

# No router-wide tags: each route keeps the tags it had in the OpenAPI document.
router = APIRouter(prefix="/v1")


@dataclass(frozen=True)
class EventFilter:
    """The audit-log filters both event routes take."""

    kinds: list[str] | None
    since: float | None
    until: float | None
    actor: str | None
    idempotency_key: str | None
    limit: int
    cursor: str | None


def event_filter(
    kinds: Annotated[list[str] | None, Query(description="only these kinds (repeat the parameter)")] = None,
    since: Annotated[float | None, Query(allow_inf_nan=False, description="unix seconds, inclusive")] = None,
    until: Annotated[float | None, Query(allow_inf_nan=False, description="unix seconds, exclusive")] = None,
    actor: Annotated[str | None, Query(max_length=200, description="e.g. api:agent:<id>, cli, worker:spool")] = None,
    idempotency_key: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: str | None = None,
) -> EventFilter:
    return EventFilter(kinds, since, until, actor, idempotency_key, limit, cursor)


Filter = Annotated[EventFilter, Depends(event_filter)]


@router.get("/agents/{agent_id}/events", response_model=EventPage, responses=ERROR_RESPONSES, tags=["memory"])
def agent_events(agent_id: AgentId, who: Agent, f: Filter, service: ServiceDep) -> EventPage:
    return _events(service, agent_id, f)


@router.get("/events", response_model=EventPage, responses=ERROR_RESPONSES, tags=["tools", "admin"])
def all_events(
    who: Admin,
    f: Filter,
    service: ServiceDep,
    agent_id: Annotated[str | None, Query(description="only this agent")] = None,
) -> EventPage:
    if agent_id is not None:
        validation.agent_id(agent_id)
    return _events(service, agent_id, f)


@router.get("/agents/{agent_id}/injections", response_model=InjectionPage, responses=ERROR_RESPONSES, tags=["memory"])
def injections(
    agent_id: AgentId,
    who: Agent,
    service: ServiceDep,
    since: Annotated[float | None, Query(allow_inf_nan=False, description="unix seconds, inclusive")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: str | None = None,
) -> InjectionPage:
    """The injection log: for each prompt built for a model call, the ids of the facts, messages,
    skills and state keys its injected layers held and each layer's tokens (never content),
    oldest first."""
    items, next_cursor = service.injections(agent_id, since=since, limit=limit, cursor=cursor)
    return InjectionPage(items=[InjectionOut.of(i) for i in items], next_cursor=next_cursor)


def _events(service: MemoryService, agent_id: str | None, f: EventFilter) -> EventPage:
    page = service.events(
        agent_id,
        f.kinds,
        since=f.since,
        until=f.until,
        actor=f.actor,
        idempotency_key=f.idempotency_key,
        limit=f.limit,
        cursor=f.cursor,
    )
    return EventPage(items=[EventOut.of(e) for e in page.items], next_cursor=page.next_cursor)
