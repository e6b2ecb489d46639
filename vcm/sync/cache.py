"""The client's local cache of an agent's blocks, state and facts: LRU with a size cap and a
lifetime per entry, hit/miss counters. Pure (no I/O); thread-safe, because the application, the
periodic sync and the change-feed follower all touch it.

An entry keeps two things apart:

* the **value** last read or written (the route's JSON), served while *fresh*: not invalidated
  by the change feed and younger than ``ttl_s``;
* the **version** the application last saw (``_rev``, fact version): the base of its next change
  of that key, kept after the value is invalidated or expires, so that a change made on top of a
  stale read is sent with the stale version and found out as a conflict instead of silently
  overwriting what another instance wrote.

A read that races a change (the feed says the key changed while the read was on the wire) is not
served from the cache afterwards unless it returned the announced version: it may predate it.
Only the size cap drops an entry, version and all.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
Key = tuple[str, str, str]  # (agent id, kind: block | state | fact, block id | state key | fact id)


@dataclass
class Entry:
    version: str | None
    value: Json | None  # None: only the version is known (invalidated, expired, or never read)
    stored_at: float


@dataclass(frozen=True)
class CacheCounts:
    entries: int
    hits: int
    misses: int
    invalidations: int
    evictions: int

    @property
    def hit_ratio(self) -> float | None:
        looked = self.hits + self.misses
        return self.hits / looked if looked else None


class LocalCache:
    def __init__(self, max_entries: int, ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1 or ttl_s <= 0:
            raise ValueError("a cache needs max_entries >= 1 and ttl_s > 0")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.clock = clock
        self._entries: OrderedDict[Key, Entry] = OrderedDict()
        self._inflight: dict[Key, int] = {}
        self._raced: dict[Key, str | None] = {}  # key -> the version the feed announced mid-read
        self._lock = threading.Lock()
        self.hits = self.misses = self.invalidations = self.evictions = 0

    # --- reads --------------------------------------------------------------------------------
    def get(self, key: Key) -> Json | None:
        """The fresh value of ``key`` (a hit), or None (a miss)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.value is not None and self.clock() - entry.stored_at >= self.ttl_s:
                entry.value = None  # expired: the version stays the base of the next change
            if entry is None or entry.value is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry.value

    def version(self, key: Key) -> str | None:
        """The version the application last saw of ``key`` (None: none known)."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.version if entry is not None else None

    # --- writes -------------------------------------------------------------------------------
    def reading(self, key: Key) -> None:
        """A read of ``key`` from the server begins (see :meth:`read_done`)."""
        with self._lock:
            self._inflight[key] = self._inflight.get(key, 0) + 1

    def read_done(self, key: Key, value: Json | None, version: str | None) -> None:
        """A read of ``key`` returned ``value`` (None: it failed). Kept as fresh unless the feed
        announced another version of the key while the read was on the wire."""
        with self._lock:
            left = self._inflight.get(key, 1) - 1
            if left > 0:
                self._inflight[key] = left
            else:
                self._inflight.pop(key, None)
            raced = key in self._raced
            announced = self._raced.get(key)
            if left <= 0:
                self._raced.pop(key, None)
            if value is None:
                return
            self._store(key, version, None if raced and announced != version else value)

    def put(self, key: Key, value: Json | None, version: str | None) -> None:
        """What this instance just wrote or learnt (``value`` None: only the version)."""
        with self._lock:
            self._store(key, version, value)

    def forget(self, key: Key) -> None:
        with self._lock:
            self._entries.pop(key, None)

    # --- the change feed ------------------------------------------------------------------------
    def invalidate(self, key: Key, version: str | None) -> bool:
        """Another write of ``key`` produced ``version`` (None: deleted): drop the cached value,
        unless it is that version already (this instance's own write coming back). Returns
        whether anything was dropped."""
        with self._lock:
            if key in self._inflight:
                self._raced[key] = version
            entry = self._entries.get(key)
            if entry is None or (version is not None and entry.version == version):
                return False
            if entry.value is None:
                return False
            entry.value = None
            self.invalidations += 1
            return True

    def clear(self, agent_id: str, kind: str | None = None) -> int:
        """Drop every entry of the agent (of one kind): after a gap or a reset, nothing cached of
        it can be trusted, versions included. Returns how many."""
        with self._lock:
            doomed = [k for k in self._entries if k[0] == agent_id and (kind is None or k[1] == kind)]
            for k in doomed:
                del self._entries[k]
            for k in list(self._inflight):
                if k[0] == agent_id and (kind is None or k[1] == kind):
                    self._raced[k] = None
            self.invalidations += len(doomed)
            return len(doomed)

    def counts(self) -> CacheCounts:
        with self._lock:
            return CacheCounts(len(self._entries), self.hits, self.misses, self.invalidations, self.evictions)

    def _store(self, key: Key, version: str | None, value: Json | None) -> None:
        self._entries[key] = Entry(version, value, self.clock())
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
            self.evictions += 1


__all__ = ["CacheCounts", "Entry", "Json", "Key", "LocalCache"]
