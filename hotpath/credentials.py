"""Agent bearer token digests in Redis (``vcm:{<agent>}:token``): the storage under
:class:`vcm.api.auth.TokenAuthority`, as named operations, so the API never writes Redis keys or
runs Lua of its own. Only the SHA-256 of a token is kept; the append and snapshot scripts compare
against the same key (:data:`vcm.hotpath.lua.TOKEN_GUARD`)."""

from __future__ import annotations

import redis

from vcm.hotpath import keys, lua


class AgentTokens:
    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._set_if_equal = client.register_script(lua.SET_IF_EQUAL)

    def put(self, agent_id: str, token_sha256: str, *, only_if_absent: bool = False) -> bool:
        """Store the agent's token digest; with ``only_if_absent``, only when it has none (SET NX,
        so two racing creations cannot both set one). True when stored."""
        return bool(self.redis.set(keys.key(agent_id, keys.TOKEN), token_sha256, nx=only_if_absent))

    def replace_if(self, agent_id: str, expected_sha256: str, token_sha256: str) -> bool:
        """Store ``token_sha256`` only while ``expected_sha256`` is still the stored digest (one
        atomic compare-and-set); True when it was replaced."""
        key = keys.key(agent_id, keys.TOKEN)
        return bool(self._set_if_equal(keys=[key], args=[expected_sha256, token_sha256]))

    def get(self, agent_id: str) -> str | None:
        """The stored digest, or None when the agent has no token (or Redis lost it)."""
        value = self.redis.get(keys.key(agent_id, keys.TOKEN))
        # A digest is hex: a client without decode_responses gets bytes, and nothing else decodes.
        return value.decode("ascii", "replace") if isinstance(value, bytes) else value

    def exists(self, agent_id: str) -> bool:
        return bool(self.redis.exists(keys.key(agent_id, keys.TOKEN)))
