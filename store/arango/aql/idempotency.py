"""The hot path's idempotency records: documents of the ``idempotency`` collection with
``scope == "hot"`` and an ``expires_at`` (``put_core``'s own records have scope ``core`` and no
expiry). The documents' ``_key`` encodes (agent, scope, key), so a write replaces by key."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vcm.store.arango import names
from vcm.store.arango.aql.common import AqlQuery

HOT_SCOPE = "hot"


def upsert_records(docs: Sequence[Mapping[str, Any]]) -> AqlQuery:
    """Write record documents, a later one replacing the earlier one of the same ``_key`` (a
    claim's settled result replaces its first)."""
    text = f'FOR doc IN @docs\n  INSERT doc INTO {names.IDEMPOTENCY} OPTIONS {{ overwriteMode: "replace" }}'
    return AqlQuery(text, {"docs": [dict(d) for d in docs]})


def list_records(agent_id: str, after: str | None, now: float, limit: int) -> AqlQuery:
    """The agent's unexpired records by key, those above ``after``, at most ``limit`` (uses the
    ``idempotency_agent_scope_key`` index)."""
    text = (
        f"FOR r IN {names.IDEMPOTENCY}\n"
        "  FILTER r.agent_id == @agent_id AND r.scope == @scope AND r.key > @after\n"
        "  FILTER r.expires_at != null AND r.expires_at >= @now\n"
        "  SORT r.key\n"
        "  LIMIT @limit\n"
        "  RETURN r"
    )
    bind = {"agent_id": agent_id, "scope": HOT_SCOPE, "after": after or "", "now": now, "limit": limit}
    return AqlQuery(text, bind)


def expire_records(now: float) -> AqlQuery:
    """Remove the records expired before ``now`` (the sparse ``idempotency_expires`` index);
    returns how many."""
    text = (
        f"FOR r IN {names.IDEMPOTENCY}\n"
        "  FILTER r.expires_at != null AND r.expires_at < @now\n"
        f"  REMOVE r IN {names.IDEMPOTENCY}\n"
        "  COLLECT WITH COUNT INTO n\n"
        "  RETURN n"
    )
    return AqlQuery(text, {"now": now})
