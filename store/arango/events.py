"""The event log of the ArangoDB store: appending events and listing them with keyset paging.

Events that ride along with another write (spooling, eviction) are written by
:mod:`vcm.store.arango.messages`; this module holds the port's own event operations.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from vcm.store import paging, semantics, validation
from vcm.store.arango import documents, names
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import events as aql_events
from vcm.store.arango.base import ArangoBase
from vcm.store.cursor import fingerprint
from vcm.store.types import MemoryEvent, Page


class EventOps(ArangoBase):
    """``append_event`` (idempotent by event key) and ``query_events``."""

    def append_event(self, event: MemoryEvent, *, incarnation: str | None = None) -> MemoryEvent:
        validation.event(event)
        event_id = semantics.event_id(event)
        created_at = self._now(event.created_at)
        payload = json.loads(validation.json_mapping("payload", event.payload))  # as it will read back
        doc = documents.event_doc(replace(event, payload=payload), event_id, created_at)
        rows = self._fenced_run(
            aql_common.insert_ignore(names.EVENTS, [doc]),
            (names.EVENTS,),
            (event.agent_id,),
            incarnation,
            "append_event",
        )
        if rows and rows[0] is not None:
            return documents.event_from_doc(doc)
        existing = self._get(self._rw, names.EVENTS, doc["_key"], "append_event")
        if existing is None:  # removed between the two calls; what we tried to write is the answer
            return documents.event_from_doc(doc)
        return documents.event_from_doc(existing)

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
        after: tuple[float, str] | None = None
        if cursor is not None:
            # Keyset paging on (created_at, _key): an event appended later lands after the
            # position or is not part of this listing; nothing repeats or shifts.
            after = paging.keyset_position(cursor, self._secret, key, "id", str)
        q = aql_events.events_page(
            agent_id,
            f.kinds,
            since=f.since,
            until=f.until,
            actor=f.actor,
            idempotency_key=f.idempotency_key,
            after=after,
            limit=limit + 1,
        )
        found = self._run(self._ro, q, "query_events")
        page = found[:limit]
        next_cursor = None
        if len(found) > limit:
            last = page[-1]
            next_cursor = paging.keyset_cursor(self._secret, key, last["created_at"], "id", last["_key"])
        return Page([documents.event_from_doc(d) for d in page], next_cursor)
