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


def list_tombstones(agent_id: str) -> AqlQuery:
    """The agent's tombstones (the ``tombstones_agent`` index)."""
    text = (
        f"FOR t IN {names.TOMBSTONES}\n"
        "  FILTER t.agent_id == @agent_id\n"
        "  RETURN { kind: t.kind, item_id: t.item_id, forgotten_at: t.forgotten_at }"
    )
    return AqlQuery(text, {"agent_id": agent_id})
