"""Users and domains (admin), and the principals an agent belongs to: whose shared memory it reads
(docs/memory-model.md, "Shared memory").

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Path

from vcm.api.deps import Admin, Agent, ServiceDep
from vcm.api.models import ERROR_RESPONSES, WRITE_ERROR_RESPONSES, AgentId
from vcm.api.models.principals import (
    AgentPrincipalsIn,
    AgentPrincipalsOut,
    DomainCreate,
    PrincipalList,
    PrincipalOut,
    PrincipalRemovedOut,
    UserCreate,
)

router = APIRouter(prefix="/v1", tags=["principals"])

UserId = Annotated[str, Path(description="the user's id", max_length=128)]
DomainName = Annotated[str, Path(description="the domain's name", max_length=128)]


@router.post("/users", status_code=201, response_model=PrincipalOut, responses=WRITE_ERROR_RESPONSES)
def create_user(body: UserCreate, who: Admin, service: ServiceDep) -> PrincipalOut:
    """A user: its agents share the facts written with ``scope: user``. 409 CONFLICT when it exists."""
    return PrincipalOut.of(service.create_principal("user", body.user_id, actor=who.actor))


@router.get("/users", response_model=PrincipalList, responses=ERROR_RESPONSES)
def list_users(who: Admin, service: ServiceDep) -> PrincipalList:
    return PrincipalList(principals=[PrincipalOut.of(p) for p in service.list_principals("user")])


@router.delete("/users/{user_id}", response_model=PrincipalRemovedOut, responses=ERROR_RESPONSES)
def delete_user(user_id: UserId, who: Admin, service: ServiceDep) -> PrincipalRemovedOut:
    """The user and all its memory go; its agents stay, belonging to no user. Idempotent."""
    removed = service.delete_principal("user", user_id, actor=who.actor)
    return PrincipalRemovedOut(kind="user", name=user_id, removed=removed)


@router.post("/domains", status_code=201, response_model=PrincipalOut, responses=WRITE_ERROR_RESPONSES)
def create_domain(body: DomainCreate, who: Admin, service: ServiceDep) -> PrincipalOut:
    """A domain (a team, a product): its agents share the facts written with ``scope: domain``."""
    return PrincipalOut.of(service.create_principal("domain", body.domain, actor=who.actor))


@router.get("/domains", response_model=PrincipalList, responses=ERROR_RESPONSES)
def list_domains(who: Admin, service: ServiceDep) -> PrincipalList:
    return PrincipalList(principals=[PrincipalOut.of(p) for p in service.list_principals("domain")])


@router.delete("/domains/{domain}", response_model=PrincipalRemovedOut, responses=ERROR_RESPONSES)
def delete_domain(domain: DomainName, who: Admin, service: ServiceDep) -> PrincipalRemovedOut:
    """The domain and all its memory go; its agents stay, in no domain. Idempotent."""
    removed = service.delete_principal("domain", domain, actor=who.actor)
    return PrincipalRemovedOut(kind="domain", name=domain, removed=removed)


@router.get("/agents/{agent_id}/principals", response_model=AgentPrincipalsOut, responses=ERROR_RESPONSES)
def get_agent_principals(agent_id: AgentId, who: Agent, service: ServiceDep) -> AgentPrincipalsOut:
    return AgentPrincipalsOut(agent_id=agent_id, **service.agent_principals(agent_id))


@router.put("/agents/{agent_id}/principals", response_model=AgentPrincipalsOut, responses=WRITE_ERROR_RESPONSES)
def set_agent_principals(
    agent_id: AgentId, body: AgentPrincipalsIn, who: Admin, service: ServiceDep
) -> AgentPrincipalsOut:
    """Name the agent's user and domain (both fields, null for none; NOT_FOUND for an unknown
    one); audited (``agent_principals``: before and after)."""
    record = service.set_agent_principals(agent_id, user_id=body.user_id, domain=body.domain, actor=who.actor)
    return AgentPrincipalsOut(agent_id=agent_id, user_id=record.user_id, domain=record.domain)
