"""Server-side result snapshots behind recall and archival cursors.

The first page of a search that has more results ranks up to ``max_results`` items once and
stores that ranked id list (with scores) in SQLite under a random id, with a TTL, like an
ArangoDB server-side cursor. Later pages slice the stored list, so messages or chunks written
meanwhile can neither push an item onto a second page nor pull one off it: paging never repeats
or skips an item of the first page's ordering. (Re-running the ranking per page would: BM25 and
IVF scores move as the corpus grows.) An item deleted since the snapshot (TTL expiry) is left out
of its page.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from store.embedded.cursor import decode_cursor, encode_cursor
from store.embedded.db import Database
from store.errors import StoreValidationError

Ranked = list[tuple[int, float]]


@dataclass(frozen=True)
class Slice:
    items: Ranked
    next_cursor: str | None


class Snapshots:
    def __init__(
        self,
        db: Database,
        secret: bytes,
        *,
        ttl_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._db = db
        self._secret = secret
        self._ttl_s = ttl_s
        self._clock = clock

    def first(
        self,
        kind: str,
        agent_id: str,
        fingerprint: str,
        ranked: Sequence[tuple[int, float]],
        limit: int,
    ) -> Slice:
        """Page 1 of ``ranked``; stores the snapshot only when there is a page 2."""
        if len(ranked) <= limit:
            return Slice(list(ranked), None)
        snapshot_id = secrets.token_hex(16)
        now = self._clock()
        with self._db.write("store a search cursor") as conn:
            # Purge as we go, so abandoned cursors do not accumulate between expire() runs.
            conn.execute("DELETE FROM cursors WHERE expires_at < ?", (now,))
            conn.execute(
                "INSERT INTO cursors (id, kind, agent_id, fingerprint, items, created_at, "
                "expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    snapshot_id,
                    kind,
                    agent_id,
                    fingerprint,
                    json.dumps([[i, s] for i, s in ranked], separators=(",", ":")),
                    now,
                    now + self._ttl_s,
                ),
            )
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
        rows = self._db.query(
            "read a search cursor",
            "SELECT agent_id, kind, items, expires_at FROM cursors WHERE id = ?",
            (snapshot_id,),
        )
        if not rows or rows[0]["expires_at"] < self._clock():
            raise StoreValidationError(
                "invalid cursor: it has expired; run the search again",
                ttl_s=self._ttl_s,
            )
        row = rows[0]
        if row["agent_id"] != agent_id or row["kind"] != kind:
            raise StoreValidationError("invalid cursor: it belongs to another agent's search")
        ranked: Ranked = [(int(i), float(s)) for i, s in json.loads(row["items"])]
        end = offset + limit
        next_cursor = self._cursor(kind, snapshot_id, fingerprint, end) if end < len(ranked) else None
        return Slice(ranked[offset:end], next_cursor)

    def _cursor(self, kind: str, snapshot_id: str, fingerprint: str, offset: int) -> str:
        return encode_cursor({"k": kind, "s": snapshot_id, "o": offset, "f": fingerprint}, self._secret)
