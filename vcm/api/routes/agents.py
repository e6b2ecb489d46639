"""Agents and their tokens (admin), one agent's settings, and the admin's Conveyance report.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Query

from vcm import validation
from vcm.api.deps import Admin, Agent, IdemHeader, ServiceDep
from vcm.api.models import (
    ERROR_RESPONSES,
    WRITE_ERROR_RESPONSES,
    AgentCreate,
    AgentCreated,
    AgentId,
    AgentList,
    AgentOut,
    ReportOut,
    TokenOut,
)
from vcm.eval.report import build_report
from vcm.tools import schemas as tools

router = APIRouter(prefix="/v1", tags=["agents"])


@router.post("/agents", status_code=201, response_model=AgentCreated, responses=WRITE_ERROR_RESPONSES)
def create_agent(body: AgentCreate, who: Admin, service: ServiceDep) -> AgentCreated:
    """Create an agent and issue its bearer token. The token is in this response only (vcm keeps
    a hash), so this call cannot be replayed: repeating it answers 409 CONFLICT; issue a new
    token with POST /v1/agents/{id}/token. ``user_id`` / ``domain``: the user and domain it
    belongs to, which must exist (NOT_FOUND before anything is created)."""
    tool_list = [*body.tools, *(tools.tool_schemas() if body.vcm_tools else [])]
    for kind, name in (("user", body.user_id), ("domain", body.domain)):
        if name is not None:
            service.get_principal(kind, name)
    info, token = service.create_agent_with_token(
        body.agent_id, model=body.model, system_prompt=body.system_prompt, tools=tool_list, actor=who.actor
    )
    if body.user_id is not None or body.domain is not None:
        service.set_agent_principals(body.agent_id, user_id=body.user_id, domain=body.domain, actor=who.actor)
    return AgentCreated(agent=AgentOut.of(info, service.agent_principals(body.agent_id)), token=token)


@router.get("/agents", response_model=AgentList, responses=ERROR_RESPONSES)
def list_agents(who: Admin, service: ServiceDep) -> AgentList:
    return AgentList(agents=service.agents())


@router.get("/agents/{agent_id}", response_model=AgentOut, responses=ERROR_RESPONSES)
def get_agent(agent_id: AgentId, who: Agent, service: ServiceDep) -> AgentOut:
    return AgentOut.of(service.agent(agent_id), service.agent_principals(agent_id))


@router.post("/agents/{agent_id}/token", response_model=TokenOut, responses=ERROR_RESPONSES)
def rotate_token(agent_id: AgentId, who: Admin, service: ServiceDep, idem: IdemHeader = None) -> TokenOut:
    """A new bearer token for the agent; the previous one stops working at once. With an
    Idempotency-Key a retry answers with the same new token instead of revoking it."""
    return TokenOut(agent_id=agent_id, token=service.rotate_token(agent_id, idempotency_key=idem))


@router.get("/report", response_model=ReportOut, responses=ERROR_RESPONSES, tags=["admin"])
def conveyance_report(
    who: Admin,
    service: ServiceDep,
    agent_id: Annotated[list[str] | None, Query(description="only these agents (repeat)")] = None,
    since: Annotated[float | None, Query(allow_inf_nan=False)] = None,
) -> ReportOut:
    """The Conveyance figure per agent and overall (see docs/operations.md)."""
    for one in agent_id or ():
        validation.agent_id(one)
    return ReportOut.model_validate(build_report(service, agent_id, since=since).as_dict())
