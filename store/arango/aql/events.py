"""The event log: one page of events, in (created_at, key) order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vcm.store.arango import names
from vcm.store.arango.aql.common import (
    AqlQuery,
)


def events_page(
    agent_id: str | None,
    kinds: Sequence[str] | None,
    *,
    since: float | None,
    after: tuple[float, str] | None,
    limit: int,
    until: float | None = None,
    actor: str | None = None,
    idempotency_key: str | None = None,
) -> AqlQuery:
    """Events oldest first, keyset-paged on ``(created_at, _key)``: stable while events arrive.

    Every filter is a bind parameter (never text), so no caller value can change the query.
    """
    lines: list[str] = []
    bind: dict[str, Any] = {"limit": limit}
    if agent_id is not None:
        lines.append("FILTER e.agent_id == @agent_id")
        bind["agent_id"] = agent_id
    if kinds is not None:
        lines.append("FILTER e.kind IN @kinds")
        bind["kinds"] = list(kinds)
    if since is not None:
        lines.append("FILTER e.created_at >= @since")
        bind["since"] = since
    if until is not None:
        lines.append("FILTER e.created_at < @until")
        bind["until"] = until
    if actor is not None:
        lines.append("FILTER e.actor == @actor")
        bind["actor"] = actor
    if idempotency_key is not None:
        lines.append("FILTER e.idempotency_key == @idempotency_key")
        bind["idempotency_key"] = idempotency_key
    if after is not None:
        lines.append("FILTER e.created_at > @after_t OR (e.created_at == @after_t AND e._key > @after_k)")
        bind["after_t"], bind["after_k"] = after
    body = "".join(f"\n  {line}" for line in lines)
    text = f"FOR e IN {names.EVENTS}{body}\n  SORT e.created_at ASC, e._key ASC\n  LIMIT @limit\n  RETURN e"
    return AqlQuery(text, bind)
