"""Key/value state with revisions and TTLs (:mod:`vcm.api.routes.state`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vcm.api.models.common import RequestBody
from vcm.store.principals import is_holder, principal_of


class StateIn(RequestBody):
    value: Any
    ttl_s: int | None = Field(None, ge=1)
    rev: str | None = Field(
        None, alias="_rev", description='only if the key is still at this rev; "": only if it does not exist yet'
    )
    justification: str | None = Field(None, max_length=2000)
    scope: Literal["agent", "user", "domain"] = Field(
        "agent", description="user / domain: the key of the agent's user or domain, read by its agents (admin only)"
    )


class StateOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    key: str
    value: Any
    rev: str = Field(alias="_rev")
    updated_at: float
    expires_at: float | None
    scope: str = Field("agent", description="agent, or user / domain: held by the agent's user or domain")

    @classmethod
    def of(cls, e: Any) -> StateOut:
        scope = principal_of(e.agent_id)[0] if is_holder(e.agent_id) else "agent"
        return cls.model_validate(
            {
                "key": e.key,
                "value": e.value,
                "_rev": e.rev,
                "updated_at": e.updated_at,
                "expires_at": e.expires_at,
                "scope": scope,
            }
        )


class StateList(BaseModel):
    state: list[StateOut]
