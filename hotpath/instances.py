"""The sync status each client instance of an agent reports (:mod:`vcm.service.replicas`): one
Redis hash per agent, instance id -> the latest report as JSON, stamped with the server time it
arrived.

Status is what the instances say of themselves, kept only as long as they keep saying it: the
hash expires ``ttl_s`` after the last report, a record silent that long is dropped on the next
report, and at most ``max_instances`` are kept (the longest silent go first). It lives in Redis
alone: losing it (a flushed Redis, a reset agent) costs one reporting period, after which every
live instance has reported again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import redis

from vcm.hotpath import keys


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class InstanceBoard:
    def __init__(self, client: redis.Redis, *, ttl_s: int, max_instances: int) -> None:
        self.redis = client
        self.ttl_s = ttl_s
        self.max_instances = max_instances

    def report(self, agent_id: str, instance_id: str, record: Mapping[str, Any], now: float) -> dict[str, Any] | None:
        """Keep ``record`` (with ``reported_at`` = now) as the instance's status; returns the
        report it replaces, if any (the caller counts what happened since)."""
        name = keys.key(agent_id, keys.INSTANCES)
        stored = {**record, "instance_id": instance_id, "reported_at": now}
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(name, instance_id)
        pipe.hset(name, instance_id, json.dumps(stored, separators=(",", ":")))
        pipe.expire(name, self.ttl_s)
        pipe.hlen(name)
        previous_raw, _, _, count = pipe.execute()
        if int(count) > self.max_instances:
            self._records(name, now)
        return _decode(previous_raw) if previous_raw is not None else None

    def records(self, agent_id: str, now: float) -> list[dict[str, Any]]:
        """Every instance's latest report that is not too old, by instance id."""
        return sorted(self._records(keys.key(agent_id, keys.INSTANCES), now), key=lambda r: str(r["instance_id"]))

    def _records(self, name: str, now: float) -> list[dict[str, Any]]:
        """The records kept; drops those silent for ``ttl_s`` and all but the newest ``max_instances``."""
        found: list[tuple[float, str, dict[str, Any]]] = []
        doomed: list[str] = []
        for k, v in self.redis.hgetall(name).items():
            record = _decode(v)
            at = float(record.get("reported_at") or 0.0) if record is not None else 0.0
            if record is None or now - at > self.ttl_s:
                doomed.append(_text(k))
            else:
                found.append((at, _text(k), record))
        found.sort(key=lambda item: item[0], reverse=True)
        doomed += [k for _, k, _ in found[self.max_instances :]]
        if doomed:
            self.redis.hdel(name, *doomed)
        return [r for _, _, r in found[: self.max_instances]]


def _decode(raw: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(_text(raw))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


__all__ = ["InstanceBoard"]
