"""Server-side result snapshots behind recall and archival cursors (the ``cursors`` collection).

The first page of a search with more results than fit ranks up to ``max_results`` items once
and stores the ranked ``[key, score]`` list in ``cursors`` under a random id, with
``expires_at`` (a TTL index removes it; reads check it too). Later pages slice the stored list,
so documents written meanwhile can neither push an item onto a later page nor pull one off it.
Re-running the ranking per page could not promise that: BM25 statistics change as messages
arrive, and with a vector index new documents can crowd the over-fetched ANN candidates. An
item deleted since (TTL expiry) is left out of its page. Same semantics as the embedded adapter.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from store.arango import names
from store.arango.cursor import decode_cursor, encode_cursor
from store.arango.errors import translated
from store.errors import StoreValidationError

Ranked = list[tuple[str, float]]


@dataclass(frozen=True)
class Slice:
    items: Ranked
    next_cursor: str | None


class Snapshots:
    def __init__(
        self,
        ro: Any,
        rw: Any,
        secret: bytes,
        *,
        ttl_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._ro = ro
        self._rw = rw
        self._secret = secret
        self._ttl_s = ttl_s
        self._clock = clock

    def first(
        self, kind: str, agent_id: str, fingerprint: str, ranked: Sequence[tuple[str, float]], limit: int
    ) -> Slice:
        """Page 1 of ``ranked``; stores the snapshot only when there is a page 2."""
        if len(ranked) <= limit:
            return Slice(list(ranked), None)
        snapshot_id = secrets.token_hex(16)
        now = self._clock()
        doc = {
            "_key": snapshot_id,
            "kind": kind,
            "agent_id": agent_id,
            "fingerprint": fingerprint,
            "items": [[k, s] for k, s in ranked],
            "created_at": now,
            "expires_at": now + self._ttl_s,
        }
        with translated("store a search cursor"):
            self._rw.collection(names.CURSORS).insert(doc, silent=True)
        return Slice(list(ranked[:limit]), self._cursor(kind, snapshot_id, fingerprint, limit))

    def next(self, kind: str, agent_id: str, fingerprint: str, cursor: str, limit: int) -> Slice:
        payload = decode_cursor(cursor, self._secret, kind=kind)
        snapshot_id, offset = payload.get("s"), payload.get("o")
        if payload.get("f") != fingerprint:
            raise StoreValidationError(
                "invalid cursor: it belongs to a search with other arguments; "
                "repeat the original arguments or start again without a cursor"
            )
        if not isinstance(snapshot_id, str) or not isinstance(offset, int) or offset < 0:
            raise StoreValidationError("invalid cursor: damaged position; start again")
        with translated("read a search cursor"):
            doc = self._ro.collection(names.CURSORS).get(snapshot_id)
        if not isinstance(doc, dict) or float(doc.get("expires_at", 0)) < self._clock():
            raise StoreValidationError(
                "invalid cursor: it has expired; run the search again", ttl_s=self._ttl_s
            )
        if doc.get("agent_id") != agent_id or doc.get("kind") != kind:
            raise StoreValidationError("invalid cursor: it belongs to another agent's search")
        ranked: Ranked = [(str(k), float(s)) for k, s in doc.get("items", [])]
        end = offset + limit
        next_cursor = self._cursor(kind, snapshot_id, fingerprint, end) if end < len(ranked) else None
        return Slice(ranked[offset:end], next_cursor)

    def _cursor(self, kind: str, snapshot_id: str, fingerprint: str, offset: int) -> str:
        return encode_cursor({"k": kind, "s": snapshot_id, "o": offset, "f": fingerprint}, self._secret)
