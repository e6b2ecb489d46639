"""Deleting from the embedded store: a whole agent, one message, one archival document.

Derived indexes are kept honest: a deleted message's row id goes to ``text_index_deletes`` (the
tantivy writer drains it) and its vectors leave through ``message_vector_log`` (op -1), exactly as
:meth:`expire` does; deleted archival rows are removed from the FAISS spaces that hold them. A forget writes the id's
tombstone (table ``tombstones``) in the same transaction as the removal; a restore reads them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from vcm.store import validation
from vcm.store.embedded.base import EmbeddedBase
from vcm.store.embedded.db import meta_add
from vcm.store.embedded.graph import delete_node_edges
from vcm.store.embedded.messageindex import space_key
from vcm.store.embedded.schema import META_TEXT_DOCS, META_TEXT_TERMS
from vcm.store.types import Forgotten, Tombstones, chunk_node, message_node

# Tables keyed by agent_id whose rows go with the agent and need no index upkeep.
_PLAIN_TABLES = (
    "core_memory",
    "summary_versions",
    "idempotency",
    "events",
    "batches",
    "cursors",
    "agent_snapshots",
    "facts",
    "state",
    "edges",
    "message_vector_log",
    "tombstones",
)


def delete_message_rows(conn: sqlite3.Connection, doomed: Sequence[sqlite3.Row]) -> None:
    """Delete messages (rows with ``id, agent_id, message_id, n_terms``), their edges, vectors
    and text-index entries, inside the caller's write transaction."""
    if not doomed:
        return
    ids = [(r["id"],) for r in doomed]
    delete_node_edges(conn, [message_node(r["agent_id"], r["message_id"]) for r in doomed])
    conn.executemany("DELETE FROM messages WHERE id = ?", ids)
    conn.executemany(
        "INSERT INTO message_vector_log (agent_id, embedding_version, row_id, op) "
        "SELECT agent_id, embedding_version, ?, -1 FROM message_vectors "
        "WHERE agent_id = ? AND message_id = ?",
        [(r["id"], r["agent_id"], r["message_id"]) for r in doomed],
    )
    conn.executemany(
        "DELETE FROM message_vectors WHERE agent_id = ? AND message_id = ?",
        [(r["agent_id"], r["message_id"]) for r in doomed],
    )
    conn.executemany("INSERT OR IGNORE INTO text_index_deletes (id) VALUES (?)", ids)
    meta_add(conn, META_TEXT_DOCS, -len(doomed))
    meta_add(conn, META_TEXT_TERMS, -sum(r["n_terms"] for r in doomed))


class LifecycleOps(EmbeddedBase):
    """``delete_agent``, ``forget_message`` and ``forget_document``."""

    def delete_agent(self, agent_id: str) -> Forgotten:
        validation.identifier("agent_id", agent_id)
        counts: dict[str, int] = {}
        with self._db.write("delete an agent") as conn:
            doomed = conn.execute(
                "SELECT id, agent_id, message_id, n_terms FROM messages WHERE agent_id = ?", (agent_id,)
            ).fetchall()
            spaces = [
                space_key(agent_id, r[0], int(r[1]))
                for r in conn.execute(
                    "SELECT DISTINCT embedding_version, dimension FROM message_vectors WHERE agent_id = ?", (agent_id,)
                )
            ]
            counts["message_vectors"] = conn.execute(
                "SELECT COUNT(*) FROM message_vectors WHERE agent_id = ?", (agent_id,)
            ).fetchone()[0]
            delete_message_rows(conn, doomed)
            counts["messages"] = len(doomed)
            chunk_ids = [int(r[0]) for r in conn.execute("SELECT id FROM archival WHERE agent_id = ?", (agent_id,))]
            conn.execute("DELETE FROM archival WHERE agent_id = ?", (agent_id,))
            counts["archival_chunks"] = len(chunk_ids)
            for table in _PLAIN_TABLES:
                counts[table] = conn.execute(f"DELETE FROM {table} WHERE agent_id = ?", (agent_id,)).rowcount
            counts["agents"] = conn.execute("DELETE FROM agents WHERE agent_id = ?", (agent_id,)).rowcount
        # The vector log of the agent is gone with its rows: drop its message indexes outright.
        self._message_vectors.forget(spaces)
        self._vectors.remove(chunk_ids)
        if doomed:
            self._messages_written()
        return Forgotten({k: v for k, v in counts.items() if v})

    def forget_message(self, agent_id: str, message_id: str) -> Forgotten:
        validation.identifier("agent_id", agent_id)
        validation.identifier("message_id", message_id)
        with self._db.write("forget a message") as conn:
            doomed = conn.execute(
                "SELECT id, agent_id, message_id, n_terms FROM messages WHERE agent_id = ? AND message_id = ?",
                (agent_id, message_id),
            ).fetchall()
            vectors = conn.execute(
                "SELECT COUNT(*) FROM message_vectors WHERE agent_id = ? AND message_id = ?", (agent_id, message_id)
            ).fetchone()[0]
            delete_message_rows(conn, doomed)
            _tombstone(conn, agent_id, "message", message_id, self._clock())
        if doomed:
            self._messages_written()
        return Forgotten({k: v for k, v in {"messages": len(doomed), "message_vectors": int(vectors)}.items() if v})

    def forget_document(self, agent_id: str, doc_id: str) -> Forgotten:
        validation.identifier("agent_id", agent_id)
        validation.identifier("doc_id", doc_id)
        with self._db.write("forget a document") as conn:
            found = conn.execute(
                "SELECT id, chunk_index, embedding_version FROM archival WHERE agent_id = ? AND doc_id = ?",
                (agent_id, doc_id),
            ).fetchall()
            delete_node_edges(
                conn, [chunk_node(agent_id, doc_id, r["chunk_index"], r["embedding_version"]) for r in found]
            )
            conn.execute("DELETE FROM archival WHERE agent_id = ? AND doc_id = ?", (agent_id, doc_id))
            _tombstone(conn, agent_id, "document", doc_id, self._clock())
        self._vectors.remove([int(r["id"]) for r in found])
        return Forgotten({"archival_chunks": len(found)} if found else {})

    def tombstones(self, agent_id: str) -> Tombstones:
        validation.identifier("agent_id", agent_id)
        found = self._db.query(
            "list tombstones", "SELECT kind, item_id, forgotten_at FROM tombstones WHERE agent_id = ?", (agent_id,)
        )
        by_kind: dict[str, dict[str, float]] = {"message": {}, "document": {}}
        for r in found:
            by_kind.setdefault(r["kind"], {})[r["item_id"]] = float(r["forgotten_at"])
        return Tombstones(messages=by_kind["message"], documents=by_kind["document"])


def _tombstone(conn: sqlite3.Connection, agent_id: str, kind: str, item_id: str, now: float) -> None:
    # OR IGNORE: a repeated forget keeps the first time, which is what restores compare against.
    conn.execute(
        "INSERT OR IGNORE INTO tombstones (agent_id, kind, item_id, forgotten_at) VALUES (?, ?, ?, ?)",
        (agent_id, kind, item_id, now),
    )
