"""One client instance's copy of agents' memory: the local cache, the changes not yet pushed, the
position in each agent's change feed, conflicts, and the sync status and metrics it reports.

It does no I/O. Each operation is a *flow*: a generator that yields the requests it needs
(:class:`~vcm.wire.Call`), is sent each one's JSON result (or has its coded error thrown in), and
returns the operation's result. :mod:`vcm.client` drives flows with its sync or its async HTTP
client, so both clients share every rule here, and tests can drive them with no server at all.

Reads are read-through (a fresh entry, else the server); writes are write-through (the call
returns the server's answer) or write-back (kept, pushed by :meth:`Replica.sync`). A change is
sent with the version it was based on; a refusal for staleness goes to the conflict strategy
(:mod:`vcm.sync.conflicts`), which is reported before anything is written over.

Before the first read of an agent, the instance asks the feed where it is now, and follows it
from there: a change made after that point invalidates what the read returned, whichever of the
two the instance sees first (:meth:`~vcm.sync.cache.LocalCache.read_done`).

The replica is built in layers: :mod:`vcm.sync.state` (state, the change feed, status and
metrics), :mod:`vcm.sync.access` (reads and writes), and here the sync that pushes what is
pending; flows and their drivers are in :mod:`vcm.sync.flows`, changes in :mod:`vcm.sync.changes`.
"""

from __future__ import annotations

import time
from dataclasses import replace

from vcm.errors import VcmError
from vcm.sync.access import ReplicaAccess
from vcm.sync.changes import (
    REFUSED_FOR_GOOD,
    LocalChange,
    SyncResult,
    agent_path,
    version_of,
)
from vcm.sync.flows import Flow
from vcm.wire import Call, seg


class Replica(ReplicaAccess):
    """One client instance's copy of agents' memory (see the module's description)."""

    # --- sync -----------------------------------------------------------------------------------
    def sync(self) -> Flow[SyncResult]:
        """Push pending changes, pull missed ones, report the status of each agent known."""
        started = time.monotonic()
        result = SyncResult()
        with self._lock:
            self.status = "syncing"
            agents = list(dict.fromkeys([*self.cursors, *(k[0] for k in self.pending)]))
        try:
            for agent_id in agents:
                yield from self.ensure_cursor(agent_id)
                yield from self._push(agent_id, result)
                result.pulled += yield from self.pull(agent_id)
        except Exception as exc:
            self._finished(started, exc)
            raise
        result.latency_s = self._finished(started, None, rejected=bool(result.rejected))
        if self.config.report:
            try:
                for agent_id in agents:
                    yield Call("PUT", f"{agent_path(agent_id)}/instances/{seg(self.instance_id)}",
                               json=self.report(agent_id))  # fmt: skip
            except Exception as exc:  # the status could not be told: the sync did not complete
                self._finished(started, exc, counted=True)
                raise
        return result

    def _push(self, agent_id: str, result: SyncResult) -> Flow[None]:
        with self._lock:
            queued = [c for k, c in self.pending.items() if k[0] == agent_id]
        for change in queued:
            conflicts_before = self.conflicts
            try:
                reply = yield from self._write(change)
            except VcmError as exc:
                if exc.status in REFUSED_FOR_GOOD:
                    # A rejected conflict, or content the server refuses: it would be refused
                    # again at every sync, so it leaves the queue and is reported.
                    self._unstage(change, None)
                    result.rejected.append(exc)
                    result.conflicts += self.conflicts - conflicts_before
                    continue
                raise
            result.conflicts += self.conflicts - conflicts_before
            result.pushed += 1
            self._unstage(change, None if change.deleted else version_of(change.kind, reply))

    def _unstage(self, change: LocalChange, version: str | None) -> None:
        """``change`` was pushed (or refused for good): a later change of the key, made on top
        of it meanwhile, is now based on the version it produced."""
        with self._lock:
            queued = self.pending.get(change.item)
            if queued is None:
                return
            if queued.seq == change.seq:
                del self.pending[change.item]
            elif version is not None:
                self.pending[change.item] = replace(queued, base=version)

    def _synced_one(self) -> None:
        """A write-through write is a sync of one change."""
        with self._lock:
            self.syncs += 1

    def _finished(
        self, started: float, error: Exception | None, *, rejected: bool = False, counted: bool = False
    ) -> float:
        latency = time.monotonic() - started
        with self._lock:
            if error is None:
                self.syncs += 1
                self.consecutive_failures = 0
                self.last_sync_at = self.clock()
                self.last_latency_s = latency
                self._latency_total += latency
                self._latency_count += 1
                self.last_error = None
                self.status = "conflict" if rejected else "syncing" if self.pending else "synced"
            else:
                if counted:  # the sync itself was counted as done; its report failed
                    self.syncs -= 1
                    self._latency_count = max(0, self._latency_count - 1)
                self.syncs += 1
                self.failures += 1
                self.consecutive_failures += 1
                self.status = "error"
                self.last_error = f"{type(error).__name__}: {error}"[:200]
        return latency
