"""Facts in the graph, through the façade (part of :class:`~vcm.service.MemoryService`).

Every stored fact ``cites`` the messages its evidence points at; an ``entity`` fact is
``mentions``-ed by those messages; a ``relation`` fact (key ``src|relation|dst``) makes sure both
ends exist as entity facts and joins them with a ``relates_to`` edge carrying the relation and
the relation fact's id. Edges are idempotent by (kind, source, target), and a forgotten fact takes
its edges with it (the store's ``delete_facts``), so the graph never points at what is gone.

:meth:`EntityGraphOps.entity_graph` answers "what do we know around this entity": the entities
reachable over ``relates_to`` within a depth, the relations among them, and the messages that
mention the entity. Using them counts as use (their lifetimes are refreshed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vcm.errors import NotFound, ValidationError
from vcm.facts import entities
from vcm.store.port import MemoryStore
from vcm.store.types import Edge, Fact, FactQuery, NodeRef, fact_node, message_node

MAX_DEPTH = 3
MAX_MENTIONS = 50


@dataclass(frozen=True)
class EntityGraph:
    entity: Fact
    neighbours: tuple[Fact, ...]  # entities reachable over relates_to, nearest first
    relations: tuple[Fact, ...]  # relation facts among the entity and its neighbours
    mentioned_in: tuple[str, ...]  # message ids that mention the entity


class EntityGraphOps:
    """Edges for stored facts, and the entity neighbourhood query."""

    store: MemoryStore
    clock: Callable[[], float]
    # Provided by MemoryService and KnowledgeOps.
    agent: Callable[[str], Any]
    remember: Callable[..., Any]
    _use: Callable[[str, Sequence[Fact]], None]

    def _link(self, fact: Fact, pointers: Sequence[Mapping[str, Any]], actor: str) -> None:
        """Edges for a fact just written with these new evidence ``pointers``."""
        now = self.clock()
        node = fact_node(fact.agent_id, fact.fact_id)
        for e in pointers:
            if e.get("kind") != "message":
                continue
            msg = message_node(fact.agent_id, str(e["id"]))
            self.store.add_edge(Edge("cites", node, msg, fact.agent_id, now))
            if fact.type == "entity":
                self.store.add_edge(Edge("mentions", msg, node, fact.agent_id, now))
        if fact.type == "relation" and fact.key is not None:
            rel = entities.relation_of(fact.key)
            src, dst = (self._entity(fact, name, pointers, actor) for name in (rel.src, rel.dst))
            self.store.add_edge(
                Edge(
                    "relates_to",
                    fact_node(fact.agent_id, src.fact_id),
                    fact_node(fact.agent_id, dst.fact_id),
                    fact.agent_id,
                    now,
                    {"relation": rel.relation, "fact_id": fact.fact_id},
                )
            )

    def _entity(self, relation: Fact, name: str, pointers: Sequence[Mapping[str, Any]], actor: str) -> Fact:
        """The entity fact at one end of a relation, written (or matched) with its evidence."""
        result = self.remember(
            relation.agent_id,
            name.title(),
            type="entity",
            scope=relation.scope,
            key=name,
            evidence=[dict(p) for p in pointers],
            status=relation.status,
            importance=relation.importance,
            confidence=relation.confidence,
            actor=actor,
        )
        fact: Fact = result.fact
        return fact

    def entity_graph(self, agent_id: str, name: str, *, depth: int = 1) -> EntityGraph:
        """The entity named ``name`` (any case and spacing), the entities within ``depth``
        ``relates_to`` hops of it (either direction), the relations among them and the messages
        that mention it."""
        self.agent(agent_id)
        if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= MAX_DEPTH:
            raise ValidationError(f"depth must be 1-{MAX_DEPTH}", field="depth")
        key = entities.canonical(name)
        found = self.store.query_facts(agent_id, FactQuery(types=["entity"], key=key, limit=1))
        if not found:
            raise NotFound(f"no entity {name!r} in agent {agent_id}'s memory", resource="entity")
        start = found[0]
        origin = fact_node(agent_id, start.fact_id)
        neighbours: list[Fact] = []
        for ref in self.store.traverse(origin, ["relates_to"], max_depth=depth, direction="any"):
            fact_id = _fact_id(agent_id, ref)
            if fact_id is None:
                continue
            try:
                fact = self.store.get_fact(agent_id, fact_id)
            except NotFound:  # removed between the traversal and the read
                continue
            if fact.status in ("active", "shadow"):
                neighbours.append(fact)
        names = {start.key, *(f.key for f in neighbours)}
        relations = [
            f
            for f in self.store.query_facts(agent_id, FactQuery(types=["relation"], limit=1000))
            if f.key is not None and _ends(f.key) <= names
        ]
        mentions = self.store.traverse(origin, ["mentions"], max_depth=1, direction="inbound")
        mentioned = [r.key.split(":", 1)[1] for r in mentions if r.collection == "messages"][:MAX_MENTIONS]
        self._use(agent_id, [start, *neighbours, *relations])
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
