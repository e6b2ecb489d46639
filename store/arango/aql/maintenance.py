"""Maintenance: expiry of messages, cursors, snapshots, state and facts; counts and stats."""

from __future__ import annotations

from vcm.store.arango import names
from vcm.store.arango.aql.common import (
    AqlQuery,
)
from vcm.store.arango.aql.recall_vectors import RECALL_VECTOR


def expire_messages(now: float, batch: int) -> AqlQuery:
    """Remove up to ``batch`` messages whose ``expires_at`` is before ``now``.

    Deliberately independent of a TTL index (which runs on its own schedule, every
    ``--ttl.frequency``, and may lag; docs/reference/arangodb.md §6); batched so one call never
    builds a huge transaction. Uses the sparse index on ``expires_at``. Returns the removed
    ``_id``s so their edges can be removed in the same transaction.
    """
    text = (
        f"FOR d IN {names.MESSAGES}\n"
        "  FILTER d.expires_at != null AND d.expires_at < @now\n"
        "  LIMIT @batch\n"
        f"  REMOVE d IN {names.MESSAGES}\n"
        "  RETURN OLD._id"
    )
    return AqlQuery(text, {"now": now, "batch": batch})


def purge_cursors(now: float) -> AqlQuery:
    """Drop expired cursor snapshots (the TTL index does it too, on its own schedule)."""
    text = f"FOR c IN {names.CURSORS}\n  FILTER c.expires_at < @now\n  REMOVE c IN {names.CURSORS}\n  RETURN 1"
    return AqlQuery(text, {"now": now})


def expire_snapshots(now: float) -> AqlQuery:
    text = (
        f"FOR s IN {names.SNAPSHOTS}\n  FILTER s.expires_at != null AND s.expires_at < @now\n"
        f"  REMOVE s IN {names.SNAPSHOTS}\n  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"now": now})


def expire_state(now: float) -> AqlQuery:
    text = (
        f"FOR s IN {names.STATE}\n  FILTER s.expires_at != null AND s.expires_at < @now\n"
        f"  REMOVE s IN {names.STATE}\n  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"now": now})


def expire_facts(now: float) -> AqlQuery:
    """Expired facts are marked, not deleted: their evidence stays auditable."""
    text = (
        f"FOR f IN {names.FACTS}\n  FILTER f.expires_at != null AND f.expires_at < @now"
        ' AND f.status IN ["active", "shadow"]\n'
        f'  UPDATE f WITH {{ status: "expired" }} IN {names.FACTS}\n'
        "  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"now": now})


def fact_type_counts() -> AqlQuery:
    """Facts of all agents by type and status (the /metrics gauge)."""
    text = (
        f"FOR f IN {names.FACTS}\n  COLLECT type = f.type, status = f.status WITH COUNT INTO n\n"
        "  RETURN {type, status, count: n}"
    )
    return AqlQuery(text, {})


def stats(agent_id: str | None) -> AqlQuery:
    """Counts under the port's stats keys, for one agent or overall."""
    edges = " + ".join(f"LENGTH({e})" for e in names.EDGE_COLLECTIONS)
    if agent_id is None:
        text = f"""RETURN {{
  messages: LENGTH({names.MESSAGES}),
  archival_chunks: LENGTH({names.ARCHIVAL}),
  events: LENGTH({names.EVENTS}),
  edges: {edges},
  committed_batches: LENGTH({names.BATCHES}),
  recall_log_edges: LENGTH({names.RECALL_LOG}),
  message_vectors: FIRST(FOR m IN {names.MESSAGES} FILTER m.{RECALL_VECTOR} != null COLLECT WITH COUNT INTO n RETURN n),
  core_blocks: FIRST(FOR b IN {names.CORE} FILTER b.kind == "block" COLLECT WITH COUNT INTO n RETURN n),
  summaries: FIRST(FOR b IN {names.CORE} FILTER b.kind == "summary" COLLECT WITH COUNT INTO n RETURN n)
}}"""
        return AqlQuery(text, {})

    def count(collection: str, extra: str = "") -> str:
        return f"FIRST(FOR x IN {collection} FILTER x.agent_id == @agent_id{extra} COLLECT WITH COUNT INTO n RETURN n)"

    agent_edges = " + ".join(count(e) for e in names.EDGE_COLLECTIONS)
    text = f"""RETURN {{
  messages: {count(names.MESSAGES)},
  archival_chunks: {count(names.ARCHIVAL)},
  events: {count(names.EVENTS)},
  edges: {agent_edges},
  committed_batches: {count(names.BATCHES)},
  recall_log_edges: {count(names.RECALL_LOG)},
  message_vectors: {count(names.MESSAGES, f" AND x.{RECALL_VECTOR} != null")},
  core_blocks: {count(names.CORE, ' AND x.kind == "block"')},
  summaries: {count(names.CORE, ' AND x.kind == "summary"')}
}}"""
    return AqlQuery(text, {"agent_id": agent_id})
