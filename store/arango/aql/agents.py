"""Agents, summaries and snapshots: the agent list and id floors, uncommitted and folded
messages, summary versions, snapshots.
"""

from __future__ import annotations

from collections.abc import Sequence

from vcm.store.arango import names
from vcm.store.arango.aql.common import (
    AqlQuery,
)


def list_agents() -> AqlQuery:
    text = f'FOR a IN {names.CORE}\n  FILTER a.kind == "agent"\n  SORT a.agent_id ASC\n  RETURN a'
    return AqlQuery(text, {})


def advance_id_floor(key: str, floor: int) -> AqlQuery:
    """Raise ``id_floor`` atomically (one document, one UPDATE): never lowers it."""
    text = (
        f"FOR a IN {names.CORE}\n"
        '  FILTER a._key == @key AND a.kind == "agent"\n'
        f"  UPDATE a WITH {{ id_floor: MAX([a.id_floor, @floor]) }} IN {names.CORE}\n"
        "  RETURN NEW.id_floor"
    )
    return AqlQuery(text, {"key": key, "floor": floor})


def fence(agent_keys: Sequence[str], incarnation: str, now: float) -> AqlQuery:
    """The fence of a cold-path write, run first inside its stream transaction: the agent records
    of ``agent_keys`` that still hold ``incarnation`` (a record without one holds "") are
    updated (``fenced_at``) and their agent ids returned; the caller aborts unless every key
    answered. The update is the point: it write-locks the record until the transaction ends, so
    a concurrent ``delete_agent`` (which removes the record first) conflicts with it, one of the
    two aborts, and no fenced write lands after the delete."""
    text = (
        f"FOR a IN {names.CORE}\n"
        '  FILTER a._key IN @keys AND a.kind == "agent" AND NOT_NULL(a.incarnation, "") == @incarnation\n'
        f"  UPDATE a WITH {{ fenced_at: @now }} IN {names.CORE}\n"
        "  RETURN NEW.agent_id"
    )
    return AqlQuery(text, {"keys": list(agent_keys), "incarnation": incarnation, "now": now})


def uncommitted_messages(agent_id: str, summary_vertex: str, after_seq: int, limit: int) -> AqlQuery:
    """Messages by seq with no ``recall_log`` edge from the summary (the FIFO of a rebuild). The
    (agent_id, seq) index serves FILTER and SORT; the edge index on ``_to`` answers each probe."""
    text = (
        f"FOR m IN {names.MESSAGES}\n"
        "  FILTER m.agent_id == @agent_id AND m.seq > @after\n"
        "  SORT m.seq ASC\n"
        f"  LET folded = FIRST(FOR e IN {names.RECALL_LOG} FILTER e._to == m._id AND e._from == @summary "
        "LIMIT 1 RETURN true)\n"
        "  FILTER folded == null\n"
        "  LIMIT @limit\n"
        "  RETURN m"
    )
    return AqlQuery(text, {"agent_id": agent_id, "after": after_seq, "summary": summary_vertex, "limit": limit})


def summary_versions(agent_id: str, limit: int) -> AqlQuery:
    text = (
        f"FOR b IN {names.BATCHES}\n"
        '  FILTER b.agent_id == @agent_id AND HAS(b, "summary_text")\n'
        "  SORT b.batch_id DESC\n"
        "  LIMIT @limit\n"
        "  RETURN b"
    )
    return AqlQuery(text, {"agent_id": agent_id, "limit": limit})


def message_ids_of(agent_id: str) -> AqlQuery:
    text = f"FOR m IN {names.MESSAGES}\n  FILTER m.agent_id == @agent_id\n  RETURN m.message_id"
    return AqlQuery(text, {"agent_id": agent_id})


def folded_message_vertices(summary_vertex: str) -> AqlQuery:
    """The message vertices the summary's ``recall_log`` edges point at (the edge index serves it)."""
    text = f"FOR e IN {names.RECALL_LOG}\n  FILTER e._from == @summary\n  RETURN e._to"
    return AqlQuery(text, {"summary": summary_vertex})


def unfold_messages(summary_vertex: str, message_vertices: Sequence[str]) -> AqlQuery:
    """Remove the summary's ``recall_log`` edges to these messages (they re-enter the FIFO)."""
    text = (
        f"FOR e IN {names.RECALL_LOG}\n  FILTER e._from == @summary AND e._to IN @ids\n  REMOVE e IN {names.RECALL_LOG}"
    )
    return AqlQuery(text, {"summary": summary_vertex, "ids": list(message_vertices)})


def blocks_of(agent_id: str) -> AqlQuery:
    text = f'FOR b IN {names.CORE}\n  FILTER b.agent_id == @agent_id AND b.kind == "block"\n  RETURN b._key'
    return AqlQuery(text, {"agent_id": agent_id})


def list_snapshots(agent_id: str, now: float) -> AqlQuery:
    """Unexpired snapshots, newest first, without their payloads."""
    text = (
        f"FOR s IN {names.SNAPSHOTS}\n"
        "  FILTER s.agent_id == @agent_id AND (s.expires_at == null OR s.expires_at >= @now)\n"
        "  SORT s.created_at DESC, s.snapshot_id ASC\n"
        '  RETURN UNSET(s, "payload")'
    )
    return AqlQuery(text, {"agent_id": agent_id, "now": now})
