"""Maintenance of the embedded store: expiry, health, stats and the embedded-only index operations.

The index operations (``flush_text_index``, ``rebuild_text_index``, ``flush_vector_indexes``,
``rebuild_vector_indexes``)
are not part of the port; callers reach them on :class:`~vcm.store.embedded.adapter.EmbeddedStore`
directly (the metered wrapper passes them through).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vcm.errors import VcmError
from vcm.store import validation
from vcm.store.embedded.base import EmbeddedBase
from vcm.store.embedded.db import meta_int
from vcm.store.embedded.lifecycle import delete_message_rows
from vcm.store.embedded.schema import META_TEXT_GEN, META_TEXT_HWM
from vcm.store.embedded.vectorindex import SpaceKey
from vcm.store.types import SUMMARY_BLOCK_ID, Expiry, Health


class MaintenanceOps(EmbeddedBase):
    """``expire``, ``health``, ``stats`` and the derived indexes' upkeep."""

    def expire_all(self, now: float) -> Expiry:
        validation.finite("now", now)
        with self._db.write("expire messages") as conn:
            doomed = conn.execute(
                "SELECT id, agent_id, message_id, n_terms FROM messages "
                "WHERE expires_at IS NOT NULL AND expires_at < ?",
                (now,),
            ).fetchall()
            delete_message_rows(conn, doomed)
            conn.execute("DELETE FROM cursors WHERE expires_at < ?", (self._clock(),))
            snapshots = conn.execute(
                "DELETE FROM agent_snapshots WHERE expires_at IS NOT NULL AND expires_at < ?", (now,)
            ).rowcount
            state = conn.execute("DELETE FROM state WHERE expires_at IS NOT NULL AND expires_at < ?", (now,)).rowcount
            facts = conn.execute(
                "UPDATE facts SET status = 'expired' WHERE expires_at IS NOT NULL AND expires_at < ? "
                "AND status IN ('active', 'shadow')",
                (now,),
            ).rowcount
        if doomed:
            self._messages_written()
        return Expiry(messages=len(doomed), snapshots=snapshots, state=state, facts=facts)

    def health(self) -> Health:
        try:
            details = self._details()
        except VcmError as exc:
            return Health(False, self.backend, {"path": self.path, "error": exc.message})
        except (OSError, ValueError, RuntimeError) as exc:  # the text index, from tantivy
            return Health(False, self.backend, {"path": self.path, "error": str(exc)})
        return Health(True, self.backend, details)

    def _details(self) -> dict[str, Any]:
        with self._db.read("read index state") as conn:
            hwm = meta_int(conn, META_TEXT_HWM)
            generation = meta_int(conn, META_TEXT_GEN)
            lag = conn.execute("SELECT COUNT(*) FROM messages WHERE id > ?", (hwm,)).fetchone()[0]
            pending = conn.execute("SELECT COUNT(*) FROM text_index_deletes").fetchone()[0]
            spaces = conn.execute(
                "SELECT metric, dimension, embedding_version FROM vector_spaces ORDER BY metric, embedding_version"
            ).fetchall()
        self._text.refresh(generation, hwm)
        loaded = {(d["metric"], d["embedding_version"]): d for d in self._vectors.describe()}
        vector_spaces = []
        for metric, dimension, version in spaces:
            state = loaded.get((metric, version))
            on_disk = self._vectors.directory / SpaceKey(metric, dimension, version).filename()
            vector_spaces.append(
                state
                if state is not None
                else {
                    "metric": metric,
                    "dimension": dimension,
                    "embedding_version": version,
                    "kind": "ivf" if on_disk.exists() else "exact",
                    "loaded": False,
                }
            )
        size = sum(
            Path(f"{self.path}{suffix}").stat().st_size
            for suffix in ("", "-wal")
            if Path(f"{self.path}{suffix}").exists()
        )
        return {
            "path": self.path,
            "size_bytes": size,
            "text_index": {
                "path": str(self._text.directory),
                "high_water_mark": hwm,
                "pending_deletes": pending,
                "documents": self._text.num_docs(),
                "indexer_error": self._indexer.last_error,
            },
            "index_upkeep_error": self._upkeep.last_error,
            "text_index_lag": lag,
            "vector_index": ("ivf" if vector_spaces and all(s["kind"] == "ivf" for s in vector_spaces) else "exact"),
            "vector_spaces": vector_spaces,
            "train_threshold": self._vectors.threshold,
            "n_probe": self._n_probe,  # None: each space's default_n_probe
        }

    def stats(self, agent_id: str | None = None) -> dict[str, Any]:
        if agent_id is not None:
            validation.identifier("agent_id", agent_id)
        where = "" if agent_id is None else " WHERE agent_id = ?"
        params: tuple[str, ...] = () if agent_id is None else (agent_id,)
        counts: dict[str, Any] = {}
        with self._db.read("read counts") as conn:
            for name, table in (
                ("messages", "messages"),
                ("archival_chunks", "archival"),
                ("events", "events"),
                ("edges", "edges"),
                ("committed_batches", "batches"),
                ("message_vectors", "message_vectors"),
            ):
                counts[name] = conn.execute(f"SELECT COUNT(*) FROM {table}{where}", params).fetchone()[0]
            edge_where = (" WHERE" if agent_id is None else where + " AND") + " kind = 'recall_log'"
            counts["recall_log_edges"] = conn.execute(f"SELECT COUNT(*) FROM edges{edge_where}", params).fetchone()[0]
            core_where = (" WHERE" if agent_id is None else where + " AND") + " block_id != ?"
            counts["core_blocks"] = conn.execute(
                f"SELECT COUNT(*) FROM core_memory{core_where}", (*params, SUMMARY_BLOCK_ID)
            ).fetchone()[0]
            counts["summaries"] = conn.execute(
                f"SELECT COUNT(*) FROM core_memory{core_where.replace('!=', '=')}",
                (*params, SUMMARY_BLOCK_ID),
            ).fetchone()[0]
        out: dict[str, Any] = {"backend": self.backend, "agent_id": agent_id, **counts}
        if agent_id is None:
            found = self._db.query(
                "count facts", "SELECT type, status, COUNT(*) FROM facts GROUP BY type, status ORDER BY type, status"
            )
            out["facts_by_type"] = [{"type": r[0], "status": r[1], "count": int(r[2])} for r in found]
            out.update(self._details())
        return out

    # --- embedded-only operations -----------------------------------------------------------
    def flush_text_index(self, timeout_s: float | None = None) -> bool:
        """Bring the text index level with SQLite now; False if another process holds it."""
        wait = self._busy_timeout_s if timeout_s is None else timeout_s
        return self._indexer.catch_up(wait)

    def rebuild_text_index(self, timeout_s: float | None = None) -> None:
        """Re-index every message from SQLite (after corruption, or an analyser change)."""
        self._indexer.rebuild(self._busy_timeout_s if timeout_s is None else timeout_s)

    def flush_vector_indexes(self, agent_id: str | None = None) -> None:
        """Build, train and catch up the message vector indexes (of ``agent_id``, or every
        agent's) now, in this thread: what the upkeep thread does in the background."""
        if agent_id is not None:
            validation.identifier("agent_id", agent_id)
        self._message_vectors.flush(agent_id)

    def rebuild_vector_indexes(self) -> None:
        """Drop the FAISS indexes (archival and message vectors, memory and disk); the next
        archival search rebuilds those from SQLite, the upkeep thread the message indexes (their
        queries scan the tail meanwhile)."""
        self._vectors.rebuild()
        self._message_vectors.rebuild()
