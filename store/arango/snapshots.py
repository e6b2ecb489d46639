"""Server-side result snapshots behind recall and archival cursors (the ``cursors`` collection).

The first page of a search with more results than fit ranks up to ``max_results`` items once
and stores the ranked ``[key, score]`` list in ``cursors`` under a random id, with
``expires_at`` (a TTL index removes it; reads check it too). Later pages slice the stored list,
so documents written meanwhile can neither push an item onto a later page nor pull one off it.
Re-running the ranking per page could not promise that: BM25 statistics change as messages
arrive, and with a vector index new documents can crowd the over-fetched ANN candidates. An
item deleted since (TTL expiry) is left out of its page. Same semantics as the embedded adapter;
the cursor format and its checks are shared with it (:mod:`vcm.store.paging`).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from vcm.store import paging
from vcm.store.arango import names
from vcm.store.arango.errors import translated
from vcm.store.cursor import decode_cursor

Ranked = list[tuple[str, float]]
Slice = paging.Slice[str]


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
        return paging.cut(
            ranked, 0, limit, secret=self._secret, kind=kind, snapshot_id=snapshot_id, fingerprint=fingerprint
        )

    def next(self, kind: str, agent_id: str, fingerprint: str, cursor: str, limit: int) -> Slice:
        payload = decode_cursor(cursor, self._secret, kind=kind)
        paging.check_fingerprint(payload, fingerprint)
        snapshot_id, offset = paging.snapshot_position(payload)
        with translated("read a search cursor"):
            doc = self._ro.collection(names.CURSORS).get(snapshot_id)
        stored = paging.check_snapshot(
            doc if isinstance(doc, dict) else None, agent_id=agent_id, kind=kind, now=self._clock(), ttl_s=self._ttl_s
        )
        ranked: Ranked = [(str(k), float(s)) for k, s in stored.get("items", [])]
        return paging.cut(
            ranked, offset, limit, secret=self._secret, kind=kind, snapshot_id=snapshot_id, fingerprint=fingerprint
        )
