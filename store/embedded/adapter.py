"""The embedded store: SQLite as the source of truth, tantivy BM25 and FAISS IVF beside it.

Files, for a database at ``vcm.db``::

    vcm.db, vcm.db-wal, vcm.db-shm   SQLite (WAL): every row of every kind
    vcm.db.tantivy/                  BM25 index over message content (derived, rebuildable)
    vcm.db.tantivy.lock              serialises creating/repairing that directory
    vcm.db.faiss/                    trained IVF indexes, one file per vector space (derived)
    vcm.db.faiss/messages/           trained IVF indexes of message vectors, one per (agent, version)

Semantics that the port leaves to adapters, as this one implements them:

* The recursive summary is the ``core_memory`` row ``(agent, "queue_head_summary")``; its graph
  node is ``summary_node(agent)`` and ``recall_log`` edges go from it to ``message_node(agent,
  message_id)``, with ``batch_id`` in the edge attributes. ``put_core``/``delete_core`` refuse
  that block id (only ``commit_eviction`` writes it) and ``list_core`` leaves it out.
* Revisions are decimal strings from one database-wide sequence, so a deleted and re-created
  block never gets back a revision an old client still holds.
* The ``evict`` event of a batch has the id ``"<agent>:evict:<batch_id>"``; its payload is the
  commit's ``event`` mapping plus ``batch_id``, ``message_ids`` and ``summary_rev``.
* ``expire(now)`` deletes messages whose ``expires_at`` < now (with their edges and index
  entries). Archival ``valid_until`` is freshness, not a TTL: stale chunks stay (``get_archival``
  returns them) and searches skip them unless ``filters={"include_stale": True}``.
* ``since`` is inclusive and ``until`` exclusive.
* Cursors are snapshots (see :mod:`vcm.store.embedded.snapshots`) that live ``cursor_ttl_s``;
  paging reaches at most ``cursor_max_results`` results of one search.

Open the store in the process that uses it (after a fork, not before): SQLite connections, the
tantivy reader and the indexer thread do not survive ``fork``.

The class is composed of one mixin per concern, each in its own module, over the shared state
and plumbing of :mod:`~vcm.store.embedded.base`: :mod:`~vcm.store.embedded.core_memory`,
:mod:`~vcm.store.embedded.messages` (spooling and eviction), :mod:`~vcm.store.embedded.recall_ops`
(text and vector recall), :mod:`~vcm.store.embedded.archival_ops`, :mod:`~vcm.store.embedded.events`,
:mod:`~vcm.store.embedded.graph` and :mod:`~vcm.store.embedded.maintenance` (expiry, health,
stats, index upkeep). This module keeps the constructor and the lifecycle (open, close).
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vcm.errors import StoreUnavailable, ValidationError, VcmError
from vcm.store import fusion, validation
from vcm.store.embedded.agent_snapshots import AgentSnapshotOps
from vcm.store.embedded.agents import AgentOps
from vcm.store.embedded.archival import ArchivalRanker
from vcm.store.embedded.archival_ops import ArchivalOps
from vcm.store.embedded.core_memory import CoreMemoryOps
from vcm.store.embedded.db import Database, meta_get, meta_int
from vcm.store.embedded.events import EventOps
from vcm.store.embedded.facts import FactOps
from vcm.store.embedded.factvectors import FactVectors
from vcm.store.embedded.graph import GraphOps
from vcm.store.embedded.idempotency import IdempotencyOps
from vcm.store.embedded.indexer import TextIndexer, reset_mark
from vcm.store.embedded.lifecycle import LifecycleOps
from vcm.store.embedded.maintenance import MaintenanceOps
from vcm.store.embedded.messageindex import DEFAULT_TAIL_LIMIT, MessageVectorIndexes
from vcm.store.embedded.messages import MessageOps
from vcm.store.embedded.principals import PrincipalOps
from vcm.store.embedded.recall import RecallRanker
from vcm.store.embedded.recall_ops import RecallOps
from vcm.store.embedded.schema import META_CURSOR_SECRET, META_TEXT_GEN, META_TEXT_HWM
from vcm.store.embedded.sizing import DEFAULT_TRAIN_THRESHOLD
from vcm.store.embedded.snapshots import Snapshots
from vcm.store.embedded.summaries import SummaryOps
from vcm.store.embedded.textindex import TextIndex
from vcm.store.embedded.upkeep import IndexUpkeep
from vcm.store.embedded.vectorindex import VectorIndexes
from vcm.store.port import FaultHook


class EmbeddedStore(
    AgentOps,
    SummaryOps,
    FactOps,
    PrincipalOps,
    AgentSnapshotOps,
    LifecycleOps,
    CoreMemoryOps,
    MessageOps,
    RecallOps,
    ArchivalOps,
    EventOps,
    GraphOps,
    IdempotencyOps,
    MaintenanceOps,
):
    """The default store: one SQLite file plus derived indexes, no services.

    Args:
        path: the SQLite file (created with its parent directory), or ``":memory:"`` for a
            throwaway store in a temporary directory removed by :meth:`close`.
        n_lists: IVF centroids per vector space. ``None`` (default) sizes it as sqrt(N), capped
            at N/39, retrained when the ideal has doubled (:mod:`vcm.store.embedded.sizing` says
            why not ArangoDB's 4·sqrt(N)).
        n_probe: IVF lists searched per query when the caller passes none. ``None`` (default)
            uses each index's own default, max(16, nLists/64), as ArangoDB indexes carry a
            ``defaultNProbe``: recall@k follows the fraction of lists probed, so a fixed number
            would lose recall as the index grows (``scripts/bench_store.py`` measures it).
        train_threshold: exact search until a space holds this many vectors (at least 39 per
            centroid); an exact query over 10 000 384-d vectors takes 1-2 ms on one core. The
            same threshold switches an agent's message vectors (per embedding version) from
            exact search to IVF (:mod:`vcm.store.embedded.messageindex`).
        fault_hook: test seam called at named points inside multi-step writes.
        text_index_lag_ok: True (default) indexes new messages in a background thread, batching
            tantivy commits (~20 ms each); recall still sees them at once (the unindexed tail is
            scored from SQLite). False indexes them in the writing call before it returns.
        busy_timeout_s: how long a write waits for another writer before STORE_UNAVAILABLE.
        cursor_ttl_s: lifetime of a search cursor (its result snapshot).
        cursor_max_results: how deep paging can go in one search.
        hybrid_depth_factor: a hybrid ranking of ``n`` results fuses text and vector
            lists ``factor * n`` deep (at least ``fusion.HYBRID_DEPTH_MIN``, at most
            ``cursor_max_results``; :func:`vcm.store.fusion.hybrid_depth`); 0 ranks every first
            page as deep as paging goes (the cost at 1e6 messages: docs/recall-scale.md).
        recall_tail_limit: how many unindexed message-vector log rows a recall query scans
            exactly beside the agent's message index (the newest; the store's upkeep thread
            indexes them). Past it the query leaves the oldest out and says so: its page's
            ``stats.partial`` (:mod:`vcm.store.embedded.messageindex`).
        clock: time source for timestamps, TTL and freshness (tests pass a fake).
    """

    def __init__(
        self,
        path: str,
        *,
        n_lists: int | None = None,
        n_probe: int | None = None,
        train_threshold: int = DEFAULT_TRAIN_THRESHOLD,
        fault_hook: FaultHook | None = None,
        text_index_lag_ok: bool = True,
        busy_timeout_s: float = 10.0,
        cursor_ttl_s: float = 600.0,
        cursor_max_results: int = 1000,
        hybrid_depth_factor: int = fusion.HYBRID_DEPTH_FACTOR,
        recall_tail_limit: int = DEFAULT_TAIL_LIMIT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if n_lists is not None:
            validation.limit("n_lists", n_lists, maximum=1 << 20)
        if n_probe is not None:
            validation.limit("n_probe", n_probe, maximum=1 << 20)
        validation.limit("train_threshold", train_threshold, maximum=1 << 40)
        validation.limit("cursor_max_results", cursor_max_results, maximum=100_000)
        validation.limit("recall_tail_limit", recall_tail_limit, maximum=10_000_000)
        if not isinstance(hybrid_depth_factor, int) or not 0 <= hybrid_depth_factor <= 1000:
            raise ValidationError("hybrid_depth_factor must be an integer within 0..1000")
        if not busy_timeout_s > 0 or not cursor_ttl_s > 0:
            raise ValidationError("busy_timeout_s and cursor_ttl_s must be positive")
        self._tempdir = None
        if path == ":memory:":
            self._tempdir = tempfile.mkdtemp(prefix="vcm-store-")
            path = str(Path(self._tempdir) / "vcm.db")
        db_path = Path(path)
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"cannot create {db_path.parent}: {exc}") from exc
        self.path = str(db_path)
        self._n_probe = n_probe
        self._fault_hook = fault_hook
        self._lag_ok = text_index_lag_ok
        self._busy_timeout_s = busy_timeout_s
        self._clock = clock
        self._db = Database(self.path, busy_timeout_s=busy_timeout_s)
        with self._db.read("read store settings") as conn:
            self._secret = bytes.fromhex(meta_get(conn, META_CURSOR_SECRET))
        self._text = self._open_text_index(Path(f"{self.path}.tantivy"))
        self._indexer = TextIndexer(self._db, self._text, self._fault)
        self._recall = RecallRanker(self._db, self._text)
        self._vectors = VectorIndexes(
            Path(f"{self.path}.faiss"), self._db, n_lists=n_lists, train_threshold=train_threshold
        )
        self._message_vectors = MessageVectorIndexes(
            Path(f"{self.path}.faiss") / "messages",
            self._db,
            threshold=train_threshold,
            n_probe=n_probe,
            tail_limit=recall_tail_limit,
        )
        self._upkeep = IndexUpkeep(self._message_vectors, self._reload_text)
        self._message_vectors.on_lag = self._upkeep.notify
        self._recall.on_stale = self._upkeep.notify
        self._archival = ArchivalRanker(self._db, self._vectors, clock)
        self._max_results = cursor_max_results
        self._fact_vectors = FactVectors()
        self.hybrid_depth_factor = hybrid_depth_factor
        self._snapshots = Snapshots(
            self._db, self._secret, ttl_s=cursor_ttl_s, max_results=cursor_max_results, clock=clock
        )
        # Catch up at open (crash between SQLite and tantivy commits, deleted index, another
        # process's writes); if another process holds the writer, it is doing the same.
        self._with_text_errors(lambda: self._indexer.catch_up(0.0))

    # --- lifecycle ---------------------------------------------------------------------------
    def _open_text_index(self, directory: Path) -> TextIndex:
        lock_path = Path(f"{self.path}.tantivy.lock")
        with open(lock_path, "a+") as lock:
            # Two processes opening a missing/corrupt index must not both wipe and create it.
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                index = TextIndex(directory)
                if index.recreated:
                    with self._db.write("reset the text index mark") as conn:
                        reset_mark(conn)
                return index
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _reload_text(self) -> None:
        """Reload the tantivy searcher if the text index moved on (the upkeep thread calls it)."""
        with self._db.read("read the text index mark") as conn:
            generation, hwm = meta_int(conn, META_TEXT_GEN), meta_int(conn, META_TEXT_HWM)
        self._text.refresh(generation, hwm)

    def close(self) -> None:
        self._upkeep.stop()
        self._indexer.stop()
        with contextlib.suppress(VcmError, OSError, ValueError, RuntimeError, sqlite3.Error):
            # Leave no committed message unindexed if we can help it (the next open would
            # catch up anyway).
            self._indexer.catch_up(0.0)
        self._vectors.save_all()
        self._message_vectors.save_all()
        self._db.close()
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    def __enter__(self) -> EmbeddedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
