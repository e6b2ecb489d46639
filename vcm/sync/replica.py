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
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from vcm.errors import NotFound, RevConflict, VcmError
from vcm.sync.cache import Json, Key, LocalCache
from vcm.sync.config import CacheConfig, default_instance_id
from vcm.sync.conflicts import Decision, Version, resolve
from vcm.wire import Call, seg

T = TypeVar("T")
Flow = Generator[Call, Any, T]
Listener = Callable[[str, Json], None]
Kind = Literal["block", "state"]

PULL_PAGE = 500
# A change that meets this many conflicts in a row (others keep writing the key) gives up.
MAX_ATTEMPTS = 8
# Statuses that refuse a pushed change for good (conflict, gone, invalid or refused content);
# anything else (401, 429, 5xx) leaves it queued for the next sync.
REFUSED_FOR_GOOD = (404, 409, 412, 422)


def position(change_id: str) -> tuple[int, int]:
    ms, _, seq = change_id.partition("-")
    return int(ms), int(seq or 0)


def _agent_path(agent_id: str) -> str:
    return f"/v1/agents/{seg(agent_id)}"


def item_path(agent_id: str, kind: str, key: str) -> str:
    section = {"block": "blocks", "state": "state", "fact": "facts"}[kind]
    return f"{_agent_path(agent_id)}/{section}/{seg(key)}"


def version_of(kind: str, body: Json) -> str | None:
    found = body.get("version") if kind == "fact" else body.get("_rev")
    return None if found is None else str(found)


@dataclass(frozen=True)
class LocalChange:
    """A change of one block or state key, as the application made it."""

    agent_id: str
    kind: Kind
    key: str
    value: Any  # a state value, a block's content; None: delete
    base: str | None  # the version it was made on (None: none known)
    edited_at: float  # when (this machine's clock)
    fields: tuple[tuple[str, Any], ...] = ()  # block: role, pinned, metadata; state: ttl_s
    seq: int = 0
    # Sent with the first attempt only: a write again after a conflict is another request.
    idempotency_key: str | None = None

    @property
    def deleted(self) -> bool:
        return self.value is None

    @property
    def item(self) -> Key:
        return (self.agent_id, self.kind, self.key)

    def call(self, base: str | None) -> Call:
        path = item_path(self.agent_id, self.kind, self.key)
        extra = dict(self.fields)
        headers = {"Idempotency-Key": self.idempotency_key} if self.idempotency_key and base == self.base else None
        if self.deleted:
            return Call("DELETE", path, params={"_rev": base} if base is not None else None, headers=headers)
        if self.kind == "state":
            body = {"value": self.value, **({"ttl_s": extra["ttl_s"]} if extra.get("ttl_s") else {})}
        else:
            body = {"content": self.value, **{k: v for k, v in extra.items() if v is not None}}
        return Call("PUT", path, json=body | ({"_rev": base} if base is not None else {}), headers=headers)

    def staged(self) -> Json:
        """What a read answers while the change waits to be pushed (write-back)."""
        extra = dict(self.fields)
        if self.kind == "state":
            return {"key": self.key, "value": self.value, "_rev": self.base, "updated_at": None,
                    "expires_at": None, "pending": True}  # fmt: skip
        return {"id": self.key, "role": extra.get("role", "working"), "content": self.value, "tokens": None,
                "pinned": bool(extra.get("pinned", False)), "_rev": self.base, "updated_at": None,
                "metadata": dict(extra.get("metadata") or {}), "pending": True}  # fmt: skip


@dataclass
class SyncResult:
    pushed: int = 0
    pulled: int = 0
    conflicts: int = 0
    rejected: list[RevConflict | VcmError] = field(default_factory=list)
    latency_s: float = 0.0

    def as_dict(self) -> Json:
        return {"pushed": self.pushed, "pulled": self.pulled, "conflicts": self.conflicts,
                "rejected": [e.to_dict() for e in self.rejected], "latency_s": self.latency_s}  # fmt: skip


class Replica:
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

    # --- reads ----------------------------------------------------------------------------------
    def read(self, agent_id: str, kind: str, key: str) -> Flow[Json]:
        yield from self.ensure_cursor(agent_id)
        item = (agent_id, kind, key)
        with self._lock:
            staged = self.pending.get(item)
        if staged is not None:
            if staged.deleted:
                raise NotFound(f"{kind} {key!r} is deleted here (not yet synced)", key=key)
            return staged.staged()
        hit = self.cache.get(item)
        if hit is not None:
            return hit
        self.cache.reading(item)
        body: Json | None = None
        try:
            body = yield Call("GET", item_path(agent_id, kind, key))
        except NotFound:
            self.cache.forget(item)  # what the application saw last: nothing
            raise
        finally:
            self.cache.read_done(item, body, version_of(kind, body) if body is not None else None)
        return body

    def listing(self, agent_id: str, kind: str, call: Call) -> Flow[Json]:
        """A listing (blocks, state keys) from the server; its entries are kept like reads."""
        yield from self.ensure_cursor(agent_id)
        body: Json = yield call
        self.listed(agent_id, kind, body.get("blocks" if kind == "block" else "state") or [])
        return body

    def direct(self, agent_id: str, call: Call, done: Callable[[Json], None]) -> Flow[Json]:
        """A write the cache does not defer (facts, clearing every state key): sent now, then
        ``done(reply)`` updates the cache."""
        yield from self.ensure_cursor(agent_id)
        try:
            body: Json = yield call
        finally:
            self._synced_one()
        done(body)
        return body

    def listed(self, agent_id: str, kind: str, items: Iterable[Json]) -> None:
        """Entries a listing returned (the current versions): kept like reads."""
        for body in items:
            key = body.get("key") if kind == "state" else body.get("id") if kind == "block" else body.get("fact_id")
            if isinstance(key, str) and agent_id in self.cursors:
                self.cache.put((agent_id, kind, key), body, version_of(kind, body))

    def fact_written(self, agent_id: str, reply: Json) -> None:
        """A fact write's reply (``remember``): its fact and any it marked as conflicting."""
        for fact in [reply.get("fact"), *(reply.get("conflicts") or [])]:
            if isinstance(fact, dict) and isinstance(fact.get("fact_id"), str):
                self.cache.put((agent_id, "fact", fact["fact_id"]), fact, version_of("fact", fact))

    def forgotten(self, agent_id: str, kind: str, key: str) -> None:
        self.cache.forget((agent_id, kind, key))

    def cleared(self, agent_id: str, kind: str) -> None:
        self.cache.clear(agent_id, kind)

    # --- writes ---------------------------------------------------------------------------------
    def change(
        self,
        agent_id: str,
        kind: Kind,
        key: str,
        value: Any,
        rev: str | None,
        *,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> LocalChange:
        """The application's change, based on ``rev`` or else the version it last saw."""
        with self._lock:
            self._seq += 1
            item = (agent_id, kind, key)
            queued = self.pending.get(item)
            base = rev if rev is not None else queued.base if queued is not None else self.cache.version(item)
            return LocalChange(
                agent_id, kind, key, value, base, self.clock(), tuple(fields.items()), self._seq, idempotency_key
            )

    def stage(self, change: LocalChange) -> Json:
        """Write-back: keep the change until the next sync; a read sees it at once."""
        with self._lock:
            self.pending[change.item] = change
        if change.deleted:
            return {"agent_id": change.agent_id, "removed": {change.kind: 1}, "pending": True}
        return change.staged()

    def submit(self, change: LocalChange) -> Flow[Json]:
        """The application's change: staged (write-back) or written now (write-through)."""
        yield from self.ensure_cursor(change.agent_id)
        if self.config.write == "back":
            return self.stage(change)
        return (yield from self.write(change))

    def write(self, change: LocalChange) -> Flow[Json]:
        """Write-through: send the change now (conflicts resolved by the strategy)."""
        yield from self.ensure_cursor(change.agent_id)
        try:
            return (yield from self._write(change))
        finally:
            self._synced_one()

    def _write(self, change: LocalChange) -> Flow[Json]:
        base = change.base
        for _ in range(MAX_ATTEMPTS):
            try:
                reply = yield change.call(base)
            except (RevConflict, NotFound) as exc:
                # A block deleted since the version this change was made on answers NOT_FOUND.
                if isinstance(exc, NotFound) and not (change.kind == "block" and base is not None):
                    raise
                remote, remote_body = yield from self._remote(change)
                local = Version(change.value, base, change.edited_at, deleted=change.deleted)
                decision = resolve(self.config.conflict, local, remote, self.config.merge)
                if decision.conflict:
                    yield from self._report_conflict(change, base, remote, decision)
                if not decision.write:
                    self._adopt(change.item, remote, remote_body)
                    if decision.resolution == "rejected":
                        raise self._rejection(change, base, remote) from exc
                    return remote_body or {"agent_id": change.agent_id, "removed": {}}
                change = replace(change, value=decision.value)
                base = remote.version
                continue
            self._written(change, reply)
            return dict(reply)
        raise RevConflict(f"{change.kind} {change.key!r} kept changing; gave up after {MAX_ATTEMPTS} conflicts")

    def _remote(self, change: LocalChange) -> Flow[tuple[Version, Json | None]]:
        try:
            body = yield Call("GET", item_path(change.agent_id, change.kind, change.key))
        except NotFound:
            return Version(None, None, None, deleted=True), None
        value = body.get("value") if change.kind == "state" else body.get("content")
        return Version(value, version_of(change.kind, body), body.get("updated_at")), body

    def _report_conflict(
        self, change: LocalChange, base: str | None, remote: Version, decision: Decision
    ) -> Flow[None]:
        # The same conflict reported again (a retried sync) has the same id: one audit row.
        digest = hashlib.sha256(
            repr((self.instance_id, change.item, change.seq, base, remote.version)).encode()
        ).hexdigest()[:32]
        record: Json = {
            "conflict_id": f"c{digest}",
            "instance_id": self.instance_id,
            "kind": change.kind,
            "key": change.key,
            "strategy": self.config.conflict,
            "resolution": decision.resolution,
            "local": {"base_version": base, "edited_at": change.edited_at, "deleted": change.deleted},
            "remote": {"version": remote.version, "updated_at": remote.at, "deleted": remote.deleted},
        }
        if decision.losing:
            record["losing_value"] = decision.losing[0]
        yield Call("POST", f"{_agent_path(change.agent_id)}/conflicts", json=record)
        with self._lock:
            self.conflicts += 1

    def _rejection(self, change: LocalChange, base: str | None, remote: Version) -> RevConflict:
        return RevConflict(
            f"{change.kind} {change.key!r} changed since version {base} (now {remote.version}); "
            "this change was not written (strategy: reject)",
            current_rev=remote.version,
            local={"version": base, "value": change.value, "deleted": change.deleted, "edited_at": change.edited_at},
            remote={
                "version": remote.version,
                "value": remote.value,
                "deleted": remote.deleted,
                "updated_at": remote.at,
            },
        )

    def _written(self, change: LocalChange, reply: Json) -> None:
        if change.deleted:
            self.cache.forget(change.item)
        elif change.kind == "state":
            self.cache.put(change.item, reply, version_of("state", reply))
        else:
            # A block write answers with its new _rev, not the block (tokens and time are the
            # server's): keep the version; the next read fetches the block once.
            self.cache.put(change.item, None, version_of("block", reply))

    def _adopt(self, item: Key, remote: Version, body: Json | None) -> None:
        """After a conflict that leaves the remote version in place: the instance now knows it."""
        if remote.deleted or body is None:
            self.cache.forget(item)
        else:
            self.cache.put(item, body, remote.version)

    # --- the change feed ------------------------------------------------------------------------
    def ensure_cursor(self, agent_id: str) -> Flow[None]:
        """Know where the agent's feed is before the first read of it (see the module docstring)."""
        if agent_id in self.cursors:
            return
        page = yield Call("GET", f"{_agent_path(agent_id)}/changes", params={"limit": 1})
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
            page = yield Call("GET", f"{_agent_path(agent_id)}/changes", params=params)
            if page.get("gap"):
                self.gap(agent_id)
            for change in page.get("changes") or []:
                self.apply(agent_id, change)
            self.advance(agent_id, str(page["next_after"]))
            pulled += len(page.get("changes") or [])
            if len(page.get("changes") or []) < PULL_PAGE:
                return pulled

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
                    yield Call("PUT", f"{_agent_path(agent_id)}/instances/{seg(self.instance_id)}",
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


def drive(flow: Flow[T], send: Callable[[Call], Any]) -> T:
    """Run a flow with a synchronous ``send``; its errors go into the flow (which may handle
    them), so its cleanup runs whatever happens on the wire."""
    try:
        call = next(flow)
        while True:
            try:
                result = send(call)
            except Exception as exc:
                call = flow.throw(exc)
                continue
            call = flow.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(flow: Flow[T], send: Callable[[Call], Awaitable[Any]]) -> T:
    """:func:`drive` with an awaited ``send``."""
    try:
        call = next(flow)
        while True:
            try:
                result = await send(call)
            except Exception as exc:
                call = flow.throw(exc)
                continue
            call = flow.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


__all__ = ["Flow", "LocalChange", "Replica", "SyncResult", "adrive", "drive", "item_path", "version_of"]
