"""Users and domains, and an agent's (:mod:`vcm.api.routes.principals`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from vcm.api.models.common import RequestBody
from vcm.store.principals import Principal

NAME = "1-128 of letters, digits, '_', '.', '-' (starting with a letter or digit)"


class UserCreate(RequestBody):
    user_id: str = Field(description=NAME, max_length=128)


class DomainCreate(RequestBody):
    domain: str = Field(description=NAME, max_length=128)


class PrincipalOut(BaseModel):
    kind: str = Field(description="user | domain")
    name: str = Field(description="the user id or the domain's name")
    created_at: float

    @classmethod
    def of(cls, p: Principal) -> PrincipalOut:
        return cls(kind=p.kind, name=p.name, created_at=p.created_at)


class PrincipalList(BaseModel):
    principals: list[PrincipalOut]


class PrincipalRemovedOut(BaseModel):
    kind: str
    name: str
    removed: dict[str, int] = Field(description="what went, by kind (counts only)")


class AgentPrincipalsIn(RequestBody):
    user_id: str | None = Field(description=f"its user ({NAME}); null: none", max_length=128)
    domain: str | None = Field(description=f"its domain ({NAME}); null: none", max_length=128)


class AgentPrincipalsOut(BaseModel):
    agent_id: str
    user_id: str | None
    domain: str | None
