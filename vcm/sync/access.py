"""The replica's reads (read-through the cache) and writes (write-through, or staged for a
write-back sync), with conflicts sent to the strategy (:mod:`vcm.sync.conflicts`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from vcm.errors import NotFound, RevConflict
from vcm.sync.cache import Json, Key
from vcm.sync.changes import (
    MAX_ATTEMPTS,
    Kind,
    LocalChange,
    agent_path,
    item_path,
    version_of,
)
from vcm.sync.conflicts import Decision, Version, resolve
from vcm.sync.flows import Flow
from vcm.sync.state import ReplicaState
from vcm.wire import Call


class ReplicaAccess(ReplicaState):
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
        yield Call("POST", f"{agent_path(change.agent_id)}/conflicts", json=record)
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
