"""The replica's state: the cache, pending changes, feed cursors and sync counters; following each
agent's change feed; the status and metrics an instance reports. :class:`~vcm.sync.replica.Replica`
builds its reads, writes and sync on it."""

from __future__ import annotations

import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from vcm.sync.cache import Json, Key, LocalCache
from vcm.sync.changes import (
    PULL_PAGE,
    Listener,
    LocalChange,
    agent_path,
    position,
)
from vcm.sync.config import CacheConfig, default_instance_id
from vcm.sync.flows import Flow
from vcm.wire import Call


class ReplicaState:
    def __init__(self, config: CacheConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.instance_id = config.instance_id or default_instance_id()
        self.host = socket.gethostname()[:200]
        self.cache = LocalCache(config.max_entries, config.ttl_s)
        self.clock = clock
        self.pending: OrderedDict[Key, LocalChange] = OrderedDict()
        self.cursors: dict[str, str] = {}
        self.status = "synced"
        self.last_error: str | None = None
        self.syncs = self.failures = self.consecutive_failures = self.conflicts = 0
        self.notifications = 0
        self.last_sync_at: float | None = None
        self.last_latency_s: float | None = None
        self._latency_total = 0.0
        self._latency_count = 0
        self._seq = 0
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self.on_new_agent: Callable[[str], None] | None = None

    # --- the change feed ------------------------------------------------------------------------
    def ensure_cursor(self, agent_id: str) -> Flow[None]:
        """Know where the agent's feed is before the first read of it (see the module docstring)."""
        if agent_id in self.cursors:
            return
        page = yield Call("GET", f"{agent_path(agent_id)}/changes", params={"limit": 1})
        with self._lock:
            fresh = agent_id not in self.cursors
            if fresh:
                self.cursors[agent_id] = str(page["next_after"])
        if fresh and self.on_new_agent is not None:
            self.on_new_agent(agent_id)

    def cursor(self, agent_id: str) -> str | None:
        with self._lock:
            return self.cursors.get(agent_id)

    def apply(self, agent_id: str, change: Json) -> None:
        """One change from the feed (followed or pulled)."""
        kind, key, op = change.get("kind"), str(change.get("key")), change.get("op")
        version = change.get("version")
        if kind == "agent":
            if op == "reset":
                self.cache.clear(agent_id)
        elif op == "clear":
            self.cache.clear(agent_id, str(kind))
        else:
            self.cache.invalidate((agent_id, str(kind), key), None if version is None else str(version))
        self.advance(agent_id, str(change["id"]))
        with self._lock:
            self.notifications += 1
            listeners = list(self._listeners)
        for listener in listeners:
            listener(agent_id, change)

    def gap(self, agent_id: str) -> None:
        """Changes were lost between the instance's position and the feed: trust nothing cached."""
        self.cache.clear(agent_id)

    def advance(self, agent_id: str, change_id: str) -> None:
        with self._lock:
            now = self.cursors.get(agent_id)
            if now is None or position(change_id) > position(now):
                self.cursors[agent_id] = change_id

    def listen(self, listener: Listener) -> None:
        """Call ``listener(agent_id, change)`` for every change applied (in the thread applying it)."""
        with self._lock:
            self._listeners.append(listener)

    def pull(self, agent_id: str) -> Flow[int]:
        """Apply the changes the follower may have missed (it was down, or there is none)."""
        pulled = 0
        while True:
            params = {"after": self.cursor(agent_id), "limit": PULL_PAGE}
            page = yield Call("GET", f"{agent_path(agent_id)}/changes", params=params)
            if page.get("gap"):
                self.gap(agent_id)
            for change in page.get("changes") or []:
                self.apply(agent_id, change)
            self.advance(agent_id, str(page["next_after"]))
            pulled += len(page.get("changes") or [])
            if len(page.get("changes") or []) < PULL_PAGE:
                return pulled

    def _synced_one(self) -> None:
        """A write-through write is a sync of one change."""
        with self._lock:
            self.syncs += 1

    # --- status and metrics ---------------------------------------------------------------------
    def report(self, agent_id: str) -> Json:
        """This instance's sync status for one agent, as the server keeps it."""
        counts = self.cache.counts()
        with self._lock:
            return {
                "status": self.status,
                "last_sync_at": self.last_sync_at,
                "sync_version": self.cursors.get(agent_id),
                "pending": sum(1 for k in self.pending if k[0] == agent_id),
                "conflicts": self.conflicts,
                "syncs": self.syncs,
                "failures": self.failures,
                "consecutive_failures": self.consecutive_failures,
                "last_sync_latency_s": self.last_latency_s,
                "sync_interval_s": self.config.sync_interval_s,
                "last_error": self.last_error,
                "host": self.host,
                "cache": {"entries": counts.entries, "hits": counts.hits, "misses": counts.misses},
            }

    def metrics(self) -> Json:
        """Client-side counters: cache hit ratio, sync latency, conflict rate, notifications."""
        counts = self.cache.counts()
        with self._lock:
            return {
                "instance_id": self.instance_id,
                "status": self.status,
                "cache": {
                    "entries": counts.entries, "hits": counts.hits, "misses": counts.misses,
                    "hit_ratio": counts.hit_ratio, "invalidations": counts.invalidations,
                    "evictions": counts.evictions,
                },
                "pending": len(self.pending),
                "syncs": self.syncs,
                "failures": self.failures,
                "consecutive_failures": self.consecutive_failures,
                "conflicts": self.conflicts,
                "conflict_rate": self.conflicts / self.syncs if self.syncs else None,
                "last_sync_at": self.last_sync_at,
                "last_sync_latency_s": self.last_latency_s,
                "mean_sync_latency_s": self._latency_total / self._latency_count if self._latency_count else None,
                "notifications": self.notifications,
                "sync_versions": dict(self.cursors),
            }  # fmt: skip
