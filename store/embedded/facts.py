"""Facts and state of the embedded store (``facts`` and ``state`` rows). Search fetches the facts
that pass the filters and ranks them with :mod:`vcm.store.fact_rank`, like the ArangoDB adapter."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from vcm.errors import NotFound, ValidationError
from vcm.store import fact_rank, semantics, validation
from vcm.store.embedded import rows
from vcm.store.embedded.base import EmbeddedBase, fence
from vcm.store.embedded.db import chunked
from vcm.store.embedded.graph import delete_node_edges
from vcm.store.embedded.holders import fence_holder
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
    NodeRef,
    StateEntry,
    fact_node,
)

_COLUMNS = (
    "agent_id, fact_id, scope, type, key, value, category, tags, importance, confidence, evidence, status, "
    "conflict_with, created_at, updated_at, last_used, access_count, expires_at, version, lifetime_s, duplicate_of"
)


def _strings(column: str) -> tuple[str, ...]:
    # Most facts have no tags and no conflicts: skip the JSON parser for them.
    return () if column == "[]" else tuple(json.loads(column))


def _candidate(row: sqlite3.Row, vector: fact_rank.Vector | None) -> fact_rank.Candidate:
    """A light row as the fact search ranks it (its vector read whether or not the query has one:
    the candidate is kept for the next search, which usually has)."""
    text = fact_rank.document(row["value"], row["key"], _strings(row["tags"]), row["category"])
    return fact_rank.Candidate(row["fact_id"], text, float(row["updated_at"]), vector)


def _fact(row: sqlite3.Row, embedding: bytes | None = None) -> Fact:
    return Fact(
        agent_id=row["agent_id"],
        fact_id=row["fact_id"],
        scope=row["scope"],
        type=row["type"],
        key=row["key"],
        value=row["value"],
        category=row["category"],
        tags=_strings(row["tags"]),
        importance=float(row["importance"]),
        confidence=float(row["confidence"]),
        evidence=tuple(json.loads(row["evidence"])),
        status=row["status"],
        conflict_with=_strings(row["conflict_with"]),
        created_at=float(row["created_at"]),
        updated_at=float(row["updated_at"]),
        last_used=float(row["last_used"]),
        access_count=int(row["access_count"]),
        expires_at=None if row["expires_at"] is None else float(row["expires_at"]),
        version=int(row["version"]),
        embedding=None if embedding is None else np.frombuffer(embedding, dtype="<f4").tolist(),
        lifetime_s=None if row["lifetime_s"] is None else float(row["lifetime_s"]),
        duplicate_of=row["duplicate_of"],
    )


# Seeks a listing by type makes at most (types x statuses); more, and it filters in update order.
_SEEKS = 16


def _where(agent_id: str, q: FactQuery) -> tuple[str, list[Any]]:
    # The agent's own facts, and those of the holders (its user's, its domain's) the service names.
    owners = list(dict.fromkeys([agent_id, *(validation.identifier("holder", h) for h in q.holders)]))
    clauses: list[str] = [f"agent_id IN ({','.join('?' * len(owners))})"]
    params: list[Any] = list(owners)
    if q.scope is not None:
        clauses.append("scope = ?")
        params.append(q.scope)
    if q.types:
        clauses.append(f"type IN ({','.join('?' * len(q.types))})")
        params.extend(q.types)
    if q.key is not None:
        clauses.append("key = ?")
        params.append(q.key)
    if q.statuses:
        clauses.append(f"status IN ({','.join('?' * len(q.statuses))})")
        params.extend(q.statuses)
    if q.category is not None:
        clauses.append("category = ?")
        params.append(q.category)
    if q.unsure:
        clauses.append("duplicate_of IS NOT NULL")
    for column, op, bound in q.ranges():  # columns and operators are the dataclass's constants
        clauses.append(f"{column} {op} ?")
        params.append(bound)
    return " AND ".join(clauses), params


def _tagged(facts: list[Fact], tags: Sequence[str] | None) -> list[Fact]:
    if not tags:
        return facts
    wanted = set(tags)
    return [f for f in facts if wanted <= set(f.tags)]


class FactOps(EmbeddedBase):
    """Facts (``put_fact`` ... ``touch_facts``) and state (``put_state`` ... ``delete_state``)."""

    def put_fact(self, fact: Fact, expected_version: int | None, *, incarnation: str | None = None) -> Fact:
        validation.fact(fact)
        with self._db.write("write a fact") as conn:
            if is_holder(fact.agent_id):  # shared memory: its principal must still be there
                fence_holder(conn, fact.agent_id, incarnation)
            else:
                fence(conn, (fact.agent_id,), incarnation)
            current = conn.execute(
                "SELECT version, value, embedding FROM facts WHERE agent_id = ? AND fact_id = ?",
                (fact.agent_id, fact.fact_id),
            ).fetchone()
            current_version = None if current is None else int(current[0])
            if current_version != expected_version:
                raise semantics.rev_conflict(
                    f"fact {fact.fact_id!r}",
                    None if expected_version is None else str(expected_version),
                    None if current_version is None else str(current_version),
                )
            # Reads leave embeddings out: a fact put back without one keeps its stored vector
            # while its value is the one that vector was made from.
            kept = current["embedding"] if current is not None and current["value"] == fact.value else None
            _insert_fact(conn, fact, 1 if expected_version is None else expected_version + 1, kept=kept)
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM facts WHERE agent_id = ? AND fact_id = ?", (fact.agent_id, fact.fact_id)
            ).fetchone()
        return _fact(row)

    def get_fact(self, agent_id: str, fact_id: str) -> Fact:
        validation.identifier("agent_id", agent_id)
        validation.identifier("fact_id", fact_id)
        found = self._db.query(
            "read a fact", f"SELECT {_COLUMNS} FROM facts WHERE agent_id = ? AND fact_id = ?", (agent_id, fact_id)
        )
        if not found:
            raise NotFound(f"fact {fact_id!r} of agent {agent_id!r} does not exist", agent_id=agent_id)
        return _fact(found[0])

    def query_facts(self, agent_id: str, query: FactQuery) -> list[Fact]:
        validation.identifier("agent_id", agent_id)
        n = validation.limit("limit", query.limit)
        where, params = _where(agent_id, query)
        # Tags are filtered after the read; read more so the limit still fills.
        fetch = n if not query.tags else fact_rank.MAX_CANDIDATES
        # The embedding only when asked for: 1.5 KB a fact, most of a listing's read otherwise.
        columns = f"{_COLUMNS}, embedding" if query.with_embeddings else _COLUMNS
        order = "ORDER BY updated_at DESC, fact_id LIMIT ?"
        types = list(dict.fromkeys(query.types or ()))
        statuses: list[str | None] = list(dict.fromkeys(query.statuses)) if query.statuses else [None]
        if types and query.key is None and len(types) * len(statuses) <= _SEEKS:
            # A listing by type (the prompt's working set and sticky facts, on every build): one
            # seek per type and status in facts_type, each in update order and stopping at the
            # limit, merged. SQLite's planner, without statistics, would filter all of the
            # agent's facts in update order instead (1 000 facts of other types: ~4 ms a listing).
            found = []
            for t in types:
                for status in statuses:
                    one = replace(query, types=[t], statuses=None if status is None else [status])
                    w, p = _where(agent_id, one)
                    found += self._db.query(
                        "list facts",
                        f"SELECT {columns} FROM facts INDEXED BY facts_type WHERE {w} {order}",
                        (*p, fetch),
                    )
            found.sort(key=lambda r: (-float(r["updated_at"]), r["fact_id"]))
            found = found[:fetch]
        else:
            found = self._db.query("list facts", f"SELECT {columns} FROM facts WHERE {where} {order}", (*params, fetch))
        facts = [_fact(r, r["embedding"] if query.with_embeddings else None) for r in found]
        return _tagged(facts, query.tags)[:n]

    def _light_facts(self, what: str, where: str, params: Sequence[Any], limit: int, order: str) -> list[sqlite3.Row]:
        """The light columns of the facts matching ``where``, from the covering index alone (see
        ``facts_light`` in the schema); their vectors come from :class:`FactVectors`."""
        return self._db.query(
            what,
            "SELECT agent_id, fact_id, value, key, tags, category, updated_at, duplicate_of, version "
            f"FROM facts INDEXED BY facts_light WHERE {where} {order} LIMIT ?",
            (*params, limit),
        )

    def _fact_blobs(self, agent_id: str, fact_ids: Sequence[str]) -> list[sqlite3.Row]:
        return self._db.query(
            "read fact vectors",
            "SELECT fact_id, version, updated_at, embedding FROM facts "
            f"WHERE agent_id = ? AND fact_id IN ({','.join('?' * len(fact_ids))})",
            (agent_id, *fact_ids),
        )

    def dedup_candidates(self, agent_id: str, query: FactQuery, vector: Sequence[float] | None) -> list[DedupCandidate]:
        validation.identifier("agent_id", agent_id)
        n = validation.limit("limit", query.limit)
        where, params = _where(agent_id, query)
        fetch = n if not query.tags else fact_rank.MAX_CANDIDATES  # as query_facts: tags after the read
        found = self._light_facts("dedup candidates", where, params, fetch, "ORDER BY updated_at DESC, fact_id")
        wanted = set(query.tags or ())
        kept = [r for r in found if not wanted or wanted <= set(_strings(r["tags"]))][:n]
        asked = vector is not None and len(vector) > 0
        vectors = self._fact_vectors.vectors(kept, self._fact_blobs) if asked else [None] * len(kept)
        near = fact_rank.cosines(vector, vectors)
        return [
            DedupCandidate(r["agent_id"], r["fact_id"], r["value"], r["key"], r["duplicate_of"], c)
            for r, c in zip(kept, near, strict=True)
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
        where, params = _where(agent_id, query)
        # Rank on the light columns; whole facts are read for the hits a caller wants.
        found = self._light_facts("search facts", where, params, fact_rank.MAX_CANDIDATES, "ORDER BY updated_at DESC")
        wanted = set(query.tags or ())
        kept = [r for r in found if not wanted or wanted <= set(_strings(r["tags"]))]
        candidates = self._fact_vectors.candidates(kept, self._fact_blobs, _candidate)
        owner = {r["fact_id"]: r["agent_id"] for r in kept}
        return [FactScore(owner[i], i, s) for i, s in fact_rank.order(text, vector, candidates, n)]

    def read_fact_hits(self, agent_id: str, ranked: Sequence[FactScore], query: FactQuery) -> list[FactHit]:
        validation.identifier("agent_id", agent_id)
        if not ranked:
            return []
        where, params = _where(agent_id, query)
        ids = [validation.identifier("fact_id", h.fact_id) for h in ranked]
        whole = {
            r["fact_id"]: r
            for part in chunked(ids)
            for r in self._db.query(
                "read fact hits",
                f"SELECT {_COLUMNS} FROM facts WHERE {where} AND fact_id IN ({','.join('?' * len(part))})",
                (*params, *part),
            )
        }
        # A hit deleted or changed past the filters between the two reads is left out.
        return [FactHit(_fact(whole[h.fact_id]), h.score) for h in ranked if h.fact_id in whole]

    def delete_facts(self, agent_id: str, fact_ids: Sequence[str]) -> int:
        validation.identifier("agent_id", agent_id)
        ids = [validation.identifier("fact_id", f) for f in fact_ids]
        with self._db.write("delete facts") as conn:
            removed = sum(
                conn.execute("DELETE FROM facts WHERE agent_id = ? AND fact_id = ?", (agent_id, f)).rowcount
                for f in ids
            )
            # No edge outlives its fact (entities and relations are facts with edges).
            delete_node_edges(conn, [fact_node(agent_id, f) for f in ids])
            return removed

    def fact_counts(self, agent_id: str) -> dict[str, dict[str, int]]:
        validation.identifier("agent_id", agent_id)
        out: dict[str, dict[str, int]] = {}
        for column in ("type", "status", "scope"):
            found = self._db.query(
                "count facts", f"SELECT {column}, COUNT(*) FROM facts WHERE agent_id = ? GROUP BY {column}", (agent_id,)
            )
            out[column] = {str(r[0]): int(r[1]) for r in found}
        live = self._db.query(
            "count conflicts",
            "SELECT COUNT(*) FROM facts WHERE agent_id = ? AND conflict_with != '[]' "
            "AND status IN ('active', 'shadow')",
            (agent_id,),
        )
        out["conflicts"] = {"live": int(live[0][0])}
        return out

    def touch_facts(self, agent_id: str, fact_ids: Sequence[str], now: float) -> None:
        validation.identifier("agent_id", agent_id)
        with self._db.write("touch facts") as conn:
            conn.executemany(
                "UPDATE facts SET last_used = ?1, access_count = access_count + 1, expires_at = CASE "
                "WHEN lifetime_s IS NOT NULL AND expires_at IS NOT NULL AND expires_at >= ?1 "
                "AND ?1 + lifetime_s > expires_at THEN ?1 + lifetime_s ELSE expires_at END "
                "WHERE agent_id = ?2 AND fact_id = ?3",
                [(now, agent_id, f) for f in fact_ids],
            )

    def agent_memory(self, agent_id: str, now: float) -> AgentMemory:
        validation.identifier("agent_id", agent_id)
        kinds = ",".join("?" * len(FACT_EDGE_KINDS))
        with self._db.read("read an agent's memory") as conn:
            facts = conn.execute(
                f"SELECT {_COLUMNS}, embedding FROM facts WHERE agent_id = ? ORDER BY fact_id", (agent_id,)
            ).fetchall()
            state = conn.execute(
                "SELECT agent_id, key, value, rev, updated_at, expires_at FROM state WHERE agent_id = ? "
                "AND (expires_at IS NULL OR expires_at >= ?) ORDER BY key",
                (agent_id, now),
            ).fetchall()
            edges = conn.execute(
                "SELECT kind, src_coll, src_key, dst_coll, dst_key, agent_id, created_at, attributes FROM edges "
                f"WHERE agent_id = ? AND kind IN ({kinds}) ORDER BY kind, src_coll, src_key, dst_coll, dst_key",
                (agent_id, *FACT_EDGE_KINDS),
            ).fetchall()
        return AgentMemory(
            facts=tuple(_fact(r, r["embedding"]) for r in facts),
            state=tuple(_state(r) for r in state),
            edges=tuple(_edge(r) for r in edges),
        )

    # --- state ------------------------------------------------------------------------------------
    def put_state(
        self, agent_id: str, key: str, value: Any, *, expires_at: float | None, expected_rev: str | None
    ) -> StateEntry:
        validation.identifier("agent_id", agent_id)
        validation.identifier("key", key)
        text = validation.json_value("value", value)
        now = self._clock()
        with self._db.write("write a state key") as conn:
            if is_holder(agent_id):  # a user's or domain's key: its principal must still be there
                fence_holder(conn, agent_id, None)
            current = conn.execute(
                "SELECT rev, expires_at FROM state WHERE agent_id = ? AND key = ?", (agent_id, key)
            ).fetchone()
            live = current is not None and (current["expires_at"] is None or current["expires_at"] >= now)
            current_rev = current["rev"] if live else None
            if not semantics.state_rev_matches(expected_rev, current_rev):
                raise semantics.rev_conflict(f"state key {key!r}", expected_rev, current_rev)
            rev = self._next_rev(conn)
            conn.execute(
                "INSERT OR REPLACE INTO state (agent_id, key, value, rev, updated_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (agent_id, key, text, rev, now, expires_at),
            )
        return StateEntry(agent_id, key, json.loads(text), rev, now, expires_at)

    def get_state(self, agent_id: str, key: str, now: float) -> StateEntry:
        validation.identifier("agent_id", agent_id)
        validation.identifier("key", key)
        found = self._db.query(
            "read a state key",
            "SELECT agent_id, key, value, rev, updated_at, expires_at FROM state WHERE agent_id = ? AND key = ? "
            "AND (expires_at IS NULL OR expires_at >= ?)",
            (agent_id, key, now),
        )
        if not found:
            raise NotFound(f"state key {key!r} of agent {agent_id!r} does not exist", agent_id=agent_id, key=key)
        return _state(found[0])

    def list_state(self, agent_id: str, now: float) -> list[StateEntry]:
        validation.identifier("agent_id", agent_id)
        found = self._db.query(
            "list state",
            "SELECT agent_id, key, value, rev, updated_at, expires_at FROM state WHERE agent_id = ? "
            "AND (expires_at IS NULL OR expires_at >= ?) ORDER BY key",
            (agent_id, now),
        )
        return [_state(r) for r in found]

    def delete_state(self, agent_id: str, key: str | None, expected_rev: str | None = None) -> int:
        validation.identifier("agent_id", agent_id)
        with self._db.write("delete state") as conn:
            if key is None:
                return int(conn.execute("DELETE FROM state WHERE agent_id = ?", (agent_id,)).rowcount)
            validation.identifier("key", key)
            if expected_rev is not None:
                current = conn.execute(
                    "SELECT rev FROM state WHERE agent_id = ? AND key = ?", (agent_id, key)
                ).fetchone()
                current_rev = None if current is None else current["rev"]
                if current_rev != expected_rev:
                    raise semantics.rev_conflict(f"state key {key!r}", expected_rev, current_rev)
            return int(conn.execute("DELETE FROM state WHERE agent_id = ? AND key = ?", (agent_id, key)).rowcount)


def _state(row: sqlite3.Row) -> StateEntry:
    return StateEntry(
        row["agent_id"],
        row["key"],
        json.loads(row["value"]),
        row["rev"],
        float(row["updated_at"]),
        None if row["expires_at"] is None else float(row["expires_at"]),
    )


# --- helpers (run inside an open write transaction) -------------------------------------------
def _insert_fact(conn: sqlite3.Connection, fact: Fact, version: int, *, kept: bytes | None = None) -> None:
    """``kept``: the stored embedding, written when ``fact`` carries none."""
    embedding = kept if not fact.embedding else np.asarray(fact.embedding, dtype="<f4").tobytes()
    conn.execute(
        f"INSERT OR REPLACE INTO facts ({_COLUMNS}, embedding) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            fact.agent_id,
            fact.fact_id,
            fact.scope,
            fact.type,
            fact.key,
            fact.value,
            fact.category,
            rows.dumps(list(fact.tags)),
            fact.importance,
            fact.confidence,
            rows.dumps([dict(e) for e in fact.evidence]),
            fact.status,
            rows.dumps(list(fact.conflict_with)),
            fact.created_at,
            fact.updated_at,
            fact.last_used,
            fact.access_count,
            fact.expires_at,
            version,
            fact.lifetime_s,
            fact.duplicate_of,
            embedding,
        ),
    )


def _edge(r: sqlite3.Row) -> Edge:
    src, dst = NodeRef(r["src_coll"], r["src_key"]), NodeRef(r["dst_coll"], r["dst_key"])
    return Edge(r["kind"], src, dst, r["agent_id"], float(r["created_at"]), json.loads(r["attributes"]))


def _edge_row(agent_id: str, e: Edge) -> tuple[Any, ...]:
    attributes = rows.dumps(dict(e.attributes))
    return (e.kind, e.src.collection, e.src.key, e.dst.collection, e.dst.key, agent_id, e.created_at, attributes)


def replace_memory(conn: sqlite3.Connection, agent_id: str, memory: AgentMemory, next_rev: Callable[[], str]) -> None:
    """``reset_context``'s memory part: the agent's facts, state keys and fact edges become
    exactly ``memory``'s (the port's :class:`~vcm.store.types.AgentMemory` rules)."""
    current = {
        str(r[0]): int(r[1]) for r in conn.execute("SELECT fact_id, version FROM facts WHERE agent_id = ?", (agent_id,))
    }
    conn.execute("DELETE FROM facts WHERE agent_id = ?", (agent_id,))
    conn.execute(
        f"DELETE FROM edges WHERE agent_id = ? AND kind IN ({','.join('?' * len(FACT_EDGE_KINDS))})",
        (agent_id, *FACT_EDGE_KINDS),
    )
    conn.execute("DELETE FROM state WHERE agent_id = ?", (agent_id,))
    for f in memory.facts:
        _insert_fact(conn, f, semantics.restored_version(f.version, current.get(f.fact_id)))
    conn.executemany(
        "INSERT INTO state (agent_id, key, value, rev, updated_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)",
        [
            (agent_id, s.key, validation.json_value("value", s.value), next_rev(), s.updated_at, s.expires_at)
            for s in memory.state
        ],
    )
    conn.executemany(
        "INSERT OR IGNORE INTO edges (kind, src_coll, src_key, dst_coll, dst_key, agent_id, created_at, "
        "attributes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [_edge_row(agent_id, e) for e in memory.edges],
    )
