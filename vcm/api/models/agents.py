"""Agents, their tokens, and the admin's Conveyance report (:mod:`vcm.api.routes.agents`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from vcm.api.models.common import RequestBody
from vcm.types import AgentInfo


class AgentCreate(RequestBody):
    agent_id: str = Field(description="1-128 of letters, digits, '_', '.', '-'")
    model: str | None = Field(None, description="a model from the server's [models]; default: default_model")
    system_prompt: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list, description="tool schemas counted into the window")
    vcm_tools: bool = Field(False, description="also count vcm's own tool schemas (GET /v1/tools)")
    user_id: str | None = Field(None, max_length=128, description="the user it belongs to (created first)")
    domain: str | None = Field(None, max_length=128, description="the domain it belongs to (created first)")


class AgentOut(BaseModel):
    agent_id: str
    model: str
    window: int
    max_tokens: int
    system_tokens: int
    user_id: str | None = Field(None, description="the user whose memory it shares")
    domain: str | None = Field(None, description="the domain whose memory it shares")

    @classmethod
    def of(cls, info: AgentInfo, principals: Mapping[str, str | None] | None = None) -> AgentOut:
        return cls(
            agent_id=info.agent_id,
            model=info.model,
            window=info.window,
            max_tokens=info.max_tokens,
            system_tokens=info.system_tokens,
            user_id=(principals or {}).get("user_id"),
            domain=(principals or {}).get("domain"),
        )


class AgentCreated(BaseModel):
    agent: AgentOut
    token: str = Field(description="the agent's bearer token; shown only now, stored only as a hash")


class AgentList(BaseModel):
    agents: list[str]


class TokenOut(BaseModel):
    agent_id: str
    token: str


class Figure(BaseModel):
    conveyance: float = Field(description="C = (W*R*H/T) * Ctx^alpha; 0 when zeroed_by is not empty")
    zeroed_by: list[str]
    factors: dict[str, float] = Field(description="W, R, H, T, Ctx and Ctx's parts L, I, A, G")
    signals: dict[str, int]


class AgentFigure(Figure):
    message_vectors: int


class ReportOut(BaseModel):
    generated_at: float
    alpha: float
    overall: Figure
    unreachable: dict[str, str]
    agents: dict[str, AgentFigure]
