"""The entity graph of an agent's facts: one entity, its neighbours and relations.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Path, Query

from vcm.api.deps import Agent, ServiceDep
from vcm.api.models import ERROR_RESPONSES, AgentId, EntityGraphOut, FactOut

# Tagged with the facts: the entity graph is read from them.
router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["facts"])


@router.get("/entities/{name}", response_model=EntityGraphOut, responses=ERROR_RESPONSES)
def entity_graph(
    agent_id: AgentId,
    name: Annotated[str, Path(max_length=80)],
    who: Agent,
    service: ServiceDep,
    depth: Annotated[int, Query(ge=1, le=3)] = 1,
) -> EntityGraphOut:
    """An entity (any case) with the entities related to it within ``depth`` hops of the
    graph, the relations among them and the messages that mention it."""
    g = service.entity_graph(agent_id, name, depth=depth)
    return EntityGraphOut(
        entity=FactOut.of(g.entity),
        neighbours=[FactOut.of(f) for f in g.neighbours],
        relations=[FactOut.of(f) for f in g.relations],
        mentioned_in=list(g.mentioned_in),
    )
