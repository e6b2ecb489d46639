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
What a stored snapshot's cursor holds and how it is checked is shared with the ArangoDB adapter
(:mod:`vcm.store.paging`); the inline first-page cursor is this adapter's own.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence

from vcm.store import paging
from vcm.store.cursor import decode_cursor, encode_cursor
from vcm.store.embedded.db import Database

Ranked = list[tuple[int, float]]
Slice = paging.Slice[int]
# rank(n, bound, exclude) -> (best n hits, newest row id); bound None means "now".
Ranker = Callable[[int, int | None, frozenset[int]], tuple[Ranked, int]]

INLINE_PAGE = 100


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
        paging.check_fingerprint(payload, fingerprint)
        if "s" in payload:
            return self._read(kind, agent_id, fingerprint, payload, limit)
        corpus, seen, issued = payload.get("b"), payload.get("x"), payload.get("t")
        if not isinstance(corpus, int) or not isinstance(seen, list) or not isinstance(issued, int | float):
            raise paging.damaged_cursor()
        if issued + self._ttl_s < self._clock():
            raise paging.expired_cursor(self._ttl_s)
        rest, _ = rank(max(self._max_results - len(seen), 1), corpus, frozenset(seen))
        return self._store(kind, agent_id, fingerprint, rest, limit, base=len(seen))

    def _store(
        self,
        kind: str,
        agent_id: str,
        fingerprint: str,
        ranked: Sequence[tuple[int, float]],
        limit: int,
        *,
        base: int = 0,
    ) -> Slice:
        """First slice of ``ranked``; the rest is stored only when there is a next page.
        ``base``: items of this search on pages before ``ranked``'s first item."""
        if len(ranked) <= limit:
            return Slice(list(ranked), None, base)
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
        return paging.cut(
            ranked,
            0,
            limit,
            secret=self._secret,
            kind=kind,
            snapshot_id=snapshot_id,
            fingerprint=fingerprint,
            base=base,
        )

    def _read(self, kind: str, agent_id: str, fingerprint: str, payload: dict[str, object], limit: int) -> Slice:
        snapshot_id, offset = paging.snapshot_position(payload)
        base = paging.snapshot_base(payload)
        rows = self._db.query(
            "read a search cursor",
            "SELECT agent_id, kind, items, expires_at FROM cursors WHERE id = ?",
            (snapshot_id,),
        )
        stored = paging.check_snapshot(
            dict(rows[0]) if rows else None, agent_id=agent_id, kind=kind, now=self._clock(), ttl_s=self._ttl_s
        )
        ranked: Ranked = [(int(i), float(s)) for i, s in json.loads(stored["items"])]
        return paging.cut(
            ranked,
            offset,
            limit,
            secret=self._secret,
            kind=kind,
            snapshot_id=snapshot_id,
            fingerprint=fingerprint,
            base=base,
        )

    def _cursor(self, payload: dict[str, object]) -> str:
        return encode_cursor(payload, self._secret)
