"""The entity graph through the façade: "what do we know around this entity" — the entities
reachable over ``relates_to`` within a depth, the relations among them, and the messages that
mention the entity. Using them counts as use (their lifetimes are refreshed). The edges are
written with each fact (:meth:`vcm.service.facts.Facts.link`)."""

from __future__ import annotations

from dataclasses import dataclass

from vcm.errors import NotFound, ValidationError
from vcm.facts import entities
from vcm.service.core import Core
from vcm.service.facts import Facts
from vcm.store.types import Fact, FactQuery, NodeRef, fact_node

MAX_DEPTH = 3
MAX_MENTIONS = 50


@dataclass(frozen=True)
class EntityGraph:
    entity: Fact
    neighbours: tuple[Fact, ...]  # entities reachable over relates_to, nearest first
    relations: tuple[Fact, ...]  # relation facts among the entity and its neighbours
    mentioned_in: tuple[str, ...]  # message ids that mention the entity


class Graph:
    """entity_graph."""

    def __init__(self, core: Core, facts: Facts) -> None:
        self.core = core
        self.facts = facts  # what the query returns counts as used

    def entity_graph(self, agent_id: str, name: str, *, depth: int = 1) -> EntityGraph:
        """The entity named ``name`` (any case and spacing), the entities within ``depth``
        ``relates_to`` hops of it (either direction), the relations among them and the messages
        that mention it."""
        self.core.agent(agent_id)
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
            raise ValidationError(f"depth must be 1-{MAX_DEPTH}", field="depth")
        key = entities.canonical(name)
        found = self.core.store.query_facts(agent_id, FactQuery(types=["entity"], key=key, limit=1))
        if not found:
            raise NotFound(f"no entity {name!r} in agent {agent_id}'s memory", resource="entity")
        start = found[0]
        origin = fact_node(agent_id, start.fact_id)
        neighbours: list[Fact] = []
        for ref in self.core.store.traverse(origin, ["relates_to"], max_depth=depth, direction="any"):
            fact_id = _fact_id(agent_id, ref)
            if fact_id is None:
                continue
            try:
                fact = self.core.store.get_fact(agent_id, fact_id)
            except NotFound:  # removed between the traversal and the read
                continue
            if fact.status in ("active", "shadow"):
                neighbours.append(fact)
        names = {start.key, *(f.key for f in neighbours)}
        relations = [
            f
            for f in self.core.store.query_facts(agent_id, FactQuery(types=["relation"], limit=1000))
            if f.key is not None and _ends(f.key) <= names
        ]
        mentions = self.core.store.traverse(origin, ["mentions"], max_depth=1, direction="inbound")
        mentioned = [r.key.split(":", 1)[1] for r in mentions if r.collection == "messages"][:MAX_MENTIONS]
        self.facts.use(agent_id, [start, *neighbours, *relations])
        return EntityGraph(start, tuple(neighbours), tuple(relations), tuple(mentioned))


def _fact_id(agent_id: str, ref: NodeRef) -> str | None:
    prefix = f"{agent_id}:"
    if ref.collection != "agent_longterm_memory" or not ref.key.startswith(prefix):
        return None
    return ref.key[len(prefix) :]


def _ends(key: str) -> set[str | None]:
    try:
        rel = entities.relation_of(key)
    except ValidationError:
        return {None, ""}
    return {rel.src, rel.dst}
