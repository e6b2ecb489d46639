"""Keeps the tantivy index caught up with SQLite.

Progress is a high-water mark over ``messages.id`` kept in SQLite (``meta.text_hwm``) plus a
queue of deleted ids (``text_index_deletes``). A pass reads rows above the mark and pending
deletes in one snapshot, applies them to tantivy and commits it, and only then records the
new mark. A crash between the two leaves tantivy *ahead* of the mark; the next pass first
deletes everything above the mark, so replays never duplicate a document, and readers never
trust documents above the mark they read (they score that tail from SQLite instead).

Across processes, tantivy's lock file lets one writer in at a time; a process that finds it
busy simply leaves the rows to whoever holds it (or to its own next attempt). Readers never
wait for the index: see ``EmbeddedStore.search_recall``.

The background passes run at a lower CPU priority (the thread, and tantivy's writer threads it
starts: :class:`~vcm.store.embedded.background.Wakeable`): a commit landing during a prompt build
then takes the cores only when the build leaves them (``bench_context.py`` on 2 cores, with the
query model's spin check that leaves such threads out: the builder's mean 15.1 -> 14.3 ms, p95
25.6 -> 22.9, p50 unchanged). A caller that waits for a pass (``flush_text_index``, synchronous
indexing with ``text_index_lag_ok`` off, another process's writer) may then wait longer on a
busy machine: the pass holds the indexer's lock and tantivy's writer lock at that priority.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable

import tantivy

from vcm.errors import StoreUnavailable
from vcm.store.embedded.background import Wakeable
from vcm.store.embedded.db import Database, meta_add, meta_int, meta_set
from vcm.store.embedded.schema import META_TEXT_DELETE_GEN, META_TEXT_GEN, META_TEXT_HWM
from vcm.store.embedded.textindex import TextDoc, TextIndex

log = logging.getLogger(__name__)

# Rows per tantivy commit during catch-up: large enough to amortise the ~20 ms commit,
# small enough that a rebuild shows progress and a crash loses little work.
BATCH_ROWS = 20_000


def reset_mark(conn: sqlite3.Connection) -> None:
    """Within a write: readers score every message from SQLite until the index is caught up
    again (a rebuild, or an index recreated), and no queued delete is left to apply. A searcher
    loaded before holds rows deleted meanwhile: the generation is a delete generation too."""
    meta_set(conn, META_TEXT_HWM, 0)
    meta_set(conn, META_TEXT_DELETE_GEN, meta_add(conn, META_TEXT_GEN, 1))
    conn.execute("DELETE FROM text_index_deletes")


class TextIndexer(Wakeable):
    def __init__(
        self,
        db: Database,
        index: TextIndex,
        fault: Callable[[str], None],
        *,
        debounce_s: float = 0.05,
        retry_s: float = 0.5,
    ) -> None:
        self._db = db
        self._index = index
        self._fault = fault
        self._debounce_s = debounce_s
        self._retry_s = retry_s
        self._lock = threading.Lock()  # one pass at a time in this process
        super().__init__("vcm-text-indexer")

    def catch_up(self, wait_s: float = 0.0, *, interruptible: bool = False) -> bool:
        """Index everything SQLite holds above the mark. False when another process writes
        (or, if ``interruptible``, when :meth:`stop` cut a long catch-up short)."""
        with self._lock:
            writer = self._index.try_writer(wait_s)
            if writer is None:
                return False
            try:
                while self._one_batch(writer):
                    if interruptible and self._stop.is_set():
                        return False
            finally:
                TextIndex.release(writer)
            self.passes += 1
            return True

    def _one_batch(self, writer: tantivy.IndexWriter) -> bool:
        with self._db.read("read messages for the text index") as conn:
            hwm = meta_int(conn, META_TEXT_HWM)
            rows = conn.execute(
                "SELECT id, agent_id, content, created_at FROM messages WHERE id > ? ORDER BY id LIMIT ?",
                (hwm, BATCH_ROWS),
            ).fetchall()
            deleted = [
                int(r[0]) for r in conn.execute("SELECT id FROM text_index_deletes ORDER BY id LIMIT ?", (BATCH_ROWS,))
            ]
        if not rows and not deleted:
            return False
        docs = [TextDoc(r["id"], r["agent_id"], r["content"], r["created_at"]) for r in rows]
        TextIndex.apply(writer, docs, deleted, above=hwm)
        self._fault("text_index.after_index_commit")
        with self._db.write("record text index progress") as conn:
            if docs:
                meta_set(conn, META_TEXT_HWM, docs[-1].row_id)
            generation = meta_add(conn, META_TEXT_GEN, 1)
            if deleted:
                meta_set(conn, META_TEXT_DELETE_GEN, generation)
            conn.executemany("DELETE FROM text_index_deletes WHERE id = ?", [(i,) for i in deleted])
        return True

    def rebuild(self, wait_s: float) -> None:
        """Re-index every message from SQLite.

        Lowering the mark to 0 first keeps recall complete meanwhile: readers score
        everything from SQLite until the new index catches up (slower, never wrong).
        """
        with self._lock:
            writer = self._index.try_writer(wait_s)
            if writer is None:
                raise StoreUnavailable("another process is writing the text index; retry the rebuild later")
            try:
                with self._db.write("reset the text index mark") as conn:
                    reset_mark(conn)
                # The first batch's range delete drops every old document in the same commit.
                while self._one_batch(writer):
                    pass
            finally:
                TextIndex.release(writer)

    # --- background catch-up --------------------------------------------------------------
    def _run(self) -> None:
        pending = False
        while not self._stop.is_set():
            self._wake.wait(timeout=self._retry_s if pending else None)
            if self._stop.is_set():
                return
            self._wake.clear()
            # Let a burst of writes land in one tantivy commit.
            self._stop.wait(self._debounce_s)
            try:
                pending = not self.catch_up(0.0, interruptible=True)
                self.last_error = None
            except Exception as exc:  # keep the thread alive; recall reads the tail meanwhile
                log.warning("text index catch-up failed, will retry: %s", exc)
                self.last_error = str(exc)
                pending = True
