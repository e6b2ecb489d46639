"""Structured memory, facts: remember, list, search, stats, get, forget, archive, consolidate, and
the Working Set built from them; the agent itself or the admin.

Route order matters: ``/facts/search`` and ``/facts/stats`` are declared before ``/facts/{fact_id}``,
which would otherwise take them.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Path, Query

from vcm.api.deps import Agent, IdemHeader, ServiceDep, one_key
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
    FactStatsOut,
    RememberOut,
    RemovedOut,
    WorkingSetOut,
)
from vcm.store.types import FactQuery

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["facts"])

TypeQ = Annotated[list[str] | None, Query(alias="type", description="fact types (repeat)")]
TagQ = Annotated[list[str] | None, Query(alias="tag", description="tags, all required (repeat)")]
StatusQ = Annotated[list[str] | None, Query(alias="status", description="default: active and shadow")]
FactId = Annotated[str, Path(max_length=256)]


@router.post("/facts", response_model=RememberOut, responses=WRITE_ERROR_RESPONSES)
def remember(agent_id: AgentId, body: FactIn, who: Agent, service: ServiceDep, idem: IdemHeader = None) -> RememberOut:
    """Keep a fact: the policy guard first (POLICY_REFUSED without a justification), then
    dedup: MATCH joins an existing fact, CONFLICT keeps both values of a key, NEW adds it."""
    res = service.remember(
        agent_id, body.value, type=body.type, scope=body.scope, key=body.key, category=body.category,
        tags=body.tags, importance=body.importance, confidence=body.confidence,
        evidence=[e.model_dump(exclude_none=True) for e in body.evidence], status=body.status, ttl_s=body.ttl_s,
        justification=body.justification, idempotency_key=one_key(idem, body.idempotency_key), actor=who.actor,
    )  # fmt: skip
    return RememberOut(
        decision=res.decision, fact=FactOut.of(res.fact), conflicts=[FactOut.of(f) for f in res.conflicts]
    )


@router.get("/facts", response_model=FactList, responses=ERROR_RESPONSES)
def list_facts(
    agent_id: AgentId,
    who: Agent,
    service: ServiceDep,
    types: TypeQ = None,
    tags: TagQ = None,
    statuses: StatusQ = None,
    scope: str | None = None,
    key: str | None = None,
    category: str | None = None,
    min_importance: Annotated[float | None, Query(ge=0.0, le=1.0)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> FactList:
    query = FactQuery(
        scope=scope, types=types, key=key, statuses=statuses, category=category, tags=tags,
        min_importance=min_importance, limit=limit,
    )  # fmt: skip
    return FactList(facts=[FactOut.of(f) for f in service.list_facts(agent_id, query)])


@router.get("/facts/search", response_model=FactHits, responses=ERROR_RESPONSES)
def search_facts(
    agent_id: AgentId,
    who: Agent,
    service: ServiceDep,
    query: Annotated[str, Query(min_length=1, max_length=4000)],
    types: TypeQ = None,
    tags: TagQ = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> FactHits:
    hits = service.search_facts(agent_id, query, filters=FactQuery(types=types, tags=tags, limit=limit))
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


@router.get("/facts/{fact_id}", response_model=FactOut, responses=ERROR_RESPONSES)
def get_fact(agent_id: AgentId, fact_id: FactId, who: Agent, service: ServiceDep) -> FactOut:
    return FactOut.of(service.get_fact(agent_id, fact_id))


@router.delete("/facts/{fact_id}", response_model=RemovedOut, responses=WRITE_ERROR_RESPONSES)
def forget_fact(agent_id: AgentId, fact_id: FactId, who: Agent, service: ServiceDep) -> RemovedOut:
    deleted = service.forget_fact(agent_id, fact_id, actor=who.actor)
    return RemovedOut(agent_id=agent_id, removed={"facts": 1} if deleted else {})
