"""Structured memory, facts: remember, list, search, stats, get, forget, archive, consolidate, and
the Working Set built from them; the agent itself or the admin.

Route order matters: ``/facts/search`` and ``/facts/stats`` are declared before ``/facts/{fact_id}``,
which would otherwise take them.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from dataclasses import replace
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query

from vcm.api.deps import Admin, Agent, IdemHeader, ServiceDep, one_key
from vcm.api.models import (
    ERROR_RESPONSES,
    WRITE_ERROR_RESPONSES,
    AgentId,
    ArchivedOut,
    ConsolidatedOut,
    FactArchiveIn,
    FactHitOut,
    FactHits,
    FactIn,
    FactList,
    FactOut,
    FactSettleIn,
    FactStatsOut,
    RememberOut,
    RemovedOut,
    SettledOut,
    WorkingSetOut,
)
from vcm.store.types import FactQuery

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["facts"])

TypeQ = Annotated[list[str] | None, Query(alias="type", description="fact types (repeat)")]
TagQ = Annotated[list[str] | None, Query(alias="tag", description="tags, all required (repeat)")]
StatusQ = Annotated[
    list[Literal["shadow", "active", "expired", "archived"]] | None,
    Query(alias="status", description="shadow, active, expired, archived (repeat); default: see the route"),
]
Unit = Annotated[float | None, Query(ge=0.0, le=1.0)]
Time = Annotated[float | None, Query(ge=0.0, description="unix seconds; since: inclusive, until: exclusive")]
FactId = Annotated[str, Path(max_length=256)]


@router.post("/facts", response_model=RememberOut, responses=WRITE_ERROR_RESPONSES)
def remember(agent_id: AgentId, body: FactIn, who: Agent, service: ServiceDep, idem: IdemHeader = None) -> RememberOut:
    """Keep a fact: its evidence must name the agent's messages, tool calls or documents
    (VALIDATION_ERROR otherwise); without evidence an agent's fact lands ``shadow`` (the admin's
    and ``sticky`` ones as asked), and so does any entity or relation written here. Then the
    policy guard (POLICY_REFUSED without a justification) and dedup: MATCH joins an existing
    fact, CONFLICT keeps both values of a key, NEW adds it. ``scope`` user or domain: the fact
    lives with the agent's user or domain (VALIDATION_ERROR when it has none), every agent of it
    reads it, and an agent's write lands ``shadow`` until promoted (the admin's as asked)."""
    res = service.remember(
        agent_id, body.value, type=body.type, scope=body.scope, key=body.key, category=body.category,
        tags=body.tags, importance=body.importance, confidence=body.confidence,
        evidence=[e.model_dump(exclude_none=True) for e in body.evidence], status=body.status, ttl_s=body.ttl_s,
        justification=body.justification, idempotency_key=one_key(idem, body.idempotency_key), actor=who.actor,
        source=body.source or "api",
    )  # fmt: skip
    return RememberOut(
        decision=res.decision, fact=FactOut.of(res.fact), conflicts=[FactOut.of(f) for f in res.conflicts]
    )


class FactFilters:
    """The filters ``GET /facts`` and ``GET /facts/search`` share (every one given must match)."""

    def __init__(
        self,
        types: TypeQ = None,
        tags: TagQ = None,
        statuses: StatusQ = None,
        scope: str | None = None,
        key: str | None = None,
        category: Annotated[str | None, Query(max_length=64)] = None,
        min_importance: Unit = None,
        max_importance: Unit = None,
        min_confidence: Unit = None,
        updated_since: Time = None,
        updated_until: Time = None,
        created_since: Time = None,
        created_until: Time = None,
        decision: Annotated[
            Literal["unsure"] | None, Query(description="unsure: only UNSURE dedup candidates, for review")
        ] = None,
    ) -> None:
        self.named_statuses = bool(statuses)
        self.query = FactQuery(
            scope=scope, types=types, key=key, statuses=statuses or FactQuery.statuses, category=category, tags=tags,
            min_importance=min_importance, max_importance=max_importance, min_confidence=min_confidence,
            since=updated_since, until=updated_until, created_since=created_since, created_until=created_until,
            unsure=decision == "unsure",
        )  # fmt: skip


Filters = Annotated[FactFilters, Depends()]


@router.get("/facts", response_model=FactList, responses=ERROR_RESPONSES)
def list_facts(
    agent_id: AgentId,
    who: Agent,
    service: ServiceDep,
    filters: Filters,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> FactList:
    """The agent's facts, newest first; with no ``status``, the live ones (active and shadow,
    each marked with its status). ``decision=unsure``: the UNSURE dedup candidates waiting for
    review, each with the fact it may duplicate (``duplicate_of``); settle them with
    ``POST .../facts/{fact_id}/settle``."""
    query = replace(filters.query, limit=limit)
    if not filters.named_statuses:
        query = replace(query, statuses=None)  # the service's default for a listing: the live ones
    return FactList(facts=[FactOut.of(f) for f in service.list_facts(agent_id, query)])


@router.get("/facts/search", response_model=FactHits, responses=ERROR_RESPONSES)
def search_facts(
    agent_id: AgentId,
    who: Agent,
    service: ServiceDep,
    query: Annotated[str, Query(min_length=1, max_length=4000)],
    filters: Filters,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> FactHits:
    """Hybrid search (BM25 + embedding cosine) over the facts that pass the filters; with no
    ``status``, active facts only. ``score`` is the fused score in [0, 1], comparable across
    queries (see the memory model page)."""
    hits = service.search_facts(agent_id, query, filters=replace(filters.query, limit=limit))
    return FactHits(hits=[FactHitOut(fact=FactOut.of(h.fact), score=h.score) for h in hits])


@router.get("/facts/stats", response_model=FactStatsOut, responses=ERROR_RESPONSES)
def fact_stats(agent_id: AgentId, who: Agent, service: ServiceDep) -> FactStatsOut:
    return FactStatsOut.model_validate(service.fact_stats(agent_id))


@router.post("/facts/archive", response_model=ArchivedOut, responses=WRITE_ERROR_RESPONSES)
def archive(agent_id: AgentId, body: FactArchiveIn, who: Agent, service: ServiceDep) -> ArchivedOut:
    """Move matching facts to ``archived`` (kept, no longer recalled or searched)."""
    archived = service.archive_facts(
        agent_id, types=body.types, tags=body.tags, category=body.category, until=body.until,
        max_importance=body.max_importance, actor=who.actor,
    )  # fmt: skip
    return ArchivedOut(archived=archived)


@router.post("/facts/consolidate", response_model=ConsolidatedOut, responses=WRITE_ERROR_RESPONSES)
def consolidate(agent_id: AgentId, who: Agent, service: ServiceDep) -> ConsolidatedOut:
    """Run the replay test on the agent's shadow facts now (beat does it periodically)."""
    return ConsolidatedOut.model_validate(service.consolidate(agent_id, actor=who.actor))


@router.get("/working-set", response_model=WorkingSetOut, responses=ERROR_RESPONSES)
def working_set(
    agent_id: AgentId, who: Agent, service: ServiceDep, query: Annotated[str, Query(max_length=4000)] = ""
) -> WorkingSetOut:
    """The Working Set (seed 002): goal, constraints, top facts, entities, relations, open
    questions, next actions and risk flags, each capped, ranked by utility for ``query``."""
    return WorkingSetOut.model_validate(service.working_set(agent_id, query).as_dict())


@router.post("/facts/{fact_id}/settle", response_model=SettledOut, responses=WRITE_ERROR_RESPONSES)
def settle(agent_id: AgentId, fact_id: FactId, body: FactSettleIn, who: Admin, service: ServiceDep) -> SettledOut:
    """A person's word on a shadow fact (the admin's token): ``promote`` makes it active (an
    entity or relation gets its graph edges; an UNSURE candidate becomes a fact of its own),
    ``merge`` joins an UNSURE candidate to the fact it may duplicate, ``reject`` removes it;
    CONFLICT if it is not shadow."""
    fact = service.settle_fact(agent_id, fact_id, body.action, actor=who.actor)
    return SettledOut(action=body.action, fact=None if fact is None else FactOut.of(fact))


@router.get("/facts/{fact_id}", response_model=FactOut, responses=ERROR_RESPONSES)
def get_fact(agent_id: AgentId, fact_id: FactId, who: Agent, service: ServiceDep) -> FactOut:
    return FactOut.of(service.get_fact(agent_id, fact_id))


@router.delete("/facts/{fact_id}", response_model=RemovedOut, responses=WRITE_ERROR_RESPONSES)
def forget_fact(agent_id: AgentId, fact_id: FactId, who: Agent, service: ServiceDep) -> RemovedOut:
    deleted = service.forget_fact(agent_id, fact_id, actor=who.actor)
    return RemovedOut(agent_id=agent_id, removed={"facts": 1} if deleted else {})
