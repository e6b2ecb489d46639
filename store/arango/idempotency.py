"""The hot path's idempotency records in ArangoDB (queries in
:mod:`vcm.store.arango.aql.idempotency`); ``spool_messages`` writes those of keyed appends in
its own transaction through :func:`record_docs`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vcm.store import validation
from vcm.store.arango import keys, names
from vcm.store.arango.aql import idempotency as aql_idem
from vcm.store.arango.base import ArangoBase
from vcm.store.types import IdempotencyRecord


class IdempotencyOps(ArangoBase):
    """``put_idempotency``, ``get_idempotency``, ``list_idempotency`` and ``expire_idempotency``."""

    def put_idempotency(self, records: Sequence[IdempotencyRecord], *, incarnation: str | None = None) -> None:
        checked = validation.idempotency_records(records)
        if checked:
            self._fenced_run(
                aql_idem.upsert_records(record_docs(checked, self._clock())),
                (names.IDEMPOTENCY,),
                (r.agent_id for r in checked),
                incarnation,
                "put_idempotency",
            )

    def get_idempotency(self, agent_id: str, key: str) -> IdempotencyRecord | None:
        validation.identifier("agent_id", agent_id)
        validation.text("key", key)
        doc = self._get(self._ro, names.IDEMPOTENCY, record_key(agent_id, key), "get_idempotency")
        if doc is None or doc.get("scope") != aql_idem.HOT_SCOPE or float(doc["expires_at"]) < self._clock():
            return None
        return record_of(doc)

    def list_idempotency(
        self, agent_id: str, *, after: str | None = None, limit: int = 1000
    ) -> list[IdempotencyRecord]:
        validation.identifier("agent_id", agent_id)
        n = validation.limit("limit", limit)
        if after is not None:
            validation.text("after", after)
        found = self._run(self._ro, aql_idem.list_records(agent_id, after, self._clock(), n), "list_idempotency")
        return [record_of(d) for d in found]

    def expire_idempotency(self, now: float) -> int:
        validation.finite("now", now)
        return sum(int(n) for n in self._run(self._rw, aql_idem.expire_records(now), "expire_idempotency"))


def record_key(agent_id: str, key: str) -> str:
    return keys.idempotency_key(agent_id, aql_idem.HOT_SCOPE, key)


def record_docs(records: Sequence[IdempotencyRecord], now: float) -> list[dict[str, Any]]:
    return [
        {
            "_key": record_key(r.agent_id, r.key),
            "agent_id": r.agent_id,
            "scope": aql_idem.HOT_SCOPE,
            "key": r.key,
            "fingerprint": r.fingerprint,
            "result": r.result,
            "created_at": now,
            "expires_at": r.expires_at,
        }
        for r in records
    ]


def record_of(doc: Mapping[str, Any]) -> IdempotencyRecord:
    return IdempotencyRecord(
        str(doc["agent_id"]), str(doc["key"]), str(doc["fingerprint"]), str(doc["result"]), float(doc["expires_at"])
    )
