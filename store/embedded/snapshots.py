"""Stable paging for recall and archival searches.

Re-running a ranking per page would repeat or skip items: BM25 scores move as the corpus
grows, and new rows can outrank old ones. So pages after the first are served from a *snapshot*
of the ranked id list, stored in SQLite under a random id with a TTL, like an ArangoDB
server-side cursor, and sliced per page.

The first page writes nothing, because it is the hot path of every search and a write would
take SQLite's write lock on a read. Its cursor carries the ids it returned and the corpus bound
(the newest row id at ranking time). The second page ranks the rest of that same corpus
(ids up to the bound, minus the first page's ids), stores it as the snapshot, and pages on from
it. Every item of the first search's corpus therefore appears exactly once across the pages, and
nothing written after the first page appears at all. An item deleted meanwhile (TTL) is left out
of its page. Pages wider than ``INLINE_PAGE`` items snapshot at once, to keep cursors short.
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
# rank(n, bound, exclude) -> (best n hits, newest row id); bound None means "now".
Ranker = Callable[[int, int | None, frozenset[int]], tuple[Ranked, int]]

INLINE_PAGE = 100


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
        max_results: int,
        clock: Callable[[], float],
    ) -> None:
        self._db = db
        self._secret = secret
        self._ttl_s = ttl_s
        self._max_results = max_results
        self._clock = clock

    def page(
        self,
        kind: str,
        agent_id: str,
        fingerprint: str,
        limit: int,
        cursor: str | None,
        rank: Ranker,
    ) -> Slice:
        if cursor is None:
            ranked, bound = rank(limit + 1, None, frozenset())
            if len(ranked) <= limit:
                return Slice(ranked, None)
            if limit <= INLINE_PAGE:
                first = ranked[:limit]
                ids = [row_id for row_id, _ in first]
                position = {"k": kind, "f": fingerprint, "b": bound, "x": ids, "t": self._clock()}
                return Slice(first, self._cursor(position))
            deep, _ = rank(self._max_results, bound, frozenset())
            return self._store(kind, agent_id, fingerprint, deep, limit)

        payload = decode_cursor(cursor, self._secret, kind=kind)
        if payload.get("f") != fingerprint:
            raise StoreValidationError(
                "invalid cursor: it belongs to a search with other arguments; "
                "repeat the original arguments or start again without a cursor"
            )
        if "s" in payload:
            return self._read(kind, agent_id, fingerprint, payload, limit)
        corpus, seen, issued = payload.get("b"), payload.get("x"), payload.get("t")
        if not isinstance(corpus, int) or not isinstance(seen, list) or not isinstance(issued, int | float):
            raise StoreValidationError("invalid cursor: damaged position; start again")
        if issued + self._ttl_s < self._clock():
            raise _expired(self._ttl_s)
        rest, _ = rank(max(self._max_results - len(seen), 1), corpus, frozenset(seen))
        return self._store(kind, agent_id, fingerprint, rest, limit)

    def _store(
        self, kind: str, agent_id: str, fingerprint: str, ranked: Sequence[tuple[int, float]], limit: int
    ) -> Slice:
        """First slice of ``ranked``; the rest is stored only when there is a next page."""
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
        return Slice(list(ranked[:limit]), self._snapshot_cursor(kind, snapshot_id, fingerprint, limit))

    def _read(
        self, kind: str, agent_id: str, fingerprint: str, payload: dict[str, object], limit: int
    ) -> Slice:
        snapshot_id, offset = payload.get("s"), payload.get("o")
        if not isinstance(snapshot_id, str) or not isinstance(offset, int) or offset < 0:
            raise StoreValidationError("invalid cursor: damaged position; start again")
        rows = self._db.query(
            "read a search cursor",
            "SELECT agent_id, kind, items, expires_at FROM cursors WHERE id = ?",
            (snapshot_id,),
        )
        if not rows or rows[0]["expires_at"] < self._clock():
            raise _expired(self._ttl_s)
        row = rows[0]
        if row["agent_id"] != agent_id or row["kind"] != kind:
            raise StoreValidationError("invalid cursor: it belongs to another agent's search")
        ranked: Ranked = [(int(i), float(s)) for i, s in json.loads(row["items"])]
        end = offset + limit
        next_cursor = (
            self._snapshot_cursor(kind, snapshot_id, fingerprint, end) if end < len(ranked) else None
        )
        return Slice(ranked[offset:end], next_cursor)

    def _snapshot_cursor(self, kind: str, snapshot_id: str, fingerprint: str, offset: int) -> str:
        return self._cursor({"k": kind, "s": snapshot_id, "o": offset, "f": fingerprint})

    def _cursor(self, payload: dict[str, object]) -> str:
        return encode_cursor(payload, self._secret)


def _expired(ttl_s: float) -> StoreValidationError:
    return StoreValidationError("invalid cursor: it has expired; run the search again", ttl_s=ttl_s)
