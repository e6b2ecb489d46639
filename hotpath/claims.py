"""Idempotency records in the hot state: claims of keyed operations, and the store's copies put back.

A record is ``<fingerprint>\n<result JSON>`` under ``vcm:{A}:idem:<digest>`` with the TTL
``idempotency_ttl_s``, the format the Lua mutations use, so one key cannot mean two things across
operations. The store keeps the durable copy (:mod:`vcm.durable`); these are its cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vcm import validation
from vcm.hotpath import keys
from vcm.hotpath.codec import as_str, dumps, fingerprint, reply
from vcm.hotpath.reads import HotReads
from vcm.settings import Settings


def claim_record(op: str, request: Mapping[str, Any], result: Mapping[str, Any]) -> tuple[str, str]:
    """The fingerprint and result text a claim of ``op`` records (in Redis and in the store)."""
    return fingerprint({"op": op, **request}), dumps(dict(result))


class HotClaims(HotReads):
    """The idempotency records of :class:`~vcm.hotpath.state.HotState` (which sets these)."""

    settings: Settings
    clock: Callable[[], float]
    _claim: Any  # the registered script vcm.hotpath.lua.IDEMPOTENCY_CLAIM

    def claim(
        self, agent_id: str, idempotency_key: str, op: str, request: Mapping[str, Any], result: Mapping[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Record ``result`` as the outcome of ``op`` under ``idempotency_key``, atomically.

        Returns ``(result, False)`` on the key's first use and ``(first result, True)`` when the
        same request comes again; a different request under the key raises IdempotencyMismatch.
        The record has the format the Lua mutations use (``<fingerprint>\n<result JSON>``, one
        namespace per agent), so one key cannot mean two things across operations.
        """
        validation.agent_id(agent_id)
        validation.idempotency_key(idempotency_key)
        fp, text = claim_record(op, request, result)
        raw = self._claim(
            keys=[keys.idempotency(agent_id, idempotency_key)],
            args=[keys.prefix(agent_id), fp, self.settings.idempotency_ttl_s, text],
        )
        return reply(raw)

    def settle(
        self, agent_id: str, idempotency_key: str, op: str, request: Mapping[str, Any], result: Mapping[str, Any]
    ) -> None:
        """Replace a claimed key's recorded result with the operation's final one (same
        fingerprint), so that retries answer with it (:meth:`claim` records what is known first)."""
        fp, text = claim_record(op, request, result)
        self.redis.set(keys.idempotency(agent_id, idempotency_key), f"{fp}\n{text}", ex=self.settings.idempotency_ttl_s)

    def release(self, agent_id: str, idempotency_key: str) -> None:
        """Forget a claimed key whose operation was refused, so its corrected retry can use it."""
        self.redis.delete(keys.idempotency(agent_id, idempotency_key))

    def idempotency_records(self, agent_id: str, idempotency_keys: Sequence[str]) -> dict[str, tuple[str, str]]:
        """The records Redis holds under the agent's keys: key -> (fingerprint, result JSON), for
        the store's copy (:mod:`vcm.durable`). One MGET: the keys share the agent's hash tag."""
        wanted = list(dict.fromkeys(idempotency_keys))
        if not wanted:
            return {}
        found = self.redis.mget([keys.idempotency(agent_id, k) for k in wanted])
        out: dict[str, tuple[str, str]] = {}
        for key, raw in zip(wanted, found, strict=True):
            if raw:
                fp, _, result = as_str(raw).partition("\n")
                out[key] = (fp, result)
        return out

    def install_idempotency(
        self, agent_id: str, records: Sequence[tuple[str, str, str, float]], *, replace: bool = False
    ) -> int:
        """Put the store's records ``(key, fingerprint, result JSON, expires_at)`` back, each with
        the time it has left; a record Redis holds already is kept unless ``replace`` (Redis can
        only be newer: the store is written first). Returns how many were written."""
        now = self.clock()
        live = [(k, fp, res, int((exp - now) * 1000)) for k, fp, res, exp in records if exp - now >= 0.001]
        written = 0
        for i in range(0, len(live), 1000):
            pipe = self.redis.pipeline(transaction=False)
            for key, fp, result, ms in live[i : i + 1000]:
                pipe.set(keys.idempotency(agent_id, key), f"{fp}\n{result}", px=ms, nx=not replace)
            written += sum(1 for ok in pipe.execute() if ok)
        return written
