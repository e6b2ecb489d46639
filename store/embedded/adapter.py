"""The embedded store: SQLite as the source of truth, tantivy BM25 and FAISS IVF beside it.

Files, for a database at ``vcm.db``::

    vcm.db, vcm.db-wal, vcm.db-shm   SQLite (WAL): every row of every kind
    vcm.db.tantivy/                  BM25 index over message content (derived, rebuildable)
    vcm.db.tantivy.lock              serialises creating/repairing that directory
    vcm.db.faiss/                    trained IVF indexes, one file per vector space (derived)

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
* Cursors are snapshots (see :mod:`store.embedded.snapshots`) that live ``cursor_ttl_s``;
  paging reaches at most ``cursor_max_results`` results of one search.

Open the store in the process that uses it (after a fork, not before): SQLite connections, the
tantivy reader and the indexer thread do not survive ``fork``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from store import fusion, paging, semantics, validation
from store.cursor import fingerprint, vector_digest
from store.embedded import rows
from store.embedded.archival import ArchivalRanker, FilterTally
from store.embedded.db import Database, chunked, meta_add, meta_get, meta_int, meta_set
from store.embedded.indexer import TextIndexer
from store.embedded.recall import RecallRanker, time_filter
from store.embedded.schema import (
    META_CURSOR_SECRET,
    META_REV_SEQ,
    META_TEXT_DOCS,
    META_TEXT_GEN,
    META_TEXT_HWM,
    META_TEXT_TERMS,
)
from store.embedded.sizing import DEFAULT_TRAIN_THRESHOLD
from store.embedded.snapshots import Snapshots
from store.embedded.textindex import TextIndex, analyze, query_terms
from store.embedded.vectorindex import SpaceKey, VectorIndexes
from store.errors import (
    NotFoundError,
    StoreError,
    StoreUnavailableError,
    StoreValidationError,
)
from store.port import FaultHook, MemoryStore
from store.types import (
    SUMMARY_BLOCK_ID,
    ArchivalChunk,
    ArchivalHit,
    CoreBlock,
    CoreBlockWrite,
    Edge,
    EdgeKind,
    EvictionCommit,
    EvictionResult,
    Health,
    MemoryEvent,
    NodeRef,
    Page,
    RecallHit,
    SearchStats,
    StoredMessage,
    Summary,
    chunk_node,
    core_node,
    message_node,
    summary_node,
)


class EmbeddedStore(MemoryStore):
    """The default store: one SQLite file plus derived indexes, no services.

    Args:
        path: the SQLite file (created with its parent directory), or ``":memory:"`` for a
            throwaway store in a temporary directory removed by :meth:`close`.
        n_lists: IVF centroids per vector space. ``None`` (default) sizes it as sqrt(N), capped
            at N/39, retrained when the ideal has doubled (:mod:`store.embedded.sizing` says
            why not ArangoDB's 4·sqrt(N)).
        n_probe: IVF lists searched per query when the caller passes none. ``None`` (default)
            uses each index's own default, max(16, nLists/64), as ArangoDB indexes carry a
            ``defaultNProbe``: recall@k follows the fraction of lists probed, so a fixed number
            would lose recall as the index grows (``scripts/bench_store.py`` measures it).
        train_threshold: exact search until a space holds this many vectors (at least 39 per
            centroid); an exact query over 10 000 384-d vectors takes 1-2 ms on one core.
        fault_hook: test seam called at named points inside multi-step writes.
        text_index_lag_ok: True (default) indexes new messages in a background thread, batching
            tantivy commits (~20 ms each); recall still sees them at once (the unindexed tail is
            scored from SQLite). False indexes them in the writing call before it returns.
        busy_timeout_s: how long a write waits for another writer before STORE_UNAVAILABLE.
        cursor_ttl_s: lifetime of a search cursor (its result snapshot).
        cursor_max_results: how deep paging can go in one search.
        clock: time source for timestamps, TTL and freshness (tests pass a fake).
    """

    backend = "embedded"

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
        clock: Callable[[], float] = time.time,
    ) -> None:
        if n_lists is not None:
            validation.limit("n_lists", n_lists, maximum=1 << 20)
        if n_probe is not None:
            validation.limit("n_probe", n_probe, maximum=1 << 20)
        validation.limit("train_threshold", train_threshold, maximum=1 << 40)
        validation.limit("cursor_max_results", cursor_max_results, maximum=100_000)
        if not busy_timeout_s > 0 or not cursor_ttl_s > 0:
            raise StoreValidationError("busy_timeout_s and cursor_ttl_s must be positive")
        self._tempdir: str | None = None
        if path == ":memory:":
            self._tempdir = tempfile.mkdtemp(prefix="vcm-store-")
            path = str(Path(self._tempdir) / "vcm.db")
        db_path = Path(path)
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailableError(f"cannot create {db_path.parent}: {exc}") from exc
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
        self._archival = ArchivalRanker(self._db, self._vectors, clock)
        self._max_results = cursor_max_results
        self._snapshots = Snapshots(
            self._db, self._secret, ttl_s=cursor_ttl_s, max_results=cursor_max_results, clock=clock
        )
        # Catch up at open (crash between SQLite and tantivy commits, deleted index, another
        # process's writes); if another process holds the writer, it is doing the same.
        self._with_text_errors(lambda: self._indexer.catch_up(0.0))

    # --- plumbing ---------------------------------------------------------------------------
    def _open_text_index(self, directory: Path) -> TextIndex:
        lock_path = Path(f"{self.path}.tantivy.lock")
        with open(lock_path, "a+") as lock:
            # Two processes opening a missing/corrupt index must not both wipe and create it.
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                index = TextIndex(directory)
                if index.recreated:
                    with self._db.write("reset the text index mark") as conn:
                        meta_set(conn, META_TEXT_HWM, 0)
                        meta_add(conn, META_TEXT_GEN, 1)
                        conn.execute("DELETE FROM text_index_deletes")
                return index
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _fault(self, point: str) -> None:
        semantics.fire_fault(self._fault_hook, point)

    def _with_text_errors(self, action: Callable[[], object]) -> None:
        """Text index upkeep after a commit: its failure must not fail the committed write."""
        try:
            action()
        except (StoreError, OSError, ValueError, RuntimeError, sqlite3.Error):
            self._indexer.notify()  # retry in the background; recall reads the tail meanwhile

    def _messages_written(self) -> None:
        if self._lag_ok:
            self._indexer.notify()
        else:
            self._with_text_errors(lambda: self._indexer.catch_up(self._busy_timeout_s))

    def _next_rev(self, conn: sqlite3.Connection) -> str:
        return str(meta_add(conn, META_REV_SEQ, 1))

    def _now(self, given: float = 0.0) -> float:
        return given if given else self._clock()

    # --- core memory ------------------------------------------------------------------------
    def get_core(self, agent_id: str, block_id: str) -> CoreBlock:
        validation.identifier("agent_id", agent_id)
        validation.identifier("block_id", block_id)
        found = self._db.query(
            "read a core block",
            f"SELECT {rows.CORE_COLUMNS} FROM core_memory WHERE agent_id = ? AND block_id = ?",
            (agent_id, block_id),
        )
        if not found:
            raise NotFoundError(
                f"core block {block_id!r} of agent {agent_id!r} does not exist",
                agent_id=agent_id,
                block_id=block_id,
            )
        return rows.core_block(found[0])

    def list_core(self, agent_id: str) -> list[CoreBlock]:
        validation.identifier("agent_id", agent_id)
        found = self._db.query(
            "list core blocks",
            f"SELECT {rows.CORE_COLUMNS} FROM core_memory WHERE agent_id = ? AND block_id != ? ORDER BY block_id",
            (agent_id, SUMMARY_BLOCK_ID),
        )
        return [rows.core_block(r) for r in found]

    def put_core(self, block: CoreBlockWrite, expected_rev: str | None, idempotency_key: str) -> CoreBlock:
        validation.core_write(block)
        validation.rev("expected_rev", expected_rev, optional=True)
        validation.identifier("idempotency_key", idempotency_key)
        content = semantics.core_write_fingerprint(block)
        with self._db.write("write a core block") as conn:
            seen = conn.execute(
                "SELECT fingerprint, result FROM idempotency WHERE agent_id = ? AND scope = 'core' AND key = ?",
                (block.agent_id, idempotency_key),
            ).fetchone()
            if seen is not None:
                return semantics.replayed_core_write(
                    seen["fingerprint"], json.loads(seen["result"]), content, idempotency_key
                )
            current = conn.execute(
                "SELECT rev FROM core_memory WHERE agent_id = ? AND block_id = ?",
                (block.agent_id, block.block_id),
            ).fetchone()
            current_rev = None if current is None else current["rev"]
            if current_rev != expected_rev:
                raise semantics.rev_conflict(f"core block {block.block_id!r}", expected_rev, current_rev)
            stored = CoreBlock(
                agent_id=block.agent_id,
                block_id=block.block_id,
                role=block.role,
                content=block.content,
                tokens=block.tokens,
                pinned=block.pinned,
                rev=self._next_rev(conn),
                updated_at=self._clock(),
                metadata=dict(block.metadata),
            )
            conn.execute(
                "INSERT INTO core_memory (agent_id, block_id, role, content, tokens, pinned, "
                "rev, updated_at, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (agent_id, block_id) DO UPDATE SET role = excluded.role, "
                "content = excluded.content, tokens = excluded.tokens, pinned = excluded.pinned, "
                "rev = excluded.rev, updated_at = excluded.updated_at, "
                "metadata = excluded.metadata",
                (
                    stored.agent_id,
                    stored.block_id,
                    stored.role,
                    stored.content,
                    stored.tokens,
                    int(stored.pinned),
                    stored.rev,
                    stored.updated_at,
                    rows.dumps(dict(stored.metadata)),
                ),
            )
            conn.execute(
                "INSERT INTO idempotency (agent_id, scope, key, fingerprint, result, created_at) "
                "VALUES (?, 'core', ?, ?, ?, ?)",
                (
                    block.agent_id,
                    idempotency_key,
                    content,
                    rows.dumps(semantics.core_block_to_json(stored)),
                    stored.updated_at,
                ),
            )
            self._fault("put_core.before_commit")
        return stored

    def delete_core(self, agent_id: str, block_id: str, expected_rev: str) -> None:
        validation.identifier("agent_id", agent_id)
        validation.block_id(block_id)
        validation.rev("expected_rev", expected_rev, optional=False)
        node = core_node(agent_id, block_id)
        with self._db.write("delete a core block") as conn:
            current = conn.execute(
                "SELECT rev FROM core_memory WHERE agent_id = ? AND block_id = ?",
                (agent_id, block_id),
            ).fetchone()
            if current is None:
                raise NotFoundError(
                    f"core block {block_id!r} of agent {agent_id!r} does not exist",
                    agent_id=agent_id,
                    block_id=block_id,
                )
            if current["rev"] != expected_rev:
                raise semantics.rev_conflict(f"core block {block_id!r}", expected_rev, current["rev"])
            conn.execute("DELETE FROM core_memory WHERE agent_id = ? AND block_id = ?", (agent_id, block_id))
            _delete_node_edges(conn, [node])

    def get_summary(self, agent_id: str) -> Summary | None:
        validation.identifier("agent_id", agent_id)
        found = self._db.query(
            "read the summary",
            f"SELECT {rows.CORE_COLUMNS} FROM core_memory WHERE agent_id = ? AND block_id = ?",
            (agent_id, SUMMARY_BLOCK_ID),
        )
        return rows.summary(found[0]) if found else None

    # --- messages / recall ------------------------------------------------------------------
    def spool_messages(self, messages: Sequence[StoredMessage], *, events: Sequence[MemoryEvent] = ()) -> int:
        batch = semantics.distinct(validation.messages(messages))
        audit = validation.keyed_events(events)
        if not batch and not audit:
            return 0
        lengths = [len(analyze(m.content)) for m in batch]
        with self._db.write("spool messages") as conn:
            added = _insert_messages(conn, batch, lengths)
            _insert_events(conn, audit, self._clock())
            self._fault("spool_messages.before_commit")
        if added:
            self._messages_written()
        return added

    def get_messages(self, agent_id: str, message_ids: Sequence[str]) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        if isinstance(message_ids, str) or not isinstance(message_ids, Sequence):
            raise StoreValidationError("message_ids must be a sequence of strings")
        wanted = [validation.identifier("message_id", m) for m in message_ids]
        found: dict[str, StoredMessage] = {}
        for part in chunked(list(dict.fromkeys(wanted))):
            marks = ",".join("?" * len(part))
            for row in self._db.query(
                "read messages",
                f"SELECT {rows.MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? AND message_id IN ({marks})",
                [agent_id, *part],
            ):
                found[row["message_id"]] = rows.message(row)
        return [found[m] for m in wanted if m in found]

    def list_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 100) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        after, n = validation.after_seq(after_seq), validation.limit("limit", limit)
        found = self._db.query(
            "list messages",
            f"SELECT {rows.MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? AND seq > ? ORDER BY seq, id LIMIT ?",
            (agent_id, after, n),
        )
        return [rows.message(r) for r in found]

    def count_messages(self, agent_id: str) -> int:
        validation.identifier("agent_id", agent_id)
        found = self._db.query("count messages", "SELECT COUNT(*) FROM messages WHERE agent_id = ?", (agent_id,))
        return int(found[0][0])

    def commit_eviction(self, commit: EvictionCommit) -> EvictionResult:
        validation.eviction(commit)
        batch = semantics.distinct(list(commit.messages))
        lengths = [len(analyze(m.content)) for m in batch]
        agent = commit.agent_id
        summary = summary_node(agent)
        event_id = semantics.evict_event_id(agent, commit.batch_id)
        with self._db.write("commit an eviction batch") as conn:
            done = conn.execute(
                "SELECT summary_rev, messages_committed FROM batches WHERE agent_id = ? AND batch_id = ?",
                (agent, commit.batch_id),
            ).fetchone()
            if done is not None:
                return EvictionResult(agent, commit.batch_id, done["summary_rev"], done["messages_committed"], True)
            current = conn.execute(
                "SELECT rev FROM core_memory WHERE agent_id = ? AND block_id = ?",
                (agent, SUMMARY_BLOCK_ID),
            ).fetchone()
            current_rev = None if current is None else current["rev"]
            if current_rev != commit.expected_summary_rev:
                raise semantics.rev_conflict(
                    f"the summary of agent {agent!r}", commit.expected_summary_rev, current_rev
                )
            now = self._clock()
            added = _insert_messages(conn, batch, lengths)
            conn.executemany(
                "INSERT OR IGNORE INTO edges (kind, src_coll, src_key, dst_coll, dst_key, "
                "agent_id, created_at, attributes) VALUES ('recall_log', ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        summary.collection,
                        summary.key,
                        "messages",
                        message_node(agent, m.message_id).key,
                        agent,
                        now,
                        rows.dumps({"batch_id": commit.batch_id}),
                    )
                    for m in batch
                ],
            )
            self._fault("commit_eviction.after_recall_append")
            rev = self._next_rev(conn)
            conn.execute(
                "INSERT INTO core_memory (agent_id, block_id, role, content, tokens, pinned, rev, "
                "updated_at, metadata, batch_id) VALUES (?, ?, 'system', ?, ?, 0, ?, ?, '{}', ?) "
                "ON CONFLICT (agent_id, block_id) DO UPDATE SET content = excluded.content, "
                "tokens = excluded.tokens, rev = excluded.rev, updated_at = excluded.updated_at, "
                "batch_id = excluded.batch_id",
                (
                    agent,
                    SUMMARY_BLOCK_ID,
                    commit.summary_text,
                    commit.summary_tokens,
                    rev,
                    now,
                    commit.batch_id,
                ),
            )
            payload = semantics.evict_event_payload(commit, batch, rev)
            conn.execute(
                "INSERT OR IGNORE INTO events (event_id, agent_id, kind, payload, created_at, "
                "actor, idempotency_key) VALUES (?, ?, 'evict', ?, ?, ?, ?)",
                (event_id, agent, rows.dumps(payload), now, commit.actor, event_id),
            )
            _insert_events(conn, commit.events, now)
            conn.execute(
                "INSERT INTO batches (agent_id, batch_id, summary_rev, messages_committed, "
                "event_id, committed_at) VALUES (?, ?, ?, ?, ?, ?)",
                (agent, commit.batch_id, rev, len(batch), event_id, now),
            )
            self._fault("commit_eviction.before_commit")
        if added:
            self._messages_written()
        return EvictionResult(agent, commit.batch_id, rev, len(batch), False)

    def committed_batches(self, agent_id: str) -> list[int]:
        validation.identifier("agent_id", agent_id)
        found = self._db.query(
            "list committed batches",
            "SELECT batch_id FROM batches WHERE agent_id = ? ORDER BY batch_id",
            (agent_id,),
        )
        return [int(r[0]) for r in found]

    def search_recall(
        self,
        agent_id: str,
        query: str,
        limit: int = 10,
        cursor: str | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
    ) -> Page[RecallHit]:
        since, until = validation.recall_search(agent_id, query, limit, since, until)
        key = fingerprint("recall", agent_id, query, since, until)
        terms = query_terms(query)

        def rank(n: int, bound: int | None, exclude: frozenset[int]) -> tuple[list[tuple[int, float]], int]:
            return self._recall.rank(agent_id, terms, n, since=since, until=until, bound=bound, exclude=exclude)

        part = self._snapshots.page("recall", agent_id, key, limit, cursor, rank)
        messages = self._hydrate_messages(agent_id, [i for i, _ in part.items])
        hits = [RecallHit(messages[i], s) for i, s in part.items if i in messages]
        return Page(hits, part.next_cursor)

    def put_message_vectors(
        self, agent_id: str, vectors: Sequence[tuple[str, Sequence[float]]], embedding_version: str
    ) -> int:
        validation.identifier("agent_id", agent_id)
        known = (
            self._db.query(
                "read message vector dimension",
                "SELECT dimension FROM message_vectors WHERE agent_id = ? AND embedding_version = ? LIMIT 1",
                (agent_id, embedding_version),
            )
            if isinstance(embedding_version, str)
            else []
        )
        checked, dim = fusion.unit_vectors(vectors, embedding_version, dimension=known[0][0] if known else None)
        if not checked:
            return 0
        with self._db.write("put message vectors") as conn:
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO message_vectors (agent_id, message_id, embedding_version, dimension, "
                "embedding) SELECT ?, ?, ?, ?, ? WHERE EXISTS "
                "(SELECT 1 FROM messages WHERE agent_id = ? AND message_id = ?)",
                [
                    (agent_id, mid, embedding_version, dim, vec.astype("<f4").tobytes(), agent_id, mid)
                    for mid, vec in checked
                ],
            )
            return conn.total_changes - before

    def message_vector_ids(self, agent_id: str, message_ids: Sequence[str], embedding_version: str) -> set[str]:
        validation.identifier("agent_id", agent_id)
        ids = list(dict.fromkeys(str(m) for m in message_ids))
        found: set[str] = set()
        for part in chunked(ids):
            found.update(
                str(r[0])
                for r in self._db.query(
                    "read message vector ids",
                    "SELECT message_id FROM message_vectors WHERE agent_id = ? AND embedding_version = ? "
                    f"AND message_id IN ({','.join('?' * len(part))})",
                    (agent_id, embedding_version, *part),
                )
            )
        return found

    def search_recall_hybrid(
        self,
        agent_id: str,
        query: str,
        vector: Sequence[float] | None,
        *,
        limit: int = 10,
        cursor: str | None = None,
        since: float | None = None,
        until: float | None = None,
        mode: str = "hybrid",
        embedding_version: str | None = None,
    ) -> Page[RecallHit]:
        if fusion.recall_mode(mode) == "text":
            return self.search_recall(agent_id, query, limit, cursor, since=since, until=until)
        since, until, q = fusion.vector_query(agent_id, query, vector, mode, limit, since, until)
        version = embedding_version or self._main_vector_version(agent_id)
        key = fingerprint("recall-" + mode, agent_id, query, vector_digest(q), version, since, until)
        terms = query_terms(query)
        depth = self._max_results

        def rank(n: int, bound: int | None, exclude: frozenset[int]) -> tuple[list[tuple[int, float]], int]:
            if mode == "vector":
                top = self._newest_message() if bound is None else bound
                ranked = self._vector_rank(agent_id, version, q, since, until, top, n + len(exclude))
                return [h for h in ranked if h[0] not in exclude][:n], top
            text, newest = self._recall.rank(agent_id, terms, depth, since=since, until=until, bound=bound)
            top = newest if bound is None else min(newest, bound)
            vec = self._vector_rank(agent_id, version, q, since, until, top, depth)
            seqs, embedded = self._positions(agent_id, {i for i, _ in text} | {i for i, _ in vec}, version)
            fused = fusion.hybrid(text, vec, seqs, unembedded={i for i, _ in text} - embedded)
            return [h for h in fused if h[0] not in exclude][:n], top

        part = self._snapshots.page("recall-" + mode, agent_id, key, limit, cursor, rank)
        messages = self._hydrate_messages(agent_id, [i for i, _ in part.items])
        hits = [RecallHit(messages[i], s) for i, s in part.items if i in messages]
        return Page(hits, part.next_cursor)

    def _newest_message(self) -> int:
        return int(self._db.query("newest message", "SELECT COALESCE(MAX(id), 0) FROM messages")[0][0])

    def _main_vector_version(self, agent_id: str) -> str | None:
        found = self._db.query(
            "pick message vector version",
            "SELECT embedding_version FROM message_vectors WHERE agent_id = ? GROUP BY embedding_version "
            "ORDER BY COUNT(*) DESC, embedding_version LIMIT 1",
            (agent_id,),
        )
        return str(found[0][0]) if found else None

    def _vector_rank(
        self,
        agent_id: str,
        version: str | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        since: float | None,
        until: float | None,
        top: int,
        n: int,
    ) -> list[tuple[int, float]]:
        """Exact cosine over the agent's message vectors of ``version`` (messages up to row ``top``
        in the time window); a per-agent recall corpus is small enough that exact search is the
        right index (the archival spaces are where IVF pays)."""
        if version is None or n <= 0:
            return []
        time_sql, time_params = time_filter(since, until, column="m.created_at")
        found = self._db.query(
            "read message vectors",
            "SELECT m.id, v.dimension, v.embedding FROM message_vectors v JOIN messages m "
            "ON m.agent_id = v.agent_id AND m.message_id = v.message_id "
            f"WHERE v.agent_id = ? AND v.embedding_version = ? AND m.id <= ?{time_sql} ORDER BY m.id",
            [agent_id, version, top, *time_params],
        )
        if not found:
            return []
        if int(found[0][1]) != query.size:
            raise StoreValidationError(
                f"query vector has dimension {query.size}, message vectors of {version!r} have {found[0][1]}",
                field="vector",
            )
        matrix = np.frombuffer(b"".join(r[2] for r in found), dtype="<f4").reshape(len(found), -1)
        return fusion.cosine_top(query, [int(r[0]) for r in found], matrix.astype(np.float32), n)

    def _positions(self, agent_id: str, ids: Iterable[int], version: str | None) -> tuple[dict[int, int], set[int]]:
        """The conversation position (``seq``) of each of these messages of the agent, and which
        of them carry a vector of ``version`` (hybrid scores a missing one by the text score)."""
        seqs: dict[int, int] = {}
        embedded: set[int] = set()
        for part in chunked(sorted(ids)):
            marks = ",".join("?" * len(part))
            for row_id, seq, has_vector in self._db.query(
                "read recall hit positions",
                "SELECT m.id, m.seq, v.message_id IS NOT NULL FROM messages m LEFT JOIN message_vectors v "
                "ON v.agent_id = m.agent_id AND v.message_id = m.message_id AND v.embedding_version = ? "
                f"WHERE m.agent_id = ? AND m.id IN ({marks})",
                [version, agent_id, *part],
            ):
                seqs[int(row_id)] = int(seq)
                if has_vector:
                    embedded.add(int(row_id))
        return seqs, embedded

    def _hydrate_messages(self, agent_id: str, ids: Sequence[int]) -> dict[int, StoredMessage]:
        out: dict[int, StoredMessage] = {}
        for part in chunked(list(ids)):
            marks = ",".join("?" * len(part))
            for row in self._db.query(
                "read recall hits",
                f"SELECT {rows.MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? AND id IN ({marks})",
                [agent_id, *part],
            ):
                out[row["id"]] = rows.message(row)
        return out

    # --- archival ---------------------------------------------------------------------------
    def ingest_archival(self, chunks: Sequence[ArchivalChunk]) -> int:
        checked, dims = validation.chunk_batch(chunks)
        if not checked:
            return 0
        now = self._clock()
        with self._db.write("ingest archival chunks") as conn:
            for (metric, version), dim in dims.items():
                known = conn.execute(
                    "SELECT dimension FROM vector_spaces WHERE metric = ? AND embedding_version = ?",
                    (metric, version),
                ).fetchone()
                validation.space_dimension(metric, version, dim, None if known is None else known[0])
                conn.execute(
                    "INSERT OR IGNORE INTO vector_spaces (metric, dimension, embedding_version) VALUES (?, ?, ?)",
                    (metric, dim, version),
                )
            added = 0
            for c, vec in checked:
                inserted = conn.execute(
                    "INSERT INTO archival (agent_id, doc_id, chunk_index, embedding_version, "
                    "metric, dimension, embedding, text, model_id, char_start, char_end, source, "
                    "metadata, created_at, valid_until) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING RETURNING id",
                    (
                        c.agent_id,
                        c.doc_id,
                        c.chunk_index,
                        c.embedding_version,
                        c.metric,
                        len(vec),
                        vec.astype("<f4").tobytes(),
                        c.text,
                        c.model_id,
                        c.char_start,
                        c.char_end,
                        c.source,
                        rows.dumps(dict(c.metadata)),
                        c.created_at or now,
                        c.valid_until,
                    ),
                ).fetchone()
                if inserted is not None:
                    added += 1
                    _link_chunk(conn, c, now)
            self._fault("ingest_archival.before_commit")
        return added

    def search_archival(
        self,
        agent_id: str,
        vector: Sequence[float],
        k: int = 10,
        *,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
        n_probe: int | None = None,
        metric: str = "cosine",
        embedding_version: str | None = None,
    ) -> Page[ArchivalHit]:
        args = validation.archival_search(
            agent_id,
            vector,
            k,
            filters=filters,
            n_probe=n_probe,
            metric_name=metric,
            embedding_version=embedding_version,
        )
        probe = self._n_probe if args.n_probe is None else args.n_probe
        parsed = args.filters
        query = args.vector.astype(np.float32)  # what FAISS searches with, and what the cursor hashes
        spaces = self._spaces(metric, embedding_version, query.shape[0])
        key = fingerprint(
            "archival",
            agent_id,
            vector_digest(query),
            metric,
            embedding_version,
            probe,
            parsed.canonical(),
        )
        q = query.reshape(1, -1)

        tally = FilterTally()

        def rank(n: int, bound: int | None, exclude: frozenset[int]) -> tuple[list[tuple[int, float]], int]:
            return self._archival.rank(agent_id, spaces, q, n, parsed, probe, bound=bound, exclude=exclude, tally=tally)

        part = self._snapshots.page("archival", agent_id, key, k, cursor, rank)
        chunks = self._archival.hydrate(agent_id, [i for i, _ in part.items])
        hits = [ArchivalHit(chunks[i], s) for i, s in part.items if i in chunks]
        return Page(hits, part.next_cursor, SearchStats(part.offset, tally.judged, tally.dropped))

    def _spaces(self, metric: str, version: str | None, dimension: int) -> list[SpaceKey]:
        sql = "SELECT metric, dimension, embedding_version FROM vector_spaces WHERE metric = ?"
        params: list[Any] = [metric]
        if version is not None:
            sql += " AND embedding_version = ?"
            params.append(version)
        known = [SpaceKey(r[0], r[1], r[2]) for r in self._db.query("read vector spaces", sql, params)]
        return validation.matching_spaces(known, dimension, metric, version)

    def get_archival(self, agent_id: str, doc_id: str) -> list[ArchivalChunk]:
        validation.identifier("agent_id", agent_id)
        validation.identifier("doc_id", doc_id)
        found = self._db.query(
            "read a document's chunks",
            f"SELECT {rows.ARCHIVAL_COLUMNS} FROM archival WHERE agent_id = ? AND doc_id = ? "
            "ORDER BY chunk_index, embedding_version",
            (agent_id, doc_id),
        )
        return [rows.chunk(r) for r in found]

    # --- events -----------------------------------------------------------------------------
    def append_event(self, event: MemoryEvent) -> MemoryEvent:
        validation.event(event)
        event_id = semantics.event_id(event)
        created_at = self._now(event.created_at)
        with self._db.write("append an event") as conn:
            found = conn.execute(f"SELECT {rows.EVENT_COLUMNS} FROM events WHERE event_id = ?", (event_id,)).fetchone()
            if found is not None:
                return rows.event(found)
            conn.execute(
                "INSERT INTO events (event_id, agent_id, kind, payload, created_at, actor, "
                "idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    event_id,
                    event.agent_id,
                    event.kind,
                    rows.dumps(dict(event.payload)),
                    created_at,
                    event.actor,
                    event.idempotency_key,
                ),
            )
        return MemoryEvent(
            agent_id=event.agent_id,
            kind=event.kind,
            payload=json.loads(rows.dumps(dict(event.payload))),
            event_id=event_id,
            created_at=created_at,
            actor=event.actor,
            idempotency_key=event.idempotency_key,
        )

    def query_events(
        self,
        agent_id: str | None,
        kinds: Sequence[str] | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
        actor: str | None = None,
        idempotency_key: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[MemoryEvent]:
        f = validation.event_listing(
            agent_id, kinds, since, limit, until=until, actor=actor, idempotency_key=idempotency_key
        )
        key = fingerprint("events", agent_id, *f.key())
        where: list[str] = []
        params: list[Any] = []
        if agent_id is not None:
            where.append("agent_id = ?")
            params.append(agent_id)
        if f.kinds is not None:
            where.append(f"kind IN ({','.join('?' * len(f.kinds))})")
            params += f.kinds
        if f.since is not None:
            where.append("created_at >= ?")
            params.append(f.since)
        if f.until is not None:
            where.append("created_at < ?")
            params.append(f.until)
        if f.actor is not None:
            where.append("actor = ?")
            params.append(f.actor)
        if f.idempotency_key is not None:
            where.append("idempotency_key = ?")
            params.append(f.idempotency_key)
        if cursor is not None:
            # Keyset paging on (created_at, seq): an event appended later lands after the
            # position or is simply not part of this listing; nothing repeats or shifts.
            after_t, after_seq = paging.keyset_position(cursor, self._secret, key, "s", int)
            where.append("(created_at, seq) > (?, ?)")
            params += [after_t, after_seq]
        sql = f"SELECT {rows.EVENT_COLUMNS} FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_at, seq LIMIT ?"
        found = self._db.query("query events", sql, [*params, limit + 1])
        page = found[:limit]
        next_cursor = None
        if len(found) > limit:
            last = page[-1]
            next_cursor = paging.keyset_cursor(self._secret, key, last["created_at"], "s", last["seq"])
        return Page([rows.event(r) for r in page], next_cursor)

    # --- graph ------------------------------------------------------------------------------
    def add_edge(self, edge: Edge) -> None:
        validation.edge(edge)
        with self._db.write("add an edge") as conn:
            conn.execute(
                "INSERT OR IGNORE INTO edges (kind, src_coll, src_key, dst_coll, dst_key, "
                "agent_id, created_at, attributes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    edge.kind,
                    edge.src.collection,
                    edge.src.key,
                    edge.dst.collection,
                    edge.dst.key,
                    edge.agent_id,
                    self._now(edge.created_at),
                    rows.dumps(dict(edge.attributes)),
                ),
            )

    def traverse(
        self,
        start: NodeRef,
        kinds: Sequence[EdgeKind] | None = None,
        *,
        max_depth: int = 1,
        direction: str = "outbound",
    ) -> list[NodeRef]:
        wanted = validation.traversal(start, kinds, max_depth, direction)
        marks = ",".join("?" * len(wanted))
        queries = []
        if direction in ("outbound", "any"):
            queries.append(
                "SELECT dst_coll, dst_key FROM edges WHERE src_coll = ? AND src_key = ? "
                f"AND kind IN ({marks}) ORDER BY kind, dst_coll, dst_key"
            )
        if direction in ("inbound", "any"):
            queries.append(
                "SELECT src_coll, src_key FROM edges WHERE dst_coll = ? AND dst_key = ? "
                f"AND kind IN ({marks}) ORDER BY kind, src_coll, src_key"
            )
        seen = {start}
        reached: list[NodeRef] = []
        frontier = [start]
        with self._db.read("traverse the graph") as conn:
            for _ in range(max_depth):
                following: list[NodeRef] = []
                for node in frontier:
                    for sql in queries:
                        for coll, key in conn.execute(sql, (node.collection, node.key, *wanted)):
                            found = NodeRef(coll, key)
                            if found not in seen:
                                seen.add(found)
                                reached.append(found)
                                following.append(found)
                if not following:
                    break
                frontier = following
        return reached

    # --- maintenance ------------------------------------------------------------------------
    def expire(self, now: float) -> int:
        validation.finite("now", now)
        with self._db.write("expire messages") as conn:
            doomed = conn.execute(
                "SELECT id, agent_id, message_id, n_terms FROM messages "
                "WHERE expires_at IS NOT NULL AND expires_at < ?",
                (now,),
            ).fetchall()
            if doomed:
                ids = [(r["id"],) for r in doomed]
                _delete_node_edges(conn, [message_node(r["agent_id"], r["message_id"]) for r in doomed])
                conn.executemany("DELETE FROM messages WHERE id = ?", ids)
                conn.executemany(
                    "DELETE FROM message_vectors WHERE agent_id = ? AND message_id = ?",
                    [(r["agent_id"], r["message_id"]) for r in doomed],
                )
                conn.executemany("INSERT OR IGNORE INTO text_index_deletes (id) VALUES (?)", ids)
                meta_add(conn, META_TEXT_DOCS, -len(doomed))
                meta_add(conn, META_TEXT_TERMS, -sum(r["n_terms"] for r in doomed))
            conn.execute("DELETE FROM cursors WHERE expires_at < ?", (self._clock(),))
        if doomed:
            self._messages_written()
        return len(doomed)

    def health(self) -> Health:
        try:
            details = self._details()
        except StoreError as exc:
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
        self._text.refresh(generation)
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

    def rebuild_vector_indexes(self) -> None:
        """Drop the FAISS indexes (memory and disk); the next search rebuilds from SQLite."""
        self._vectors.rebuild()

    def close(self) -> None:
        self._indexer.stop()
        with contextlib.suppress(StoreError, OSError, ValueError, RuntimeError, sqlite3.Error):
            # Leave no committed message unindexed if we can help it (the next open would
            # catch up anyway).
            self._indexer.catch_up(0.0)
        self._vectors.save_all()
        self._db.close()
        if self._tempdir is not None:
            shutil.rmtree(self._tempdir, ignore_errors=True)
            self._tempdir = None

    def __enter__(self) -> EmbeddedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- helpers (run inside an open write transaction) -------------------------------------------
def _insert_messages(conn: sqlite3.Connection, batch: Sequence[StoredMessage], lengths: Sequence[int]) -> int:
    added, terms = 0, 0
    for m, n_terms in zip(batch, lengths, strict=True):
        inserted = conn.execute(
            "INSERT INTO messages (agent_id, message_id, seq, role, content, tokens, created_at, "
            "name, metadata, expires_at, n_terms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (agent_id, message_id) DO NOTHING RETURNING id",
            (
                m.agent_id,
                m.message_id,
                m.seq,
                m.role,
                m.content,
                m.tokens,
                m.created_at,
                m.name,
                rows.dumps(dict(m.metadata)),
                m.expires_at,
                n_terms,
            ),
        ).fetchone()
        if inserted is not None:
            added += 1
            terms += n_terms
    if added:
        meta_add(conn, META_TEXT_DOCS, added)
        meta_add(conn, META_TEXT_TERMS, terms)
    return added


def _insert_events(conn: sqlite3.Connection, events: Sequence[MemoryEvent], now: float) -> None:
    """Audit rows riding with another write; a replay finds them by event id and adds nothing."""
    conn.executemany(
        "INSERT OR IGNORE INTO events (event_id, agent_id, kind, payload, created_at, actor, "
        "idempotency_key) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                e.event_id,
                e.agent_id,
                e.kind,
                rows.dumps(dict(e.payload)),
                e.created_at or now,
                e.actor,
                e.idempotency_key,
            )
            for e in events
        ],
    )


def _link_chunk(conn: sqlite3.Connection, c: ArchivalChunk, now: float) -> None:
    """``derived_from`` edges between this chunk and its neighbours, whichever came first."""
    neighbours = conn.execute(
        "SELECT chunk_index FROM archival WHERE agent_id = ? AND doc_id = ? "
        "AND embedding_version = ? AND chunk_index IN (?, ?)",
        (c.agent_id, c.doc_id, c.embedding_version, c.chunk_index - 1, c.chunk_index + 1),
    ).fetchall()
    for (index,) in neighbours:
        later, earlier = max(index, c.chunk_index), min(index, c.chunk_index)
        src = chunk_node(c.agent_id, c.doc_id, later, c.embedding_version)
        dst = chunk_node(c.agent_id, c.doc_id, earlier, c.embedding_version)
        conn.execute(
            "INSERT OR IGNORE INTO edges (kind, src_coll, src_key, dst_coll, dst_key, agent_id, "
            "created_at, attributes) VALUES ('derived_from', ?, ?, ?, ?, ?, ?, '{}')",
            (src.collection, src.key, dst.collection, dst.key, c.agent_id, now),
        )


def _delete_node_edges(conn: sqlite3.Connection, nodes: Sequence[NodeRef]) -> None:
    pairs = [(n.collection, n.key) for n in nodes]
    conn.executemany("DELETE FROM edges WHERE src_coll = ? AND src_key = ?", pairs)
    conn.executemany("DELETE FROM edges WHERE dst_coll = ? AND dst_key = ?", pairs)
