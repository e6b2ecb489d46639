"""Client instances of an agent through the façade.

An agent may run as several instances on several machines, each caching its memory locally
(:mod:`vcm.sync`, the client side). What the server does for them:

* **the change feed**: every write of a block, a state key or a fact publishes its kind, key,
  new version, op and time (never its content) to the agent's feed (:mod:`vcm.hotpath.changes`);
  instances follow it (``GET .../changes/stream``, server-sent events) or poll it
  (``GET .../changes``) and drop what it says is stale. A publish that fails is logged and
  counted, never raised: the write it describes happened, and caches learn of it when their
  entries' lifetimes end. A replayed write (same idempotency key) publishes nothing, as it
  changes nothing;
* **conflicts**: an instance that finds its change was based on a stale version resolves it by
  its strategy and reports it here first; each becomes a ``sync_conflict`` audit row with both
  versions' metadata, and the losing value where one is overwritten or dropped, so no
  acknowledged value disappears without a trace. (Other audit rows keep digests, never content:
  :mod:`vcm.obs.footprint`. This one keeps the value, because it may be its only copy.)
* **sync status**: each instance reports its status after every sync (:mod:`vcm.hotpath.instances`);
  the reports feed the listing (``vcm instances``) and the sync metrics.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from vcm.errors import ValidationError
from vcm.hotpath.changes import ChangePage
from vcm.obs import audit, metrics
from vcm.service.core import Core
from vcm.store import validation as store_validation
from vcm.store.audit_names import Actor, EventKind, audit_id

INSTANCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
STATUSES = ("synced", "syncing", "conflict", "error")
STRATEGIES = ("reject", "last_write_wins", "merge")
RESOLUTIONS = ("rejected", "local_won", "remote_won", "merged")
CONFLICT_KINDS = ("block", "state")
# A losing value longer than this (as JSON) is kept as its first characters and its digest.
MAX_LOSING_CHARS = 65_536
COUNTS = ("pending", "conflicts", "syncs", "failures", "consecutive_failures")
# Without an interval in its report, an instance silent this long is stale.
DEFAULT_STALE_S = 90.0


def instance_id(value: Any) -> str:
    if not isinstance(value, str) or not INSTANCE_ID.match(value):
        raise ValidationError(
            "instance_id must be 1-128 characters of letters, digits, '_', '.', ':', '-'", field="instance_id"
        )
    return value


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValidationError(f"{name} must be one of {', '.join(allowed)}", field=name)
    return str(value)


def _number(name: str, value: Any) -> float | None:
    """A time or a duration: finite, not negative, or None."""
    number = store_validation.finite(name, value, optional=True)
    if number is not None and number < 0:
        raise ValidationError(f"{name} must not be negative", field=name)
    return number


def _version(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | int) or isinstance(value, bool) or len(str(value)) > 128:
        raise ValidationError(f"{name} must be a version (a _rev or fact version) or null", field=name)
    return str(value)


def _side(name: str, value: Any, version_field: str, time_field: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(f"{name} must be an object", field=name)
    return {
        version_field: _version(f"{name}.{version_field}", value.get(version_field)),
        time_field: _number(f"{name}.{time_field}", value.get(time_field)),
        "deleted": bool(value.get("deleted", False)),
    }


def losing_value(value: Any) -> dict[str, Any]:
    """The value a last-write-wins resolution overwrote, for the audit row: whole when short, else
    its first characters and the digest of all of it."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    if len(text) <= MAX_LOSING_CHARS:
        return {"losing_value": value}
    return {
        "losing_value_prefix": text[:MAX_LOSING_CHARS],
        "losing_value_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "losing_value_chars": len(text),
    }


class Replicas:
    """changes, record_conflict, report_instance, instances (the publishing of changes is the
    core's: :meth:`~vcm.service.core.Core.changed`)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def changes(
        self, agent_id: str, *, after: str | None = None, limit: int = 100, checked: bool = False
    ) -> ChangePage:
        """The agent's changes after ``after`` (a change id; None: none, only the feed's head).
        ``checked``: the caller has just checked that the agent exists (an API route's auth, a
        stream that re-checks its token), so no lookup is repeated on every tick."""
        if not checked:
            self.core.agent(agent_id)
        return self.core.hot.changes.read(agent_id, after, limit)

    def record_conflict(self, agent_id: str, conflict: Mapping[str, Any], *, actor: str = Actor.SYSTEM) -> str:
        """Keep a conflict an instance found and resolved as a ``sync_conflict`` audit row; returns
        the row's id. Idempotent by the instance's ``conflict_id``."""
        self.core.agent(agent_id)
        conflict_id = instance_id(conflict.get("conflict_id"))
        strategy = _choice("strategy", conflict.get("strategy"), STRATEGIES)
        resolution = _choice("resolution", conflict.get("resolution"), RESOLUTIONS)
        key = conflict.get("key")
        if not isinstance(key, str) or not key or len(key) > 512:
            raise ValidationError("key must be the block id or state key in conflict", field="key")
        payload: dict[str, Any] = {
            "conflict_id": conflict_id,
            "instance_id": instance_id(conflict.get("instance_id")),
            "kind": _choice("kind", conflict.get("kind"), CONFLICT_KINDS),
            "key": key,
            "strategy": strategy,
            "resolution": resolution,
            "local": _side("local", conflict.get("local"), "base_version", "edited_at"),
            "remote": _side("remote", conflict.get("remote"), "version", "updated_at"),
        }
        if "losing_value" in conflict:
            payload.update(losing_value(conflict["losing_value"]))
        event_id = audit_id(agent_id, "sync_conflict", conflict_id)
        # Written here rather than through _event, which logs a failed audit write and goes on:
        # this row is the operation (it may hold the only copy of an overwritten value), so a
        # failure reaches the instance, which keeps the report and sends it again.
        row = audit.event(
            agent_id,
            EventKind.SYNC_CONFLICT,
            None,
            actor=actor,
            event_id=event_id,
            created_at=self.core.clock(),
            details=payload,
        )
        stored = self.core.store.append_event(row)
        if stored.created_at == row.created_at:  # not a replay of a report already kept
            metrics.sync_conflict(strategy, resolution)
        return event_id

    def report_instance(self, agent_id: str, instance: str, report: Mapping[str, Any]) -> dict[str, Any]:
        """Keep an instance's sync status (its latest report wins); returns the stored record."""
        self.core.agent(agent_id)
        instance_id(instance)
        record: dict[str, Any] = {
            "status": _choice("status", report.get("status"), STATUSES),
            "last_sync_at": _number("last_sync_at", report.get("last_sync_at")),
            "sync_version": _version("sync_version", report.get("sync_version")),
            "last_sync_latency_s": _number("last_sync_latency_s", report.get("last_sync_latency_s")),
            "sync_interval_s": _number("sync_interval_s", report.get("sync_interval_s")),
            "last_error": _short("last_error", report.get("last_error")),
            "host": _short("host", report.get("host")),
        }
        for name in COUNTS:
            record[name] = store_validation.non_negative_int(name, report.get(name, 0))
        cache = report.get("cache") or {}
        if not isinstance(cache, Mapping):
            raise ValidationError("cache must be an object of counts", field="cache")
        record["cache"] = {
            n: store_validation.non_negative_int(f"cache.{n}", cache.get(n, 0)) for n in ("entries", "hits", "misses")
        }
        now = self.core.clock()
        previous = self.core.hot.instances.report(agent_id, instance, record, now)
        self._sync_reported(previous, record)
        return {**record, "instance_id": instance, "reported_at": now}

    def instances(self, agent_id: str) -> list[dict[str, Any]]:
        """Every instance's latest report, with its age and whether it has gone silent (no
        report for three of its sync intervals)."""
        self.core.agent(agent_id)
        now = self.core.clock()
        out = []
        for record in self.core.hot.instances.records(agent_id, now):
            age = max(0.0, now - float(record.get("reported_at") or 0.0))
            interval = record.get("sync_interval_s") or 0.0
            out.append({**record, "age_s": age, "stale": age > (3 * interval if interval else DEFAULT_STALE_S)})
        return out

    def _sync_reported(self, previous: Mapping[str, Any] | None, record: Mapping[str, Any]) -> None:
        """Count what happened since the instance's previous report (a restarted instance counts
        from zero again)."""
        deltas = {}
        for name in ("syncs", "failures"):
            before = int(previous.get(name, 0)) if previous else 0
            now = int(record[name])
            deltas[name] = now - before if now >= before else now
        cache = record["cache"]
        old_cache = (previous or {}).get("cache") or {}
        for name in ("hits", "misses"):
            before, now = int(old_cache.get(name, 0)), int(cache[name])
            deltas[name] = now - before if now >= before else now
        metrics.sync_reported(
            ok=max(0, deltas["syncs"] - deltas["failures"]),
            failed=deltas["failures"],
            latency_s=record["last_sync_latency_s"] if deltas["syncs"] else None,
            hits=deltas["hits"],
            misses=deltas["misses"],
        )


def _short(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string", field=name)
    return value[:200]
