"""Facts (``agent_longterm_memory``) and state (``agent_working_memory``) of the ArangoDB store.
Search fetches the facts that pass the filters (indexed on agent, InfoKey, category, tags) and
ranks them with :mod:`vcm.store.fact_rank`, exactly as the embedded adapter does."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vcm.errors import NotFound, ValidationError
from vcm.store import fact_rank, semantics, validation
from vcm.store.arango import documents, keys, names
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import facts as aql_facts
from vcm.store.arango.base import ArangoBase
from vcm.store.arango.lifecycle import count_of
from vcm.store.principals import is_holder
from vcm.store.types import (
    FACT_EDGE_KINDS,
    AgentMemory,
    DedupCandidate,
    Edge,
    Fact,
    FactHit,
    FactQuery,
    FactScore,
    StateEntry,
    fact_node,
)


def fact_key(agent_id: str, fact_id: str) -> str:
    # The document is a g_mem vertex: keyed by its node ref, so edges and documents line up.
    return keys.vertex_key(fact_node(agent_id, fact_id))


def state_key(agent_id: str, key: str) -> str:
    return keys.doc_key(agent_id, key)


def fact_doc(f: Fact, version: int) -> dict[str, Any]:
    return {
        "_key": fact_key(f.agent_id, f.fact_id),
        "agent_id": f.agent_id,
        "fact_id": f.fact_id,
        "scope": f.scope,
        "type": f.type,
        "key": f.key,
        "value": f.value,
        "category": f.category,
        "tags": list(f.tags),
        "importance": f.importance,
        "confidence": f.confidence,
        "evidence": [dict(e) for e in f.evidence],
        "status": f.status,
        "conflict_with": list(f.conflict_with),
        "created_at": f.created_at,
        "updated_at": f.updated_at,
        "last_used": f.last_used,
        "access_count": f.access_count,
        "expires_at": f.expires_at,
        "version": version,
        "embedding": [float(x) for x in f.embedding] if f.embedding else None,
        "lifetime_s": f.lifetime_s,
        "duplicate_of": f.duplicate_of,
    }


def fact_from_doc(d: Mapping[str, Any], *, with_embedding: bool = False) -> Fact:
    return Fact(
        agent_id=d["agent_id"],
        fact_id=d["fact_id"],
        scope=d["scope"],
        type=d["type"],
        key=d.get("key"),
        value=d["value"],
        category=d.get("category", ""),
        tags=tuple(d.get("tags") or ()),
        importance=float(d.get("importance", 0.5)),
        confidence=float(d.get("confidence", 0.5)),
        evidence=tuple(d.get("evidence") or ()),
        status=d.get("status", "active"),
        conflict_with=tuple(d.get("conflict_with") or ()),
        created_at=float(d.get("created_at", 0.0)),
        updated_at=float(d.get("updated_at", 0.0)),
        last_used=float(d.get("last_used", 0.0)),
        access_count=int(d.get("access_count", 0)),
        expires_at=None if d.get("expires_at") is None else float(d["expires_at"]),
        version=int(d.get("version", 1)),
        embedding=d.get("embedding") if with_embedding else None,
        lifetime_s=None if d.get("lifetime_s") is None else float(d["lifetime_s"]),
        duplicate_of=d.get("duplicate_of"),
    )


def _query(agent_id: str, q: FactQuery, limit: int, with_embedding: bool) -> aql_common.AqlQuery:
    return aql_facts.query_facts(
        agent_id, q.scope, q.types, q.key, q.statuses, q.category, q.tags, q.ranges(), limit, with_embedding,
        unsure=q.unsure, holders=[validation.identifier("holder", h) for h in q.holders],
    )  # fmt: skip


def _state(d: Mapping[str, Any]) -> StateEntry:
    return StateEntry(
        d["agent_id"], d["key"], d["value"], str(d["_rev"]), float(d["updated_at"]),
        None if d.get("expires_at") is None else float(d["expires_at"]),
    )  # fmt: skip


class FactOps(ArangoBase):
    """Facts (``put_fact`` ... ``touch_facts``) and state (``put_state`` ... ``delete_state``)."""

    def put_fact(self, fact: Fact, expected_version: int | None, *, incarnation: str | None = None) -> Fact:
        validation.fact(fact)
        shared = is_holder(fact.agent_id)  # a principal's memory: fenced by its record, always
        write = (names.FACTS,) if incarnation is None and not shared else (names.FACTS, names.CORE)
        with self._transaction(write, "put_fact") as txn:
            if shared:
                self._fence_holder(txn, fact.agent_id, incarnation, "put_fact")
            else:
                self._fence(txn, (fact.agent_id,), incarnation, "put_fact")
            facts = txn.collection(names.FACTS)
            current = facts.get(fact_key(fact.agent_id, fact.fact_id))
            current_version = None if current is None else int(current.get("version", 1))
            if current_version != expected_version:
                raise semantics.rev_conflict(
                    f"fact {fact.fact_id!r}",
                    None if expected_version is None else str(expected_version),
                    None if current_version is None else str(current_version),
                )
            doc = fact_doc(fact, 1 if expected_version is None else expected_version + 1)
            if not fact.embedding and current is not None and current.get("value") == fact.value:
                # Reads leave embeddings out: a fact put back without one keeps its stored vector
                # while its value is the one that vector was made from.
                doc["embedding"] = current.get("embedding")
            facts.insert(doc, overwrite_mode="replace")
        return fact_from_doc(doc)

    def get_fact(self, agent_id: str, fact_id: str) -> Fact:
        validation.identifier("agent_id", agent_id)
        validation.identifier("fact_id", fact_id)
        doc = self._get(self._ro, names.FACTS, fact_key(agent_id, fact_id), "get_fact")
        if doc is None:
            raise NotFound(f"fact {fact_id!r} of agent {agent_id!r} does not exist", agent_id=agent_id)
        return fact_from_doc(doc)

    def query_facts(self, agent_id: str, query: FactQuery) -> list[Fact]:
        validation.identifier("agent_id", agent_id)
        n = validation.limit("limit", query.limit)
        found = self._run(self._ro, _query(agent_id, query, n, query.with_embeddings), "query_facts")
        return [fact_from_doc(d, with_embedding=query.with_embeddings) for d in found]

    def dedup_candidates(self, agent_id: str, query: FactQuery, vector: Sequence[float] | None) -> list[DedupCandidate]:
        validation.identifier("agent_id", agent_id)
        n = validation.limit("limit", query.limit)
        q = query
        holders = [validation.identifier("holder", h) for h in q.holders]
        # The search's light candidates, as query_facts filters, orders and limits; the cosine
        # computed in the database.
        candidates_query = aql_facts.fact_candidates(
            agent_id, q.scope, q.types, q.key, q.statuses, q.category, q.tags, q.ranges(), n,
            None if vector is None else [float(x) for x in vector], unsure=q.unsure, holders=holders,
        )  # fmt: skip
        return [
            DedupCandidate(
                str(d["agent_id"]),
                str(d["fact_id"]),
                str(d["value"]),
                d.get("key"),
                d.get("duplicate_of"),
                0.0 if d.get("cosine") is None else float(d["cosine"]),
            )
            for d in self._run(self._ro, candidates_query, "dedup_candidates")
        ]

    def search_facts(self, agent_id: str, text: str, vector: Sequence[float] | None, query: FactQuery) -> list[FactHit]:
        return self.read_fact_hits(agent_id, self.search_fact_scores(agent_id, text, vector, query), query)

    def search_fact_scores(
        self, agent_id: str, text: str, vector: Sequence[float] | None, query: FactQuery
    ) -> list[FactScore]:
        validation.identifier("agent_id", agent_id)
        n = validation.limit("limit", query.limit)
        if not isinstance(text, str):
            raise ValidationError("query must be a string", field="query")
        # Rank on light candidates, the cosine computed in the database; whole facts are read
        # for the hits a caller wants (as the embedded adapter does), the filters applied again.
        q = query
        holders = [validation.identifier("holder", h) for h in q.holders]
        candidates_query = aql_facts.fact_candidates(
            agent_id, q.scope, q.types, q.key, q.statuses, q.category, q.tags, q.ranges(), fact_rank.MAX_CANDIDATES,
            None if vector is None else [float(x) for x in vector], unsure=q.unsure, holders=holders,
        )  # fmt: skip
        found = self._run(self._ro, candidates_query, "search_facts")
        candidates = [
            fact_rank.Candidate(
                str(d["fact_id"]),
                fact_rank.document(
                    str(d["value"]), d.get("key"), list(d.get("tags") or ()), str(d.get("category") or "")
                ),
                float(d.get("updated_at") or 0.0),
                cosine=None if d.get("cosine") is None else float(d["cosine"]),
                embedded=bool(d.get("embedded")),
            )
            for d in found
        ]
        owner = {str(d["fact_id"]): str(d["agent_id"]) for d in found}
        return [FactScore(owner[i], i, s) for i, s in fact_rank.order(text, vector, candidates, n)]

    def read_fact_hits(self, agent_id: str, ranked: Sequence[FactScore], query: FactQuery) -> list[FactHit]:
        validation.identifier("agent_id", agent_id)
        if not ranked:
            return []
        q = query
        holders = [validation.identifier("holder", h) for h in q.holders]
        hit_keys = [
            fact_key(validation.identifier("agent_id", h.agent_id), validation.identifier("fact_id", h.fact_id))
            for h in ranked
        ]
        whole_query = aql_facts.query_facts(
            agent_id, q.scope, q.types, q.key, q.statuses, q.category, q.tags, q.ranges(), len(hit_keys), False,
            unsure=q.unsure, holders=holders, keys=hit_keys,
        )  # fmt: skip
        whole = {str(d["fact_id"]): fact_from_doc(d) for d in self._run(self._ro, whole_query, "search_facts")}
        # A hit deleted or changed past the filters between the two reads is left out.
        return [FactHit(whole[h.fact_id], h.score) for h in ranked if h.fact_id in whole]

    def delete_facts(self, agent_id: str, fact_ids: Sequence[str]) -> int:
        validation.identifier("agent_id", agent_id)
        ids = [f"{names.FACTS}/{fact_key(agent_id, validation.identifier('fact_id', f))}" for f in fact_ids]
        # No edge outlives its fact (entities and relations are facts with edges).
        with self._transaction((names.FACTS, *names.EDGE_COLLECTIONS), "delete_facts") as txn:
            removed = count_of(self._run(txn, aql_common.remove_documents(names.FACTS, ids), "delete_facts"))
            for edges in names.EDGE_COLLECTIONS:
                self._run(txn, aql_common.remove_edges_of(edges, ids), "delete_facts")
        return removed

    def fact_counts(self, agent_id: str) -> dict[str, dict[str, int]]:
        validation.identifier("agent_id", agent_id)
        found = self._run(self._ro, aql_facts.fact_counts(agent_id), "fact_counts")
        row = found[0] if found else {}
        return {
            k: {str(a): int(b) for a, b in (row.get(k) or {}).items()} for k in ("type", "status", "scope", "conflicts")
        }

    def touch_facts(self, agent_id: str, fact_ids: Sequence[str], now: float) -> None:
        validation.identifier("agent_id", agent_id)
        self._run(
            self._rw, aql_facts.touch_facts(agent_id, [fact_key(agent_id, f) for f in fact_ids], now), "touch_facts"
        )

    def agent_memory(self, agent_id: str, now: float) -> AgentMemory:
        validation.identifier("agent_id", agent_id)
        # One stream transaction (it writes nothing): the facts, keys and edges of one moment.
        with self._transaction((names.FACTS, names.STATE, *FACT_EDGE_KINDS), "agent_memory") as txn:
            facts = self._run(txn, aql_facts.facts_of_agent(agent_id), "agent_memory")
            state = self._run(txn, aql_facts.list_state(agent_id, now), "agent_memory")
            edges = [
                d
                for kind in FACT_EDGE_KINDS
                for d in self._run(txn, aql_facts.edges_of_agent(kind, agent_id), "agent_memory")
            ]
        return AgentMemory(
            facts=tuple(fact_from_doc(d, with_embedding=True) for d in facts),
            state=tuple(_state(d) for d in state),
            edges=tuple(e for e in (_edge(d) for d in edges) if e is not None),
        )

    # --- state ------------------------------------------------------------------------------------
    def put_state(
        self, agent_id: str, key: str, value: Any, *, expires_at: float | None, expected_rev: str | None
    ) -> StateEntry:
        validation.identifier("agent_id", agent_id)
        validation.identifier("key", key)
        value = json.loads(validation.json_value("value", value))
        doc_key = state_key(agent_id, key)
        shared = is_holder(agent_id)  # a user's or domain's key: fenced by its principal's record
        with self._transaction((names.STATE, names.CORE) if shared else (names.STATE,), "put_state") as txn:
            if shared:
                self._fence_holder(txn, agent_id, None, "put_state")
            state = txn.collection(names.STATE)
            now = self._clock()
            current = state.get(doc_key)
            live = current is not None and (current.get("expires_at") is None or current["expires_at"] >= now)
            current_rev = current["_rev"] if live and current is not None else None
            if not semantics.state_rev_matches(expected_rev, current_rev):
                raise semantics.rev_conflict(f"state key {key!r}", expected_rev, current_rev)
            doc = {
                "_key": doc_key, "agent_id": agent_id, "key": key, "value": value,
                "updated_at": now, "expires_at": expires_at,
            }  # fmt: skip
            meta = state.insert(doc, overwrite_mode="replace")
        return StateEntry(agent_id, key, value, str(meta["_rev"]), now, expires_at)

    def get_state(self, agent_id: str, key: str, now: float) -> StateEntry:
        validation.identifier("agent_id", agent_id)
        validation.identifier("key", key)
        doc = self._get(self._ro, names.STATE, state_key(agent_id, key), "get_state")
        if doc is None or (doc.get("expires_at") is not None and float(doc["expires_at"]) < now):
            raise NotFound(f"state key {key!r} of agent {agent_id!r} does not exist", agent_id=agent_id, key=key)
        return _state(doc)

    def list_state(self, agent_id: str, now: float) -> list[StateEntry]:
        validation.identifier("agent_id", agent_id)
        return [_state(d) for d in self._run(self._ro, aql_facts.list_state(agent_id, now), "list_state")]

    def delete_state(self, agent_id: str, key: str | None, expected_rev: str | None = None) -> int:
        validation.identifier("agent_id", agent_id)
        if key is None:
            return count_of(self._run(self._rw, aql_common.remove_of_agent(names.STATE, agent_id), "delete_state"))
        validation.identifier("key", key)
        doc_key = state_key(agent_id, key)
        with self._transaction((names.STATE,), "delete_state") as txn:
            state = txn.collection(names.STATE)
            current = state.get(doc_key)
            if expected_rev is not None and (current is None or current["_rev"] != expected_rev):
                raise semantics.rev_conflict(
                    f"state key {key!r}", expected_rev, None if current is None else current["_rev"]
                )
            if current is None:
                return 0
            state.delete(doc_key)
            return 1


def _edge(d: Mapping[str, Any]) -> Edge | None:
    src, dst = documents.ref_from_pair(d.get("src")), documents.ref_from_pair(d.get("dst"))
    if src is None or dst is None:
        return None  # not written by this adapter
    return Edge(d["kind"], src, dst, d["agent_id"], float(d.get("created_at", 0.0)), d.get("attributes") or {})


def replace_memory(
    run: Callable[[aql_common.AqlQuery], list[Any]], agent_id: str, memory: AgentMemory, now: float
) -> None:
    """``reset_context``'s memory part, inside its stream transaction (``run`` runs a query in
    it): the agent's facts, state keys and fact edges become exactly ``memory``'s (the port's
    :class:`~vcm.store.types.AgentMemory` rules; state keys get new ``_rev`` from the server)."""
    current = {str(f): int(v) for f, v in run(aql_facts.fact_versions(agent_id))}
    for collection in (names.FACTS, names.STATE, *FACT_EDGE_KINDS):
        run(aql_common.remove_of_agent(collection, agent_id))
    facts = [fact_doc(f, semantics.restored_version(f.version, current.get(f.fact_id))) for f in memory.facts]
    state = [
        {"_key": state_key(agent_id, s.key), "agent_id": agent_id, "key": s.key, "value": s.value,
         "updated_at": s.updated_at, "expires_at": s.expires_at}
        for s in memory.state
    ]  # fmt: skip
    for collection, docs in ((names.FACTS, facts), (names.STATE, state)):
        if docs:
            run(aql_common.insert_ignore(collection, docs))
    for kind in FACT_EDGE_KINDS:
        edges = [documents.edge_doc(e, now) for e in memory.edges if e.kind == kind]
        if edges:
            run(aql_common.insert_ignore(kind, edges))
