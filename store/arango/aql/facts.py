"""Structured memory: facts and state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vcm.errors import ValidationError
from vcm.store.arango import names
from vcm.store.arango.aql.common import (
    AqlQuery,
)

_RANGE_FIELDS = frozenset({"importance", "confidence", "updated_at", "created_at"})
_RANGE_OPS = frozenset({">=", "<=", "<"})


def query_facts(agent_id: str, scope: str | None, types: Sequence[str] | None, key: str | None,
                statuses: Sequence[str] | None, category: str | None, tags: Sequence[str] | None,
                ranges: Sequence[tuple[str, str, float]], limit: int, with_embedding: bool,
                unsure: bool = False, holders: Sequence[str] = (), keys: Sequence[str] | None = None,
                ) -> AqlQuery:  # fmt: skip
    """Facts passing the filters, most recently updated first (``embedding`` only when asked).
    ``ranges``: (field, comparison, bound) of :meth:`~vcm.store.types.FactQuery.ranges`.
    ``holders``: the shared memory read with the agent's own (its user's, its domain's holder
    ids); each is a shard key value of its own, so such a read visits at most three shards.
    ``keys``: only these documents (a search's hits, read whole after ranking)."""
    lines, bind = _filtered(agent_id, scope, types, key, statuses, category, tags, ranges, limit, unsure, holders)
    if keys is not None:
        lines.insert(2, "  FILTER f._key IN @keys")
        bind["keys"] = list(keys)
    lines.append("  RETURN f" if with_embedding else '  RETURN UNSET(f, "embedding")')
    return AqlQuery("\n".join(lines), bind)


def fact_candidates(agent_id: str, scope: str | None, types: Sequence[str] | None, key: str | None,
                    statuses: Sequence[str] | None, category: str | None, tags: Sequence[str] | None,
                    ranges: Sequence[tuple[str, str, float]], limit: int, vector: Sequence[float] | None,
                    unsure: bool = False, holders: Sequence[str] = ()) -> AqlQuery:  # fmt: skip
    """What ranking a fact search needs of each fact passing the filters (the same filters and
    order as :func:`query_facts`), and dedup (which reads ``duplicate_of`` too), without the
    embedding: its cosine to the query ``vector``,
    computed in the database (null without a vector, or when the fact has no embedding of the
    vector's length), and whether it has an embedding at all. A prompt build searches facts on
    every turn; returning each candidate's embedding would ship about 4 KB of JSON per fact."""
    lines, bind = _filtered(agent_id, scope, types, key, statuses, category, tags, ranges, limit, unsure, holders)
    bind["vector"] = None if vector is None else [float(x) for x in vector]
    bind["dimension"] = 0 if vector is None else len(vector)
    lines += [
        "  LET embedded = IS_ARRAY(f.embedding) AND LENGTH(f.embedding) > 0",
        "  LET cosine = @vector != null AND embedded AND LENGTH(f.embedding) == @dimension"
        " ? COSINE_SIMILARITY(f.embedding, @vector) : null",
        "  RETURN { agent_id: f.agent_id, fact_id: f.fact_id, value: f.value, key: f.key, tags: f.tags,"
        " category: f.category, updated_at: f.updated_at, duplicate_of: f.duplicate_of, embedded: embedded,"
        " cosine: cosine }",
    ]
    return AqlQuery("\n".join(lines), bind)


def _filtered(agent_id: str, scope: str | None, types: Sequence[str] | None, key: str | None,
              statuses: Sequence[str] | None, category: str | None, tags: Sequence[str] | None,
              ranges: Sequence[tuple[str, str, float]], limit: int, unsure: bool,
              holders: Sequence[str]) -> tuple[list[str], dict[str, Any]]:  # fmt: skip
    """The FOR, FILTER, SORT and LIMIT lines of a facts read, and their bind variables."""
    owners = list(dict.fromkeys([agent_id, *holders]))
    if len(owners) == 1:
        lines = [f"FOR f IN {names.FACTS}", "  FILTER f.agent_id == @agent_id"]
        bind: dict[str, Any] = {"agent_id": agent_id, "limit": limit}
    else:
        lines = [f"FOR f IN {names.FACTS}", "  FILTER f.agent_id IN @owners"]
        bind = {"owners": owners, "limit": limit}
    for name, value, test in (
        ("scope", scope, "f.scope == @scope"),
        ("types", list(types) if types else None, "f.type IN @types"),
        ("key", key, "f.key == @key"),
        ("statuses", list(statuses) if statuses else None, "f.status IN @statuses"),
        ("category", category, "f.category == @category"),
        ("tags", list(tags) if tags else None, "@tags ALL IN f.tags"),
    ):
        if value is not None:
            lines.append(f"  FILTER {test}")
            bind[name] = value
    if unsure:
        lines.append("  FILTER f.duplicate_of != null")
    for i, (field, op, bound) in enumerate(ranges):
        if field not in _RANGE_FIELDS or op not in _RANGE_OPS:
            raise ValidationError(f"no range filter on {field} {op}", field=field)
        lines.append(f"  FILTER f.{field} {op} @range{i}")
        bind[f"range{i}"] = bound
    lines += ["  SORT f.updated_at DESC, f.fact_id ASC", "  LIMIT @limit"]
    return lines, bind


def touch_facts(agent_id: str, keys_: Sequence[str], now: float) -> AqlQuery:
    """A use: the expiry of a live fact with a lifetime moves to now + lifetime, only forward
    (the port's rule)."""
    text = (
        f"FOR k IN @keys\n  LET f = DOCUMENT({names.FACTS}, k)\n  FILTER f != null AND f.agent_id == @agent_id\n"
        "  LET renewed = f.lifetime_s != null AND f.expires_at != null AND f.expires_at >= @now\n"
        "    AND @now + f.lifetime_s > f.expires_at\n"
        f"  UPDATE f WITH {{ last_used: @now, access_count: f.access_count + 1, "
        f"expires_at: renewed ? @now + f.lifetime_s : f.expires_at }} IN {names.FACTS}"
    )
    return AqlQuery(text, {"keys": list(keys_), "agent_id": agent_id, "now": now})


def list_state(agent_id: str, now: float) -> AqlQuery:
    text = (
        f"FOR s IN {names.STATE}\n  FILTER s.agent_id == @agent_id AND (s.expires_at == null OR s.expires_at >= @now)\n"
        "  SORT s.key ASC\n  RETURN s"
    )
    return AqlQuery(text, {"agent_id": agent_id, "now": now})


def fact_counts(agent_id: str) -> AqlQuery:
    text = (
        f"LET mine = (FOR f IN {names.FACTS} FILTER f.agent_id == @agent_id "
        'RETURN KEEP(f, "type", "status", "scope", "conflict_with"))\n'
        "RETURN {\n"
        "  type: MERGE(FOR f IN mine COLLECT v = f.type WITH COUNT INTO n RETURN {[v]: n}),\n"
        "  status: MERGE(FOR f IN mine COLLECT v = f.status WITH COUNT INTO n RETURN {[v]: n}),\n"
        "  scope: MERGE(FOR f IN mine COLLECT v = f.scope WITH COUNT INTO n RETURN {[v]: n}),\n"
        "  conflicts: {live: LENGTH(FOR f IN mine FILTER LENGTH(f.conflict_with) > 0"
        ' AND f.status IN ["active", "shadow"] RETURN 1)}\n'
        "}"
    )
    return AqlQuery(text, {"agent_id": agent_id})


def facts_of_agent(agent_id: str) -> AqlQuery:
    """Every fact of the agent, whatever its status, with its embedding, by id (a snapshot's)."""
    text = f"FOR f IN {names.FACTS}\n  FILTER f.agent_id == @agent_id\n  SORT f.fact_id ASC\n  RETURN f"
    return AqlQuery(text, {"agent_id": agent_id})


def fact_versions(agent_id: str) -> AqlQuery:
    """``[fact_id, version]`` of every fact of the agent (what a restore's versions start from)."""
    text = f"FOR f IN {names.FACTS}\n  FILTER f.agent_id == @agent_id\n  RETURN [f.fact_id, f.version]"
    return AqlQuery(text, {"agent_id": agent_id})


def edges_of_agent(edge_collection: str, agent_id: str) -> AqlQuery:
    """Every edge of the agent in one edge collection (the fact edges a snapshot keeps)."""
    if edge_collection not in names.EDGE_COLLECTIONS:
        raise ValidationError("unknown edge collection", collection=edge_collection)
    text = "FOR e IN @@edges\n  FILTER e.agent_id == @agent_id\n  SORT e._key ASC\n  RETURN e"
    return AqlQuery(text, {"@edges": edge_collection, "agent_id": agent_id})
