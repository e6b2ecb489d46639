"""Structured memory, state: key/values with a _rev and an optional TTL; the agent itself or the
admin.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from vcm.api.deps import Agent, ServiceDep
from vcm.api.models import ERROR_RESPONSES, WRITE_ERROR_RESPONSES, AgentId, RemovedOut, StateIn, StateList, StateOut

# Tagged with the facts: state is the other half of structured memory.
router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["facts"])

Key = Annotated[str, Path(max_length=128)]
ScopeQ = Annotated[Literal["agent", "user", "domain"], Query(description="whose key (user, domain: the admin's)")]


@router.get("/state", response_model=StateList, responses=ERROR_RESPONSES)
def list_state(agent_id: AgentId, who: Agent, service: ServiceDep) -> StateList:
    return StateList(state=[StateOut.of(e) for e in service.list_state(agent_id)])


@router.delete("/state", response_model=RemovedOut, responses=WRITE_ERROR_RESPONSES)
def clear_state(agent_id: AgentId, who: Agent, service: ServiceDep) -> RemovedOut:
    return RemovedOut(agent_id=agent_id, removed={"state": service.delete_state(agent_id, None, actor=who.actor)})


@router.get("/state/{key}", response_model=StateOut, responses=ERROR_RESPONSES)
def get_state(agent_id: AgentId, key: Key, who: Agent, service: ServiceDep) -> StateOut:
    return StateOut.of(service.get_state(agent_id, key))


@router.put("/state/{key}", response_model=StateOut, responses=WRITE_ERROR_RESPONSES)
def set_state(agent_id: AgentId, key: Key, body: StateIn, who: Agent, service: ServiceDep) -> StateOut:
    """Set a key (``_rev``: only if unchanged since, ``""``: only if it does not exist yet;
    ``ttl_s``: expires after that long; ``scope`` user / domain: the key of the agent's user or
    domain, which every agent of it reads; the admin's only)."""
    entry = service.set_state(
        agent_id, key, body.value, ttl_s=body.ttl_s, expected_rev=body.rev, justification=body.justification,
        scope=body.scope, actor=who.actor,
    )  # fmt: skip
    return StateOut.of(entry)


@router.delete("/state/{key}", response_model=RemovedOut, responses=WRITE_ERROR_RESPONSES)
def delete_state(
    agent_id: AgentId,
    key: Key,
    who: Agent,
    service: ServiceDep,
    rev: Annotated[str | None, Query(alias="_rev")] = None,
    scope: ScopeQ = "agent",
) -> RemovedOut:
    removed = service.delete_state(agent_id, key, expected_rev=rev, scope=scope, actor=who.actor)
    return RemovedOut(agent_id=agent_id, removed={"state": removed} if removed else {})
