"""Tombstones: documents of the ``tombstones`` collection, one per forgotten message or document
(``kind``, ``item_id``, ``forgotten_at``), keyed by (agent, kind, id), so a repeated forget keeps
the first one. A snapshot restore reads them and puts none of those items back."""

from __future__ import annotations

from vcm.store.arango import names
from vcm.store.arango.aql.common import AqlQuery


def put_tombstone(key: str, agent_id: str, kind: str, item_id: str, now: float) -> AqlQuery:
    """Write one tombstone under ``key`` (the adapter's ``doc_key(agent, kind, id)``); an existing
    one (an earlier forget of the same id) is kept."""
    doc = {
        "_key": key,
        "agent_id": agent_id,
        "kind": kind,
        "item_id": item_id,
        "forgotten_at": now,
    }
    text = f'INSERT @doc INTO {names.TOMBSTONES} OPTIONS {{ overwriteMode: "ignore" }}'
    return AqlQuery(text, {"doc": doc})


def tombstoned_messages(agent_ids: list[str], message_ids: list[str]) -> AqlQuery:
    """Which of these messages were forgotten (``agent_id|message_id`` pairs): a spool that read
    them before the forget must not write them back."""
    text = (
        f"FOR t IN {names.TOMBSTONES}\n"
        '  FILTER t.agent_id IN @agent_ids AND t.kind == "message" AND t.item_id IN @message_ids\n'
        '  RETURN CONCAT(t.agent_id, "|", t.item_id)'
    )
    return AqlQuery(text, {"agent_ids": agent_ids, "message_ids": message_ids})


def list_tombstones(agent_id: str) -> AqlQuery:
    """The agent's tombstones (the ``tombstones_agent`` index)."""
    text = (
        f"FOR t IN {names.TOMBSTONES}\n"
        "  FILTER t.agent_id == @agent_id\n"
        "  RETURN { kind: t.kind, item_id: t.item_id, forgotten_at: t.forgotten_at }"
    )
    return AqlQuery(text, {"agent_id": agent_id})
