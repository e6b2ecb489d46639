"""The event log of the embedded store: appending events and listing them with keyset paging.

Events that ride along with another write (spooling, eviction) are inserted by
:mod:`vcm.store.embedded.messages`; this module holds the port's own event operations.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from vcm.store import paging, semantics, validation
from vcm.store.cursor import fingerprint
from vcm.store.embedded import rows
from vcm.store.embedded.base import EmbeddedBase, fence
from vcm.store.types import MemoryEvent, Page


class EventOps(EmbeddedBase):
    """``append_event`` (idempotent by event id) and ``query_events``."""

    def append_event(self, event: MemoryEvent, *, incarnation: str | None = None) -> MemoryEvent:
        validation.event(event)
        event_id = semantics.event_id(event)
        created_at = self._now(event.created_at)
        with self._db.write("append an event") as conn:
            fence(conn, (event.agent_id,), incarnation)
            found = conn.execute(f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE event_id = ?", (event_id,)).fetchone()
            if found is not None:
                return rows.event(found)
            conn.execute(
                "INSERT INTO events (event_id, agent_id, kind, payload, created_at, actor, "
                "idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    event_id,
                    event.agent_id,
                    event.kind,
                    rows.dumps(dict(event.payload)),
                    created_at,
                    event.actor,
                    event.idempotency_key,
                ),
            )
        return MemoryEvent(
            agent_id=event.agent_id,
            kind=event.kind,
            payload=json.loads(rows.dumps(dict(event.payload))),
            event_id=event_id,
            created_at=created_at,
            actor=event.actor,
            idempotency_key=event.idempotency_key,
        )

    def query_events(
        self,
        agent_id: str | None,
        kinds: Sequence[str] | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
        actor: str | None = None,
        idempotency_key: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[MemoryEvent]:
        f = validation.event_listing(
            agent_id, kinds, since, limit, until=until, actor=actor, idempotency_key=idempotency_key
        )
        key = fingerprint("events", agent_id, *f.key())
        where: list[str] = []
        params: list[Any] = []
        if agent_id is not None:
            where.append("agent_id = ?")
            params.append(agent_id)
        if f.kinds is not None:
            where.append(f"kind IN ({','.join('?' * len(f.kinds))})")
            params += f.kinds
        if f.since is not None:
            where.append("created_at >= ?")
            params.append(f.since)
        if f.until is not None:
            where.append("created_at < ?")
            params.append(f.until)
        if f.actor is not None:
            where.append("actor = ?")
            params.append(f.actor)
        if f.idempotency_key is not None:
            where.append("idempotency_key = ?")
            params.append(f.idempotency_key)
        if cursor is not None:
            # Keyset paging on (created_at, seq): an event appended later lands after the
            # position or is simply not part of this listing; nothing repeats or shifts.
            after_t, after_seq = paging.keyset_position(cursor, self._secret, key, "s", int)
            where.append("(created_at, seq) > (?, ?)")
            params += [after_t, after_seq]
        sql = f"SELECT {rows.EVENT_COLUMNS} FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, seq LIMIT ?"
        found = self._db.query("query events", sql, [*params, limit + 1])
        page = found[:limit]
        next_cursor = None
        if len(found) > limit:
            last = page[-1]
            next_cursor = paging.keyset_cursor(self._secret, key, last["created_at"], "s", last["seq"])
        return Page([rows.event(r) for r in page], next_cursor)
