"""Deleting from the ArangoDB store (a whole agent, one message, one archival document) and agent
snapshots (``agent_state_snapshots``, seed 001's collection).

Deletes run collection by collection outside one transaction: an agent's data can exceed a
stream transaction's size limit, and every step filters on the agent (or the ids), so a retry of
an interrupted delete finishes it. The ArangoSearch view and the vector index drop entries with
their documents. A forget writes the id's tombstone (collection ``tombstones``) in the same stream
transaction as the removal; a restore reads them.
"""

from __future__ import annotations

import base64
import time

from vcm.errors import NotFound, RevConflict, ValidationError
from vcm.store import validation
from vcm.store.arango import keys, names
from vcm.store.arango.agents import agent_key
from vcm.store.arango.aql import agents as aql_agents
from vcm.store.arango.aql import archival as aql_archival
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import tombstones as aql_tombstones
from vcm.store.arango.base import ArangoBase
from vcm.store.types import Forgotten, SnapshotRecord, Tombstones, message_node

# A delete meeting a fenced write in flight retries removing the agent record this often.
_RECORD_TRIES = 8
_RECORD_BACKOFF_S = 0.05


def count_of(rows: list[object]) -> int:
    """The count a ``COLLECT WITH COUNT`` removal returns (0 when it returned nothing)."""
    return int(rows[0]) if rows and isinstance(rows[0], int) else 0


def snapshot_doc(s: SnapshotRecord) -> dict[str, object]:
    return {
        "_key": keys.doc_key(s.agent_id, s.snapshot_id),
        "agent_id": s.agent_id,
        "snapshot_id": s.snapshot_id,
        "snapshot_type": s.kind,
        "reason": s.reason,
        # JSON has no bytes: the compressed payload travels as base64.
        "payload": base64.b64encode(bytes(s.payload)).decode("ascii"),
        "sha256": s.sha256,
        "size": s.size,
        "created_at": s.created_at,
        "expires_at": s.expires_at,
    }


def snapshot_from_doc(d: dict[str, object]) -> SnapshotRecord:
    payload = d.get("payload")
    expires = d.get("expires_at")
    return SnapshotRecord(
        agent_id=str(d["agent_id"]),
        snapshot_id=str(d["snapshot_id"]),
        kind=str(d["snapshot_type"]),
        reason=str(d.get("reason", "")),
        payload=base64.b64decode(str(payload)) if payload else b"",
        sha256=str(d["sha256"]),
        size=int(str(d["size"])),
        created_at=float(str(d["created_at"])),
        expires_at=None if expires is None else float(str(expires)),
    )


class LifecycleOps(ArangoBase):
    """``delete_agent``, ``forget_message``, ``forget_document`` and the snapshot operations."""

    def delete_agent(self, agent_id: str) -> Forgotten:
        validation.identifier("agent_id", agent_id)
        counts: dict[str, int] = {}
        counts["agents"] = self._remove_record(agent_id)
        for collection in names.AGENT_OWNED:
            counts[collection] = count_of(
                self._run(self._rw, aql_common.remove_of_agent(collection, agent_id), "delete_agent")
            )
        return Forgotten({k: v for k, v in counts.items() if v})

    def _remove_record(self, agent_id: str) -> int:
        """Remove the agent record, first: from then on every fenced write of the agent fails. A
        fenced write in flight holds the record (its fence updates it, aql/agents.fence) until its
        short transaction ends, and the removal meets a write-write conflict meanwhile: try again
        a few times, so the delete lands after that write (whose rows the steps below remove)."""
        query = aql_common.remove_documents(names.CORE, [f"{names.CORE}/{agent_key(agent_id)}"])
        for attempt in range(_RECORD_TRIES):
            try:
                return count_of(self._run(self._rw, query, "delete_agent"))
            except RevConflict:
                if attempt == _RECORD_TRIES - 1:
                    raise
                time.sleep(_RECORD_BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")

    def forget_message(self, agent_id: str, message_id: str) -> Forgotten:
        validation.identifier("agent_id", agent_id)
        validation.identifier("message_id", message_id)
        vertex = keys.vertex_id(message_node(agent_id, message_id))
        write = (names.MESSAGES, names.TOMBSTONES, *names.EDGE_COLLECTIONS)
        with self._transaction(write, "forget_message") as txn:
            removed = count_of(self._run(txn, aql_common.remove_documents(names.MESSAGES, [vertex]), "forget_message"))
            for edges in names.EDGE_COLLECTIONS:
                self._run(txn, aql_common.remove_edges_of(edges, [vertex]), "forget_message")
            self._run(txn, self._tombstone(agent_id, "message", message_id), "forget_message")
        return Forgotten({"messages": removed} if removed else {})

    def forget_document(self, agent_id: str, doc_id: str) -> Forgotten:
        validation.identifier("agent_id", agent_id)
        validation.identifier("doc_id", doc_id)
        ids = [str(i) for i in self._run(self._ro, aql_archival.document_chunks(agent_id, doc_id), "forget_document")]
        removed = 0
        with self._transaction((names.ARCHIVAL, names.TOMBSTONES, *names.EDGE_COLLECTIONS), "forget_document") as txn:
            if ids:
                removed = count_of(self._run(txn, aql_common.remove_documents(names.ARCHIVAL, ids), "forget_document"))
                for edges in names.EDGE_COLLECTIONS:
                    self._run(txn, aql_common.remove_edges_of(edges, ids), "forget_document")
            self._run(txn, self._tombstone(agent_id, "document", doc_id), "forget_document")
        return Forgotten({"archival_chunks": removed} if removed else {})

    def tombstones(self, agent_id: str) -> Tombstones:
        validation.identifier("agent_id", agent_id)
        by_kind: dict[str, dict[str, float]] = {"message": {}, "document": {}}
        for t in self._run(self._ro, aql_tombstones.list_tombstones(agent_id), "tombstones"):
            by_kind.setdefault(str(t["kind"]), {})[str(t["item_id"])] = float(t["forgotten_at"])
        return Tombstones(messages=by_kind["message"], documents=by_kind["document"])

    def _tombstone(self, agent_id: str, kind: str, item_id: str) -> aql_common.AqlQuery:
        key = keys.doc_key(agent_id, kind, item_id)
        return aql_tombstones.put_tombstone(key, agent_id, kind, item_id, self._now())

    # --- snapshots ------------------------------------------------------------------------------
    def put_snapshot(self, snapshot: SnapshotRecord) -> SnapshotRecord:
        validation.identifier("agent_id", snapshot.agent_id)
        validation.identifier("snapshot_id", snapshot.snapshot_id)
        if not isinstance(snapshot.payload, bytes | bytearray):
            raise ValidationError("payload must be bytes", field="payload")
        doc = snapshot_doc(snapshot)
        self._run(self._rw, aql_common.insert_ignore(names.SNAPSHOTS, [doc]), "put_snapshot")
        stored = self._get(self._ro, names.SNAPSHOTS, str(doc["_key"]), "put_snapshot")
        return snapshot_from_doc(stored) if stored is not None else snapshot

    def get_snapshot(self, agent_id: str, snapshot_id: str) -> SnapshotRecord:
        validation.identifier("agent_id", agent_id)
        validation.identifier("snapshot_id", snapshot_id)
        doc = self._get(self._ro, names.SNAPSHOTS, keys.doc_key(agent_id, snapshot_id), "get_snapshot")
        expires = None if doc is None else doc.get("expires_at")
        if doc is None or (expires is not None and float(expires) < self._clock()):
            raise NotFound(f"snapshot {snapshot_id!r} of agent {agent_id!r} does not exist", agent_id=agent_id)
        return snapshot_from_doc(doc)

    def list_snapshots(self, agent_id: str) -> list[SnapshotRecord]:
        validation.identifier("agent_id", agent_id)
        return [
            snapshot_from_doc(d)
            for d in self._run(self._ro, aql_agents.list_snapshots(agent_id, self._clock()), "list_snapshots")
        ]

    def delete_snapshot(self, agent_id: str, snapshot_id: str) -> bool:
        validation.identifier("agent_id", agent_id)
        validation.identifier("snapshot_id", snapshot_id)
        doc_id = f"{names.SNAPSHOTS}/{keys.doc_key(agent_id, snapshot_id)}"
        return (
            count_of(self._run(self._rw, aql_common.remove_documents(names.SNAPSHOTS, [doc_id]), "delete_snapshot")) > 0
        )
