"""The hot path's idempotency records in the embedded store: rows of the ``idempotency`` table
in the ``hot`` scope, with an expiry (``put_core``'s own records are the ``core`` scope).

``spool_messages`` writes the records of keyed appends in its own transaction through
:func:`upsert_records`; the port's operations on them are :class:`IdempotencyOps`."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from vcm.store import validation
from vcm.store.embedded.base import EmbeddedBase, fence
from vcm.store.types import IdempotencyRecord

# The scope of the hot path's records in the idempotency table.
HOT_SCOPE = "hot"


class IdempotencyOps(EmbeddedBase):
    """``put_idempotency``, ``get_idempotency``, ``list_idempotency`` and ``expire_idempotency``."""

    def put_idempotency(self, records: Sequence[IdempotencyRecord], *, incarnation: str | None = None) -> None:
        checked = validation.idempotency_records(records)
        if not checked:
            return
        with self._db.write("keep idempotency records") as conn:
            fence(conn, (r.agent_id for r in checked), incarnation)
            upsert_records(conn, checked, self._clock())

    def get_idempotency(self, agent_id: str, key: str) -> IdempotencyRecord | None:
        validation.identifier("agent_id", agent_id)
        validation.text("key", key)
        found = self._db.query(
            "read an idempotency record",
            "SELECT key, fingerprint, result, expires_at FROM idempotency "
            "WHERE agent_id = ? AND scope = ? AND key = ? AND expires_at >= ?",
            (agent_id, HOT_SCOPE, key, self._clock()),
        )
        return _record(agent_id, found[0]) if found else None

    def list_idempotency(
        self, agent_id: str, *, after: str | None = None, limit: int = 1000
    ) -> list[IdempotencyRecord]:
        validation.identifier("agent_id", agent_id)
        n = validation.limit("limit", limit)
        if after is not None:
            validation.text("after", after)
        found = self._db.query(
            "list idempotency records",
            "SELECT key, fingerprint, result, expires_at FROM idempotency "
            "WHERE agent_id = ? AND scope = ? AND key > ? AND expires_at >= ? ORDER BY key LIMIT ?",
            (agent_id, HOT_SCOPE, after or "", self._clock(), n),
        )
        return [_record(agent_id, r) for r in found]

    def expire_idempotency(self, now: float) -> int:
        validation.finite("now", now)
        with self._db.write("expire idempotency records") as conn:
            return int(
                conn.execute("DELETE FROM idempotency WHERE expires_at IS NOT NULL AND expires_at < ?", (now,)).rowcount
            )


def upsert_records(conn: sqlite3.Connection, records: Sequence[IdempotencyRecord], now: float) -> None:
    """Write checked records inside the caller's write transaction (a later one replaces)."""
    conn.executemany(
        "INSERT INTO idempotency (agent_id, scope, key, fingerprint, result, created_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent_id, scope, key) DO UPDATE SET "
        "fingerprint = excluded.fingerprint, result = excluded.result, expires_at = excluded.expires_at",
        [(r.agent_id, HOT_SCOPE, r.key, r.fingerprint, r.result, now, r.expires_at) for r in records],
    )


def _record(agent_id: str, row: sqlite3.Row) -> IdempotencyRecord:
    return IdempotencyRecord(
        agent_id, str(row["key"]), str(row["fingerprint"]), str(row["result"]), float(row["expires_at"])
    )
