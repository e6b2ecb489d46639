"""Heartbeat chain state in Redis (``vcm:{<agent>}:heartbeat``): one hash holding a version and the
serialised chain state, written only by compare-and-set (:data:`vcm.hotpath.lua.HEARTBEAT_CAS`).
The storage under :class:`vcm.tools.chains.HeartbeatGovernor`, as named operations, so the tools
never touch Redis keys or Lua themselves; what the state means is :mod:`vcm.tools.heartbeat`'s."""

from __future__ import annotations

import redis

from vcm.hotpath import keys, lua


class HeartbeatStore:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._cas = client.register_script(lua.HEARTBEAT_CAS)

    def read(self, agent_id: str) -> tuple[str | None, int]:
        """The agent's serialised chain state (None: no chain yet) and its version (0: none)."""
        version, raw = self.redis.hmget(keys.key(agent_id, keys.HEARTBEAT), ["v", "s"])
        return None if raw is None else str(raw), int(version or 0)

    def write_if(self, agent_id: str, version: int, state: str) -> bool:
        """Store ``state`` if the version is still ``version`` (it becomes the next); False when
        another call wrote in between, and nothing was written."""
        status, _ = self._cas(keys=[keys.key(agent_id, keys.HEARTBEAT)], args=[version, state])
        return bool(status == "ok")
