"""Agent snapshots of the embedded store (``agent_snapshots`` rows). The payload is opaque here:
the service compresses and checksums it (``vcm.snapshots``); expired rows go with ``expire``."""

from __future__ import annotations

import sqlite3

from vcm.errors import NotFound, ValidationError
from vcm.store import validation
from vcm.store.embedded.base import EmbeddedBase
from vcm.store.types import SnapshotRecord

_COLUMNS = "agent_id, snapshot_id, kind, reason, payload, sha256, size, created_at, expires_at"
# Listing leaves the payloads (up to megabytes each) in the database.
_LISTED = _COLUMNS.replace("payload", "X'' AS payload")


def _record(row: sqlite3.Row, *, with_payload: bool = True) -> SnapshotRecord:
    return SnapshotRecord(
        agent_id=row["agent_id"],
        snapshot_id=row["snapshot_id"],
        kind=row["kind"],
        reason=row["reason"],
        payload=bytes(row["payload"]) if with_payload else b"",
        sha256=row["sha256"],
        size=int(row["size"]),
        created_at=float(row["created_at"]),
        expires_at=None if row["expires_at"] is None else float(row["expires_at"]),
    )


class AgentSnapshotOps(EmbeddedBase):
    """``put_snapshot``, ``get_snapshot``, ``list_snapshots`` and ``delete_snapshot``."""

    def put_snapshot(self, snapshot: SnapshotRecord) -> SnapshotRecord:
        validation.identifier("agent_id", snapshot.agent_id)
        validation.identifier("snapshot_id", snapshot.snapshot_id)
        if not isinstance(snapshot.payload, bytes | bytearray):
            raise ValidationError("payload must be bytes", field="payload")
        with self._db.write("write a snapshot") as conn:
            conn.execute(
                f"INSERT OR IGNORE INTO agent_snapshots ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    snapshot.agent_id,
                    snapshot.snapshot_id,
                    snapshot.kind,
                    snapshot.reason,
                    bytes(snapshot.payload),
                    snapshot.sha256,
                    snapshot.size,
                    snapshot.created_at,
                    snapshot.expires_at,
                ),
            )
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM agent_snapshots WHERE agent_id = ? AND snapshot_id = ?",
                (snapshot.agent_id, snapshot.snapshot_id),
            ).fetchone()
        return _record(row)

    def get_snapshot(self, agent_id: str, snapshot_id: str) -> SnapshotRecord:
        validation.identifier("agent_id", agent_id)
        validation.identifier("snapshot_id", snapshot_id)
        found = self._db.query(
            "read a snapshot",
            f"SELECT {_COLUMNS} FROM agent_snapshots WHERE agent_id = ? AND snapshot_id = ? "
            "AND (expires_at IS NULL OR expires_at >= ?)",
            (agent_id, snapshot_id, self._clock()),
        )
        if not found:
            raise NotFound(f"snapshot {snapshot_id!r} of agent {agent_id!r} does not exist", agent_id=agent_id)
        return _record(found[0])

    def list_snapshots(self, agent_id: str) -> list[SnapshotRecord]:
        validation.identifier("agent_id", agent_id)
        found = self._db.query(
            "list snapshots",
            f"SELECT {_LISTED} FROM agent_snapshots WHERE agent_id = ? "
            "AND (expires_at IS NULL OR expires_at >= ?) ORDER BY created_at DESC, snapshot_id",
            (agent_id, self._clock()),
        )
        return [_record(r, with_payload=False) for r in found]

    def delete_snapshot(self, agent_id: str, snapshot_id: str) -> bool:
        validation.identifier("agent_id", agent_id)
        validation.identifier("snapshot_id", snapshot_id)
        with self._db.write("delete a snapshot") as conn:
            done = conn.execute(
                "DELETE FROM agent_snapshots WHERE agent_id = ? AND snapshot_id = ?", (agent_id, snapshot_id)
            )
        return bool(done.rowcount)
