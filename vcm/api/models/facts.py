"""Structured memory: facts, the Working Set and the entity graph (:mod:`vcm.api.routes.facts`,
:mod:`vcm.api.routes.entities`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from vcm.api.models.common import RequestBody


class EvidenceIn(RequestBody):
    kind: Literal["message", "tool_call", "document"]
    id: str = Field(min_length=1, max_length=256)
    span: list[int] | None = Field(None, min_length=2, max_length=2)


class FactIn(RequestBody):
    value: str = Field(min_length=1)
    type: str = Field(min_length=1, max_length=32)
    key: str | None = Field(None, max_length=256)
    scope: Literal["agent", "user", "domain"] = Field(
        "agent",
        description="agent: the agent's own; user / domain: held by the agent's user or domain and read by "
        "each of its agents (an agent's write lands shadow until promoted; the admin's as asked)",
    )
    category: str = Field("", max_length=64)
    tags: list[str] = Field(default_factory=list)
    importance: float = Field(0.5, ge=0.0, le=1.0)
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    evidence: list[EvidenceIn] = Field(default_factory=list, max_length=64)
    status: Literal["active", "shadow"] = "active"
    ttl_s: int | None = Field(None, ge=0, description="lifetime in seconds; 0 never expires; default: the type's")
    justification: str | None = Field(None, max_length=2000)
    idempotency_key: str | None = None
    source: str | None = Field(
        None, max_length=200, description="where a fact without evidence comes from (recorded; default: api)"
    )


class FactOut(BaseModel):
    fact_id: str
    scope: str
    type: str
    key: str | None
    value: str
    category: str
    tags: list[str]
    importance: float
    confidence: float
    evidence: list[dict[str, Any]]
    status: str
    conflict_with: list[str]
    created_at: float
    updated_at: float
    last_used: float
    access_count: int
    expires_at: float | None
    version: int
    duplicate_of: str | None = Field(None, description="an UNSURE candidate: the fact it may duplicate")

    @classmethod
    def of(cls, f: Any) -> FactOut:
        return cls(
            fact_id=f.fact_id, scope=f.scope, type=f.type, key=f.key, value=f.value, category=f.category,
            tags=list(f.tags), importance=f.importance, confidence=f.confidence, evidence=[dict(e) for e in f.evidence],
            status=f.status, conflict_with=list(f.conflict_with), created_at=f.created_at, updated_at=f.updated_at,
            last_used=f.last_used, access_count=f.access_count, expires_at=f.expires_at, version=f.version,
            duplicate_of=f.duplicate_of,
        )  # fmt: skip


class RememberOut(BaseModel):
    decision: str = Field(description="MATCH, NEW, CONFLICT or UNSURE (REPLAYED for a keyed retry)")
    fact: FactOut
    conflicts: list[FactOut]


class FactList(BaseModel):
    facts: list[FactOut]


class FactHitOut(BaseModel):
    fact: FactOut
    score: float


class FactHits(BaseModel):
    hits: list[FactHitOut]


class FactArchiveIn(RequestBody):
    types: list[str] | None = None
    tags: list[str] | None = None
    category: str | None = None
    until: float | None = Field(None, description="only facts last updated before this unix time")
    max_importance: float | None = Field(None, ge=0.0, le=1.0, description="only facts at most this important")


class FactSettleIn(RequestBody):
    action: str = Field(
        description="promote (make it active, an UNSURE candidate as a fact of its own), merge (an UNSURE "
        "candidate into the fact it may duplicate) or reject (remove it)"
    )


class SettledOut(BaseModel):
    action: str
    fact: FactOut | None = Field(description="the fact after it; null: removed")


class FactStatsOut(BaseModel):
    facts: int
    by_type: dict[str, int]
    by_status: dict[str, int]
    by_scope: dict[str, int]
    conflicts: int = Field(description="live facts marked as conflicting with another value of their key")


class ArchivedOut(BaseModel):
    archived: int


class ConsolidatedOut(BaseModel):
    promoted: int
    kept_shadow: int
    merged: int = Field(0, description="UNSURE candidates merged into the fact they duplicate")
    contradicted: int


class WorkingSetItemOut(BaseModel):
    fact_id: str
    type: str
    key: str | None
    value: str
    utility: float
    conflict: bool
    evidence: list[dict[str, Any]]


class WorkingSetOut(BaseModel):
    sections: dict[str, list[WorkingSetItemOut]] = Field(
        description="goal, constraints, facts, entities, relations, open_questions, next_actions, risk_flags"
    )
    dropped: dict[str, int] = Field(description="items each section's cap left out (lowest utility first)")


class EntityGraphOut(BaseModel):
    entity: FactOut
    neighbours: list[FactOut] = Field(description="entities within depth relates_to hops, nearest first")
    relations: list[FactOut] = Field(description="relation facts (key source|relation|target) among them")
    mentioned_in: list[str] = Field(description="ids of messages that mention the entity")
