"""Client instances of an agent (:mod:`vcm.service.replicas`; the client side is :mod:`vcm.sync`):
the agent's change feed, the conflicts instances resolve, and the sync status they report; the
agent itself or the admin.

======  ========================================  =====  ======================================================
method  path                                      who    what
======  ========================================  =====  ======================================================
GET     /v1/agents/{id}/changes?after=&limit=     agent  a page of the change feed (polling); no ``after``: none,
                                                         only where the feed is now (``next_after``)
GET     /v1/agents/{id}/changes/stream            agent  the change feed as server-sent events, from
                                                         ``Last-Event-ID`` or ``?after=`` (none: from now on)
POST    /v1/agents/{id}/conflicts                 agent  keep a conflict an instance resolved (an audit row)
PUT     /v1/agents/{id}/instances/{instance_id}   agent  an instance's sync status after a sync
GET     /v1/agents/{id}/instances                 agent  every instance's latest status, with its age
======  ========================================  =====  ======================================================

The stream and its frames are described in :mod:`vcm.api.sync`, which holds these routes' bodies;
it is left out of the OpenAPI schema, like the viewer's stream: it is not a JSON operation.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

import time
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from vcm.api.deps import Agent, AuthorityDep, ServiceDep
from vcm.api.models import ERROR_RESPONSES, AgentId
from vcm.api.sync import (
    POSITION,
    RECHECK_S,
    ChangeOut,
    ChangePageOut,
    ChangeWatch,
    ConflictIn,
    ConflictOut,
    InstanceId,
    InstanceList,
    InstanceOut,
    InstanceStatusIn,
    position,
)
from vcm.api.viewer import STREAM_HEADERS, feed

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["sync"])


@router.get("/changes", response_model=ChangePageOut, responses=ERROR_RESPONSES)
def changes(
    agent_id: AgentId,
    who: Agent,
    service: ServiceDep,
    after: Annotated[str | None, Query(max_length=41, pattern=POSITION, description="a change id, or 0")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ChangePageOut:
    """The agent's changes after ``after`` (kind, key, version, op, time; never content). Without
    ``after``: no changes, and ``next_after`` is where the feed is now (start there, then read
    the memory: no later change is missed)."""
    page = service.changes(agent_id, after=after, limit=limit, checked=True)
    return ChangePageOut(
        changes=[ChangeOut.model_validate(c.as_dict()) for c in page.changes],
        next_after=page.next_after,
        head=page.head,
        gap=page.gap,
    )


@router.get("/changes/stream", include_in_schema=False)
def change_stream(
    agent_id: AgentId,
    request: Request,
    who: Agent,
    service: ServiceDep,
    authority: AuthorityDep,
    authorization: Annotated[str | None, Header()] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    after: Annotated[str | None, Query(max_length=41)] = None,
) -> StreamingResponse:
    """The change feed as server-sent events (see :mod:`vcm.api.sync`). A reconnecting client's
    ``Last-Event-ID`` wins over the ``after`` its URL still carries."""
    start = position(last_event_id, "Last-Event-ID") or position(after, "after")
    watch = ChangeWatch(service, agent_id, start)
    checked = [time.monotonic()]

    def allowed() -> None:
        now = time.monotonic()
        if now - checked[0] >= RECHECK_S:
            authority.principal(authorization).authorize(agent_id)
            checked[0] = now

    settings = service.settings.sync
    frames = feed(request, watch, allowed, poll_s=settings.poll_s, max_s=settings.max_stream_s)
    return StreamingResponse(frames, media_type="text/event-stream", headers=STREAM_HEADERS)


@router.post("/conflicts", response_model=ConflictOut, responses=ERROR_RESPONSES)
def conflict(agent_id: AgentId, body: ConflictIn, who: Agent, service: ServiceDep) -> ConflictOut:
    """Keep a conflict an instance found (a change based on a stale version) and how its
    strategy resolved it, with both versions' metadata and, where a value was overwritten or
    dropped, that value. Idempotent by ``conflict_id``."""
    record = body.model_dump(exclude_unset=False)
    if "losing_value" not in body.model_fields_set:
        record.pop("losing_value")
    return ConflictOut(event_id=service.record_conflict(agent_id, record, actor=who.actor))


@router.put("/instances/{instance_id}", response_model=InstanceOut, responses=ERROR_RESPONSES)
def report(
    agent_id: AgentId, instance_id: InstanceId, body: InstanceStatusIn, who: Agent, service: ServiceDep
) -> InstanceOut:
    """An instance's sync status, as it was after its latest sync (the latest report wins)."""
    return InstanceOut.of(service.report_instance(agent_id, instance_id, body.model_dump()))


@router.get("/instances", response_model=InstanceList, responses=ERROR_RESPONSES)
def instances(agent_id: AgentId, who: Agent, service: ServiceDep) -> InstanceList:
    """Every instance's latest sync status, with how long ago it reported and whether it has
    gone silent."""
    return InstanceList(instances=[InstanceOut.of(r) for r in service.instances(agent_id)])
