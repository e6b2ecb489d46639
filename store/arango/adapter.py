"""The ArangoDB adapter of the store port.

Reads go through the read-only handle, writes through the read-write handle
(:mod:`store.arango.client`). Every query text comes from :mod:`store.arango.aql`. Multi-step
writes run in stream transactions that declare all their collections up front and are aborted on
any exception; the port's fault points (``fault_hook``) sit where the embedded adapter has them:

=========================  ===========================================================
``put_core``               ``put_core.before_commit``
``spool_messages``         ``spool_messages.before_commit``
``commit_eviction``        ``commit_eviction.after_recall_append``, ``commit_eviction.before_commit``
``ingest_archival``        ``ingest_archival.before_commit``
=========================  ===========================================================

Design notes (details in the modules named):

* Idempotency: every ``_key`` derives from the write's identity (:mod:`~store.arango.keys`);
  inserts use ``overwriteMode: "ignore"``.
* ``commit_eviction``: one transaction, split above a size cap (:mod:`~store.arango.eviction`).
* Recall: BM25 over ``messages_view`` plus a scan of messages the view may not hold yet
  (:func:`~store.arango.aql.recall_search`).
* Archival: exact search until a space's vector index exists, then ``APPROX_NEAR_*`` with
  post-filters and over-fetch (:func:`~store.arango.aql.archival_ann`); see
  :mod:`~store.arango.schema` for when the index is created.
* Cursors: ranked snapshots in ``cursors`` (:mod:`~store.arango.snapshots`); event listings use
  keyset paging.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from arango.exceptions import ArangoServerError, DocumentInsertError

from store import fusion, paging, semantics, validation
from store.arango import aql, documents, keys, names
from store.arango.aql import AqlQuery
from store.arango.client import Connection, connect
from store.arango.errors import (
    QUERY_VECTOR_INDEX_NOT_READY,
    QUERY_VECTOR_SEARCH_NOT_APPLIED,
    is_driver_failure,
    is_error,
    translate,
    translated,
)
from store.arango.eviction import (
    DEFAULT_CAP_BYTES,
    EvictionPlan,
    chunk_by_size,
    plan_eviction,
    size_of,
)
from store.arango.guard import GuardReport, run_guard
from store.arango.schema import (
    Schema,
    VectorState,
    bootstrap,
    create_vector_index,
    index_n_lists,
    load_schema,
    vector_index_info,
    vector_state,
)
from store.arango.snapshots import Ranked, Snapshots
from store.cursor import fingerprint, vector_digest
from store.errors import (
    NotFoundError,
    RevConflictError,
    StoreError,
    StoreUnavailableError,
    StoreValidationError,
)
from store.filters import ArchivalFilter
from store.port import FaultHook, MemoryStore
from store.types import (
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
    Metric,
    NodeRef,
    Page,
    RecallHit,
    SearchStats,
    StoredMessage,
    Summary,
    chunk_node,
    core_node,
)

log = logging.getLogger(__name__)

SECRET_KEY = "cursor_secret"
VECTOR_RECHECK_S = 30.0  # how often an "exact" space looks again for its index / threshold
ANN_GROWTH = 4  # over-fetch factor per retry of a post-filtered ANN query
_GUARDED: dict[str, GuardReport] = {}  # servers that passed the guard


@dataclass
class _SpaceState:
    state: VectorState
    n_lists: int | None
    checked_at: float
    error: str | None = None
    counted_at: float = float("-inf")


@dataclass(frozen=True)
class _Space:
    metric: Metric
    dimension: int
    embedding_version: str


class ArangoStore(MemoryStore):
    """ArangoDB 3.12.4+ behind the store port. Thread-safe: python-arango sessions are."""

    backend = "arango"

    def __init__(
        self,
        connection: Connection,
        *,
        schema: Schema | None = None,
        fault_hook: FaultHook | None = None,
        n_probe: int | None = None,
        retention: bool = False,
        guard: bool = True,
        probe_vector_index: bool = True,
        auto_vector_index: bool = True,
        vector_min_vectors: int | None = None,
        txn_cap_bytes: int = DEFAULT_CAP_BYTES,
        txn_max_bytes: int = 128 * 1024 * 1024,
        lock_timeout_s: int = 10,
        recall_lag_ms: int = 10_000,
        cursor_ttl_s: float = 600.0,
        cursor_max_results: int = 1000,
        ann_max_fetch: int = 65_536,
        expire_batch: int = 2_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Open the store on an existing connection; bootstraps the schema and runs the guard.

        Args:
            n_probe: IVF lists searched per query when the caller passes none; ``None`` uses
                each index's ``defaultNProbe`` (max(8, nLists/10)).
            retention: also create the TTL index on ``messages.expires_at``, so the server
                deletes expired messages by itself (``expire`` keeps working either way).
            guard: refuse servers below 3.12.4 or without the vector index option
                (:mod:`store.arango.guard`); ``probe_vector_index`` allows the probe fallback.
            auto_vector_index: create a space's vector index once it holds
                ``vector_min_vectors`` (default from the schema: 10 000) embedded documents.
            txn_cap_bytes: above this estimated size ``commit_eviction`` splits its writes;
                ``txn_max_bytes`` is the ``maxTransactionSize`` asked of the server.
            recall_lag_ms: how far back read-after-write recall scans what the view may lack.
        """
        validation.limit("cursor_max_results", cursor_max_results, maximum=100_000)
        validation.limit("recall_lag_ms", recall_lag_ms, maximum=3_600_000)
        validation.limit("expire_batch", expire_batch, maximum=1_000_000)
        if n_probe is not None:
            validation.limit("n_probe", n_probe, maximum=1 << 20)
        if not cursor_ttl_s > 0:
            raise StoreValidationError("cursor_ttl_s must be positive")
        self._conn = connection
        self._rw = connection.rw
        self._ro = connection.ro
        self._schema = schema or load_schema()
        self._spec = self._schema.vector
        self._fault_hook = fault_hook
        self._n_probe = n_probe
        self._auto_vector_index = auto_vector_index
        self._vector_threshold = vector_min_vectors if vector_min_vectors is not None else self._spec.threshold()
        self._cap = txn_cap_bytes
        self._txn_max = max(txn_max_bytes, txn_cap_bytes * 2)
        self._lock_timeout = lock_timeout_s
        self._lag_ms = recall_lag_ms
        self._max_results = cursor_max_results
        self._ann_max_fetch = ann_max_fetch
        self._expire_batch = expire_batch
        self._clock = clock
        self._spaces_lock = threading.Lock()
        self._space_states: dict[tuple[str, int], _SpaceState] = {}
        self.bootstrap_report = bootstrap(self._rw, self._schema, retention=retention)
        self.guard_report: GuardReport | None = None
        if guard:
            server = self._conn.endpoint or ",".join(self._conn.client.hosts)
            self.guard_report = _GUARDED.get(server)
            if self.guard_report is None:
                # The probe creates and drops a collection: once per server and process is
                # enough, the vector option cannot change without a restart.
                self.guard_report = run_guard(
                    self._rw,
                    self._conn.system(),
                    has_vector_index=self._has_any_vector_index(),
                    probe=probe_vector_index,
                )
                _GUARDED[server] = self.guard_report
        self._secret = self._load_secret()
        self._snapshots = Snapshots(self._ro, self._rw, self._secret, ttl_s=cursor_ttl_s, clock=clock)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        username: str | None = None,
        password: str | None = None,
        ro_username: str | None = None,
        ro_password: str | None = None,
        database: str | None = None,
        fault_hook: FaultHook | None = None,
        n_probe: int | None = None,
        create_database: bool = True,
        request_timeout: float | None = 60.0,
        connect_timeout: float | None = 5.0,
        uds_only: bool = False,
        client_factory: Callable[..., Any] | None = None,
        **options: Any,
    ) -> ArangoStore:
        """Connect (``arango+http://``, ``arango+https://``, ``arango+unix://``), bootstrap, guard.

        ``database`` wins over a database named in the URL (default ``vcm``); a missing database
        is created when ``create_database`` is true and the user may (through ``_system``).
        Other keyword arguments go to :meth:`__init__`.
        """
        conn = connect(
            url,
            username=username,
            password=password,
            ro_username=ro_username,
            ro_password=ro_password,
            database=database,
            request_timeout=request_timeout,
            connect_timeout=connect_timeout,
            create_database=create_database,
            uds_only=uds_only,
            client_factory=client_factory,
        )
        try:
            return cls(conn, fault_hook=fault_hook, n_probe=n_probe, **options)
        except BaseException:
            conn.close()
            raise

    # --- plumbing -------------------------------------------------------------------------------
    def _fault(self, point: str) -> None:
        semantics.fire_fault(self._fault_hook, point)

    @staticmethod
    def _run(db: Any, query: AqlQuery, operation: str) -> list[Any]:
        with translated(operation):
            cursor = db.aql.execute(query.text, bind_vars=query.bind_vars)
            return list(cast(Iterable[Any], cursor))

    @staticmethod
    def _get(db: Any, collection: str, key: str, operation: str) -> dict[str, Any] | None:
        with translated(operation):
            found = db.collection(collection).get(key)
        return cast(dict[str, Any], found) if isinstance(found, dict) else None

    @contextlib.contextmanager
    def _transaction(self, write: Sequence[str], operation: str) -> Iterator[Any]:
        """A stream transaction writing (and reading) ``write``; aborted on any error.

        The body commits by returning normally. All collections are declared up front: a
        stream transaction cannot add write collections later (reference §3.1).
        """
        with translated(operation):
            txn = self._rw.begin_transaction(
                write=list(write),  # write collections may also be read
                lock_timeout=self._lock_timeout,
                max_size=self._txn_max,
                allow_implicit=False,
            )
        try:
            yield txn
        except BaseException as exc:
            with contextlib.suppress(Exception):
                txn.abort_transaction()
            if isinstance(exc, Exception) and not isinstance(exc, StoreError) and is_driver_failure(exc):
                raise translate(exc, operation) from exc
            raise
        try:
            with translated(operation):
                txn.commit_transaction()
        except BaseException:
            with contextlib.suppress(Exception):
                txn.abort_transaction()
            raise

    def _load_secret(self) -> bytes:
        meta = self._rw.collection(names.META)
        with translated("read store settings"):
            with contextlib.suppress(DocumentInsertError):  # another process seeded it first
                meta.insert({"_key": SECRET_KEY, "value": secrets.token_hex(32)}, overwrite_mode="ignore")
            doc = meta.get(SECRET_KEY)
        if not isinstance(doc, dict) or not isinstance(doc.get("value"), str):
            raise StoreUnavailableError("the cursor secret in vcm_meta is missing or damaged")
        return bytes.fromhex(doc["value"])

    def _now(self, given: float = 0.0) -> float:
        return given if given else self._clock()

    # --- core memory ----------------------------------------------------------------------------
    def get_core(self, agent_id: str, block_id: str) -> CoreBlock:
        validation.identifier("agent_id", agent_id)
        validation.identifier("block_id", block_id)
        doc = self._get(self._ro, names.CORE, documents.block_key(agent_id, block_id), "get_core")
        if doc is None:
            raise NotFoundError(
                f"core block {block_id!r} of agent {agent_id!r} does not exist",
                agent_id=agent_id,
                block_id=block_id,
            )
        return documents.block_from_doc(doc)

    def list_core(self, agent_id: str) -> list[CoreBlock]:
        validation.identifier("agent_id", agent_id)
        return [documents.block_from_doc(d) for d in self._run(self._ro, aql.list_core(agent_id), "list_core")]

    def put_core(self, block: CoreBlockWrite, expected_rev: str | None, idempotency_key: str) -> CoreBlock:
        validation.core_write(block)
        validation.rev("expected_rev", expected_rev, optional=True)
        validation.identifier("idempotency_key", idempotency_key)
        content = semantics.core_write_fingerprint(block)
        idem_key = keys.idempotency_key(block.agent_id, "core", idempotency_key)
        seen = self._get(self._ro, names.IDEMPOTENCY, idem_key, "put_core")
        if seen is not None:
            return semantics.replayed_core_write(seen.get("fingerprint"), seen["result"], content, idempotency_key)
        key = documents.block_key(block.agent_id, block.block_id)
        try:
            with self._transaction(names.PUT_CORE_WRITE, "put_core") as txn:
                seen = txn.collection(names.IDEMPOTENCY).get(idem_key)
                if seen is not None:
                    return semantics.replayed_core_write(
                        seen.get("fingerprint"), seen["result"], content, idempotency_key
                    )
                current = txn.collection(names.CORE).get(key)
                current_rev = None if current is None else current["_rev"]
                if current_rev != expected_rev:
                    raise semantics.rev_conflict(f"core block {block.block_id!r}", expected_rev, current_rev)
                now = self._clock()
                doc = documents.block_doc(block, now)
                if current is None:
                    meta = txn.collection(names.CORE).insert(doc)
                else:
                    meta = txn.collection(names.CORE).replace({**doc, "_rev": expected_rev}, check_rev=True)
                stored = documents.block_from_doc(doc, rev=meta["_rev"])
                txn.collection(names.IDEMPOTENCY).insert(
                    {
                        "_key": idem_key,
                        "agent_id": block.agent_id,
                        "scope": "core",
                        "key": idempotency_key,
                        "fingerprint": content,
                        "result": semantics.core_block_to_json(stored),
                        "created_at": now,
                    }
                )
                self._fault("put_core.before_commit")
            return stored
        except RevConflictError:
            # A concurrent call with the same key may have won; its answer is ours.
            seen = self._get(self._ro, names.IDEMPOTENCY, idem_key, "put_core")
            if seen is not None:
                return semantics.replayed_core_write(seen.get("fingerprint"), seen["result"], content, idempotency_key)
            raise

    def delete_core(self, agent_id: str, block_id: str, expected_rev: str) -> None:
        validation.identifier("agent_id", agent_id)
        validation.block_id(block_id)
        validation.rev("expected_rev", expected_rev, optional=False)
        key = documents.block_key(agent_id, block_id)
        vertex = keys.vertex_id(core_node(agent_id, block_id))
        with self._transaction((names.CORE, *names.EDGE_COLLECTIONS), "delete_core") as txn:
            current = txn.collection(names.CORE).get(key)
            if current is None:
                raise NotFoundError(
                    f"core block {block_id!r} of agent {agent_id!r} does not exist",
                    agent_id=agent_id,
                    block_id=block_id,
                )
            if current["_rev"] != expected_rev:
                raise semantics.rev_conflict(f"core block {block_id!r}", expected_rev, current["_rev"])
            txn.collection(names.CORE).delete({"_key": key, "_rev": expected_rev}, check_rev=True)
            for edges in names.EDGE_COLLECTIONS:
                self._run(txn, aql.remove_edges_of(edges, [vertex]), "delete_core")

    def get_summary(self, agent_id: str) -> Summary | None:
        validation.identifier("agent_id", agent_id)
        doc = self._get(self._ro, names.CORE, documents.summary_key(agent_id), "get_summary")
        return documents.summary_from_doc(doc) if doc is not None else None

    # --- messages / recall ----------------------------------------------------------------------
    def spool_messages(self, messages: Sequence[StoredMessage], *, events: Sequence[MemoryEvent] = ()) -> int:
        batch = semantics.distinct(validation.messages(messages))
        audit = [self._event_doc(e) for e in validation.keyed_events(events)]
        if not batch and not audit:
            return 0
        docs = [documents.message_doc(m) for m in batch]
        added = 0
        # Idempotent chunks under the size cap; a retry after a partial failure completes it.
        # The audit rows go with the last chunk, so they land once every message has.
        parts = _chunks_by_size(docs, self._cap) or [[]]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            collections = (names.MESSAGES, names.EVENTS) if last and audit else (names.MESSAGES,)
            with self._transaction(collections, "spool_messages") as txn:
                rows = (
                    self._run(txn, aql.insert_ignore(names.MESSAGES, part, stamp_ingested=True), "spool_messages")
                    if part
                    else []
                )
                if last and audit:
                    self._run(txn, aql.insert_ignore(names.EVENTS, audit), "spool_messages")
                self._fault("spool_messages.before_commit")
            added += sum(1 for r in rows if r is not None)
        return added

    def _event_doc(self, event: MemoryEvent) -> dict[str, Any]:
        created_at = self._now(event.created_at)
        return documents.event_doc(event, semantics.event_id(event), created_at)

    def get_messages(self, agent_id: str, message_ids: Sequence[str]) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        if isinstance(message_ids, str) or not isinstance(message_ids, Sequence):
            raise StoreValidationError("message_ids must be a sequence of strings")
        wanted = [validation.identifier("message_id", m) for m in message_ids]
        if not wanted:
            return []
        ids = [f"{names.MESSAGES}/{documents.message_key(agent_id, m)}" for m in dict.fromkeys(wanted)]
        found = {
            d["message_id"]: documents.message_from_doc(d)
            for d in self._run(self._ro, aql.documents(ids, agent_id), "get_messages")
        }
        return [found[m] for m in wanted if m in found]

    def list_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 100) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        q = aql.list_messages(agent_id, validation.after_seq(after_seq), validation.limit("limit", limit))
        return [documents.message_from_doc(d) for d in self._run(self._ro, q, "list_messages")]

    def count_messages(self, agent_id: str) -> int:
        validation.identifier("agent_id", agent_id)
        rows = self._run(self._ro, aql.count_messages(agent_id), "count_messages")
        return int(rows[0]) if rows else 0

    def commit_eviction(self, commit: EvictionCommit) -> EvictionResult:
        validation.eviction(commit)
        now = self._clock()
        plan = plan_eviction(commit, now=now, cap_bytes=self._cap)
        done = self._get(self._ro, names.BATCHES, plan.marker_key, "commit_eviction")
        if done is not None:
            return _replayed_batch(commit, done)
        if plan.split:
            # Fail a stale rev before writing anything, then pre-write the messages (see
            # store.arango.eviction: replay-safe, indistinguishable from spooling).
            current = self._get(self._ro, names.CORE, plan.summary_key, "commit_eviction")
            current_rev = None if current is None else current["_rev"]
            if current_rev != commit.expected_summary_rev:
                raise semantics.rev_conflict(
                    f"the summary of agent {commit.agent_id!r}", commit.expected_summary_rev, current_rev
                )
            for part in plan.pre_writes:
                self._run(
                    self._rw,
                    aql.insert_ignore(names.MESSAGES, part, stamp_ingested=True),
                    "commit_eviction",
                )
        try:
            return self._commit_final(commit, plan, now)
        except RevConflictError:
            done = self._get(self._ro, names.BATCHES, plan.marker_key, "commit_eviction")
            if done is not None:  # a concurrent replay committed it first
                return _replayed_batch(commit, done)
            raise

    def _commit_final(self, commit: EvictionCommit, plan: EvictionPlan, now: float) -> EvictionResult:
        agent = commit.agent_id
        with self._transaction(names.EVICTION_WRITE, "commit_eviction") as txn:
            done = txn.collection(names.BATCHES).get(plan.marker_key)
            if done is not None:
                return _replayed_batch(commit, done)
            core = txn.collection(names.CORE)
            current = core.get(plan.summary_key)
            current_rev = None if current is None else current["_rev"]
            if current_rev != commit.expected_summary_rev:
                raise semantics.rev_conflict(
                    f"the summary of agent {agent!r}", commit.expected_summary_rev, current_rev
                )
            if plan.final_messages:
                self._run(
                    txn,
                    aql.insert_ignore(names.MESSAGES, plan.final_messages, stamp_ingested=True),
                    "commit_eviction",
                )
            self._run(txn, aql.insert_ignore(names.RECALL_LOG, plan.edges), "commit_eviction")
            self._fault("commit_eviction.after_recall_append")
            summary = documents.summary_doc(agent, commit.summary_text, commit.summary_tokens, commit.batch_id, now)
            if current is None:
                meta = core.insert(summary)
            else:
                meta = core.replace({**summary, "_rev": commit.expected_summary_rev}, check_rev=True)
            rev = str(meta["_rev"])
            event = MemoryEvent(
                agent_id=agent,
                kind="evict",
                payload=semantics.evict_event_payload(commit, plan.messages, rev),
                event_id=plan.event_id,
                created_at=now,
                actor=commit.actor,
                idempotency_key=plan.event_id,
            )
            extra = [self._event_doc(e) for e in commit.events]
            self._run(
                txn,
                aql.insert_ignore(names.EVENTS, [documents.event_doc(event, plan.event_id, now), *extra]),
                "commit_eviction",
            )
            txn.collection(names.BATCHES).insert(
                {
                    "_key": plan.marker_key,
                    "agent_id": agent,
                    "batch_id": commit.batch_id,
                    "summary_rev": rev,
                    "messages_committed": len(plan.messages),
                    "event_id": plan.event_id,
                    "committed_at": now,
                }
            )
            self._fault("commit_eviction.before_commit")
        return EvictionResult(agent, commit.batch_id, rev, len(plan.messages), False)

    def committed_batches(self, agent_id: str) -> list[int]:
        validation.identifier("agent_id", agent_id)
        return [int(b) for b in self._run(self._ro, aql.committed_batches(agent_id), "committed_batches")]

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
        if cursor is not None:
            part = self._snapshots.next("recall", agent_id, key, cursor, limit)
        else:
            ranked = self._rank_recall(agent_id, query, limit + 1, since, until)
            if len(ranked) > limit:
                # More than a page: rank once, deep, and page from that snapshot.
                ranked = self._rank_recall(agent_id, query, self._max_results, since, until)
            part = self._snapshots.first("recall", agent_id, key, ranked, limit)
        ids = [f"{names.MESSAGES}/{k}" for k, _ in part.items]
        found = {d["_key"]: d for d in self._run(self._ro, aql.documents(ids, agent_id), "search_recall")}
        hits = [RecallHit(documents.message_from_doc(found[k]), s) for k, s in part.items if k in found]
        return Page(hits, part.next_cursor)

    def _rank_recall(self, agent_id: str, query: str, n: int, since: float | None, until: float | None) -> Ranked:
        q = aql.recall_search(agent_id, query, fetch=n, since=since, until=until, lag_ms=self._lag_ms)
        return [(str(r["key"]), float(r["score"])) for r in self._run(self._ro, q, "search_recall")]

    def put_message_vectors(
        self, agent_id: str, vectors: Sequence[tuple[str, Sequence[float]]], embedding_version: str
    ) -> int:
        validation.identifier("agent_id", agent_id)
        checked, dim = fusion.unit_vectors(vectors, embedding_version)
        if not checked:
            return 0
        for known in self._run(self._ro, aql.recall_vector_versions(agent_id), "put_message_vectors"):
            if known["version"] == embedding_version and int(known["dimension"]) != dim:
                raise StoreValidationError(
                    f"vectors of {embedding_version!r} have dimension {known['dimension']}, not {dim}",
                    field="vector",
                )
        items = [(documents.message_key(agent_id, mid), vec.tolist()) for mid, vec in checked]
        return len(
            self._run(self._rw, aql.put_message_vectors(agent_id, items, embedding_version), "put_message_vectors")
        )

    def message_vector_ids(self, agent_id: str, message_ids: Sequence[str], embedding_version: str) -> set[str]:
        validation.identifier("agent_id", agent_id)
        keys = {documents.message_key(agent_id, str(m)): str(m) for m in message_ids}
        if not keys:
            return set()
        q = aql.message_vector_keys(agent_id, list(keys), embedding_version)
        return {keys[str(k)] for k in self._run(self._ro, q, "message_vector_ids") if str(k) in keys}

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
        key = fingerprint("recall-" + mode, agent_id, query, vector_digest(q), embedding_version, since, until)
        if cursor is not None:
            part = self._snapshots.next("recall-" + mode, agent_id, key, cursor, limit)
        else:
            # Ranked once, as deep as paging can go, so every page comes from one snapshot.
            version = embedding_version or self._main_vector_version(agent_id, q.size)
            depth = self._max_results
            vec = self._rank_vectors(agent_id, q, version, depth, since, until)
            if mode == "vector":
                ranked: Ranked = vec
            else:
                text = self._rank_recall(agent_id, query, depth, since, until)
                seq, embedded = self._positions(agent_id, {k for k, _ in text} | {k for k, _ in vec}, version)
                unembedded = {k for k, _ in text} - embedded
                ranked = fusion.hybrid(text, vec, seq, unembedded=unembedded)[:depth]
            part = self._snapshots.first("recall-" + mode, agent_id, key, ranked, limit)
        ids = [f"{names.MESSAGES}/{k}" for k, _ in part.items]
        found = {d["_key"]: d for d in self._run(self._ro, aql.documents(ids, agent_id), "search_recall")}
        hits = [RecallHit(documents.message_from_doc(found[k]), s) for k, s in part.items if k in found]
        return Page(hits, part.next_cursor)

    def _positions(self, agent_id: str, keys: set[str], version: str | None) -> tuple[dict[str, int], set[str]]:
        """Each hit's ``seq``, and which hits carry a recall vector of ``version``: one query."""
        if not keys:
            return {}, set()
        rows = self._run(self._ro, aql.recall_positions(agent_id, sorted(keys), version), "search_recall")
        seq = {str(r["key"]): int(r["seq"]) for r in rows}
        return seq, {str(r["key"]) for r in rows if r.get("embedded")}

    def _main_vector_version(self, agent_id: str, dimension: int) -> str | None:
        versions = self._run(self._ro, aql.recall_vector_versions(agent_id), "search_recall")
        if versions and int(versions[0]["dimension"]) != dimension:
            raise StoreValidationError(
                f"query vector has dimension {dimension}, message vectors have {versions[0]['dimension']}",
                field="vector",
            )
        return str(versions[0]["version"]) if versions else None

    def _rank_vectors(
        self, agent_id: str, q: Any, version: str | None, n: int, since: float | None, until: float | None
    ) -> Ranked:
        """Exact cosine (the fallback form; per-agent recall corpora are small). An index on
        ``messages.recall_emb`` would use :func:`aql.recall_vector_ann` instead."""
        if version is None:
            return []
        query = aql.recall_vector_exact(agent_id, q.tolist(), version=version, fetch=n, since=since, until=until)
        return [(str(r["key"]), float(r["score"])) for r in self._run(self._ro, query, "search_recall")]

    # --- archival -------------------------------------------------------------------------------
    def ingest_archival(self, chunks: Sequence[ArchivalChunk]) -> int:
        checked, dims = validation.chunk_batch(chunks)
        if not checked:
            return 0
        known: dict[tuple[str, str], int] = {(s.metric, s.embedding_version): s.dimension for s in self._spaces()}
        for (metric, version), dim in dims.items():
            validation.space_dimension(metric, version, dim, known.get((metric, version)))
        now = self._clock()
        docs = [documents.chunk_doc(c, vec.tolist(), now) for c, vec in checked]
        write = (names.ARCHIVAL, names.DERIVED_FROM, names.META)
        with self._transaction(write, "ingest_archival") as txn:
            new_spaces = [
                _space_doc(metric, dim, version)
                for (metric, version), dim in dims.items()
                if (metric, version) not in known
            ]
            if new_spaces:
                self._run(txn, aql.insert_ignore(names.META, new_spaces), "ingest_archival")
                stored: dict[tuple[str, str], int] = {
                    (s.metric, s.embedding_version): s.dimension for s in self._spaces(txn)
                }
                for (metric, version), dim in dims.items():  # a concurrent first writer wins
                    validation.space_dimension(metric, version, dim, stored.get((metric, version)))
            inserted = {r for r in self._run(txn, aql.insert_ignore(names.ARCHIVAL, docs), "ingest_archival") if r}
            new_chunks = [c for (c, _), d in zip(checked, docs, strict=True) if d["_key"] in inserted]
            self._link_chunks(txn, new_chunks, now)
            self._fault("ingest_archival.before_commit")
        if self._auto_vector_index:
            for metric, dim in sorted({(m, d) for (m, _version), d in dims.items()}):
                with contextlib.suppress(StoreError):  # the index is an optimisation; never fail ingest
                    self.ensure_vector_index(cast(Metric, metric), dim)
        return len(inserted)

    def _link_chunks(self, txn: Any, new_chunks: Sequence[ArchivalChunk], now: float) -> None:
        """``derived_from`` edges between each new chunk and its existing neighbours, later ->
        earlier, whichever of the two arrived first (as the embedded adapter links them)."""
        if not new_chunks:
            return
        candidates: list[tuple[str, NodeRef, NodeRef, str]] = []  # (neighbour id, later, earlier, agent)
        for c in new_chunks:
            me = chunk_node(c.agent_id, c.doc_id, c.chunk_index, c.embedding_version)
            for index in (c.chunk_index - 1, c.chunk_index + 1):
                if index < 0:
                    continue
                other = chunk_node(c.agent_id, c.doc_id, index, c.embedding_version)
                later, earlier = (me, other) if c.chunk_index > index else (other, me)
                candidates.append((keys.vertex_id(other), later, earlier, c.agent_id))
        ids = sorted({vertex for vertex, _, _, _ in candidates})
        existing = {d["_id"] for d in self._run(txn, aql.documents(ids), "ingest_archival")}
        edges = {
            keys.edge_key("derived_from", later, earlier): documents.edge_doc(
                Edge("derived_from", later, earlier, agent, now), now
            )
            for vertex, later, earlier, agent in candidates
            if vertex in existing
        }
        if not edges:
            return
        self._run(txn, aql.insert_ignore(names.DERIVED_FROM, list(edges.values())), "ingest_archival")

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
            parse=aql.parse_filters,
        )
        space_metric = cast(Metric, metric)
        probe = self._n_probe if args.n_probe is None else args.n_probe
        parsed = args.filters
        query: list[float] = args.vector.tolist()
        if not self._matching_spaces(space_metric, embedding_version, len(query)):
            return Page([], None)
        key = fingerprint(
            "archival",
            agent_id,
            vector_digest(query),
            metric,
            embedding_version,
            probe,
            parsed.canonical(),
        )
        if cursor is not None:
            part = self._snapshots.next("archival", agent_id, key, cursor, k)
        else:
            ranked = self._rank_archival(agent_id, query, space_metric, k + 1, parsed, probe, embedding_version)
            if len(ranked) > k:
                ranked = self._rank_archival(
                    agent_id, query, space_metric, self._max_results, parsed, probe, embedding_version
                )
            part = self._snapshots.first("archival", agent_id, key, ranked, k)
        ids = [f"{names.ARCHIVAL}/{key_}" for key_, _ in part.items]
        found = {d["_key"]: d for d in self._run(self._ro, aql.documents(ids, agent_id), "search_archival")}
        hits = [ArchivalHit(documents.chunk_from_doc(found[k_]), s) for k_, s in part.items if k_ in found]
        # The post-filters run inside AQL, so only the page depth is known here.
        return Page(hits, part.next_cursor, SearchStats(part.offset))

    def _rank_archival(
        self,
        agent_id: str,
        query: list[float],
        metric: Metric,
        wanted: int,
        filters: ArchivalFilter,
        n_probe: int | None,
        embedding_version: str | None,
    ) -> Ranked:
        dim = len(query)
        now = self._clock()
        state = self._space_state(metric, dim)
        if state.state == "ivf":
            probe = n_probe or (self._spec.default_n_probe(state.n_lists) if state.n_lists else None) or 8
            fetch = max(wanted * ANN_GROWTH, 64)
            try:
                while True:
                    q = aql.archival_ann(
                        agent_id,
                        query,
                        metric=metric,
                        dimension=dim,
                        fetch=fetch,
                        wanted=wanted,
                        n_probe=probe,
                        filters=filters,
                        embedding_version=embedding_version,
                        now=now,
                    )
                    rows = self._run_vector(q)
                    row: dict[str, Any] = rows[0] if rows else {"candidates": 0, "hits": []}
                    hits = [(str(h["key"]), float(h["score"])) for h in row["hits"]]
                    exhausted = int(row["candidates"]) < fetch  # the probed lists gave all they had
                    if len(hits) >= wanted or exhausted:
                        return hits
                    if fetch >= self._ann_max_fetch:
                        break  # filters keep too few of the global neighbours: go exact
                    fetch = min(fetch * ANN_GROWTH, self._ann_max_fetch)
            except _VectorIndexUnusable as exc:
                log.warning("vector index of %s/%d not usable (%s); using exact search", metric, dim, exc)
                self._forget_space_state(metric, dim)
        q = aql.archival_exact(
            agent_id,
            query,
            metric=metric,
            dimension=dim,
            wanted=wanted,
            filters=filters,
            embedding_version=embedding_version,
            now=now,
        )
        return [(str(r["key"]), float(r["score"])) for r in self._run(self._ro, q, "search_archival")]

    def _run_vector(self, query: AqlQuery) -> list[Any]:
        try:
            cursor = self._ro.aql.execute(query.text, bind_vars=query.bind_vars)
            return list(cast(Iterable[Any], cursor))
        except ArangoServerError as exc:
            if is_error(exc, QUERY_VECTOR_SEARCH_NOT_APPLIED, QUERY_VECTOR_INDEX_NOT_READY):
                raise _VectorIndexUnusable(str(exc)) from exc
            raise translate(exc, "search_archival") from exc
        except Exception as exc:
            if is_driver_failure(exc):
                raise translate(exc, "search_archival") from exc
            raise

    def get_archival(self, agent_id: str, doc_id: str) -> list[ArchivalChunk]:
        validation.identifier("agent_id", agent_id)
        validation.identifier("doc_id", doc_id)
        rows = self._run(self._ro, aql.archival_document(agent_id, doc_id), "get_archival")
        chunks = [documents.chunk_from_doc(d) for d in rows]
        return sorted(chunks, key=lambda c: (c.chunk_index, c.embedding_version))

    # --- vector spaces and their indexes --------------------------------------------------------
    def _spaces(self, db: Any = None) -> list[_Space]:
        rows = self._run(db if db is not None else self._ro, aql.vector_spaces(), "read vector spaces")
        return [_Space(cast(Metric, r["metric"]), int(r["dimension"]), str(r["embedding_version"])) for r in rows]

    def _matching_spaces(self, metric: Metric, version: str | None, dimension: int) -> list[_Space]:
        known = [
            s for s in self._spaces() if s.metric == metric and (version is None or s.embedding_version == version)
        ]
        return validation.matching_spaces(known, dimension, metric, version)

    def _has_any_vector_index(self) -> bool:
        with translated("list indexes"):
            indexes = self._rw.collection(self._spec.collection).indexes()
        return any(i.get("type") == "vector" for i in cast(list[dict[str, Any]], indexes))

    def _space_state(self, metric: Metric, dimension: int) -> _SpaceState:
        with self._spaces_lock:
            cached = self._space_states.get((metric, dimension))
        now = time.monotonic()
        if cached is not None and (cached.state == "ivf" or now - cached.checked_at < VECTOR_RECHECK_S):
            return cached
        info = vector_index_info(self._ro, self._spec, metric, dimension)
        state = _SpaceState(vector_state(info), index_n_lists(info), now)
        if cached is not None:
            state.counted_at, state.error = cached.counted_at, cached.error
        with self._spaces_lock:
            self._space_states[(metric, dimension)] = state
        return state

    def _forget_space_state(self, metric: Metric, dimension: int) -> None:
        with self._spaces_lock:
            self._space_states[(metric, dimension)] = _SpaceState("exact", None, time.monotonic())

    def vector_index_state(self, metric: Metric, dimension: int) -> VectorState:
        """``"exact"`` until the space's vector index exists and is trained, then ``"ivf"``."""
        return self._space_state(metric, dimension).state

    def ensure_vector_index(self, metric: Metric, dimension: int, *, force: bool = False) -> VectorState:
        """Create the space's vector index once it holds enough vectors (``force``: now).

        DDL, so it runs outside any transaction; training happens on the documents present
        (reference §1.3). A concurrent creator's index is reused (same name). Counting the
        space's vectors scans the collection, so below the threshold it is repeated at most
        every ``VECTOR_RECHECK_S`` per process, and skipped while the whole collection is
        smaller than the threshold (a constant-time count).
        """
        state = self._space_state(metric, dimension)
        if state.state == "ivf":
            return "ivf"
        needed = max(self._spec.min_lists, 1) if force else max(self._vector_threshold, 1)
        now = time.monotonic()
        if not force and now - state.counted_at < VECTOR_RECHECK_S:
            return "exact"
        state.counted_at = now
        total = self._run(self._ro, aql.collection_count(names.ARCHIVAL), "ensure_vector_index")
        if total and int(total[0]) < needed:
            return "exact"
        rows = self._run(self._ro, aql.count_vectors(metric, dimension), "ensure_vector_index")
        n = int(rows[0]) if rows else 0
        if n < needed:
            return "exact"
        info = vector_index_info(self._rw, self._spec, metric, dimension)
        if info is None:
            try:
                create_vector_index(self._rw, self._spec, metric, dimension, n)
            except StoreError as exc:
                if vector_index_info(self._rw, self._spec, metric, dimension) is None:
                    log.warning("creating the vector index of %s/%d failed: %s", metric, dimension, exc)
                    state.error = exc.message
                    raise
            info = vector_index_info(self._rw, self._spec, metric, dimension)
        fresh = _SpaceState(vector_state(info), index_n_lists(info), time.monotonic(), counted_at=now)
        with self._spaces_lock:
            self._space_states[(metric, dimension)] = fresh
        return fresh.state

    # --- events ---------------------------------------------------------------------------------
    def append_event(self, event: MemoryEvent) -> MemoryEvent:
        validation.event(event)
        event_id = semantics.event_id(event)
        created_at = self._now(event.created_at)
        payload = json.loads(validation.json_mapping("payload", event.payload))  # as it will read back
        doc = documents.event_doc(replace(event, payload=payload), event_id, created_at)
        rows = self._run(self._rw, aql.insert_ignore(names.EVENTS, [doc]), "append_event")
        if rows and rows[0] is not None:
            return documents.event_from_doc(doc)
        existing = self._get(self._rw, names.EVENTS, doc["_key"], "append_event")
        if existing is None:  # removed between the two calls; what we tried to write is the answer
            return documents.event_from_doc(doc)
        return documents.event_from_doc(existing)

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
        after: tuple[float, str] | None = None
        if cursor is not None:
            # Keyset paging on (created_at, _key): an event appended later lands after the
            # position or is not part of this listing; nothing repeats or shifts.
            after = paging.keyset_position(cursor, self._secret, key, "id", str)
        q = aql.events_page(
            agent_id,
            f.kinds,
            since=f.since,
            until=f.until,
            actor=f.actor,
            idempotency_key=f.idempotency_key,
            after=after,
            limit=limit + 1,
        )
        found = self._run(self._ro, q, "query_events")
        page = found[:limit]
        next_cursor = None
        if len(found) > limit:
            last = page[-1]
            next_cursor = paging.keyset_cursor(self._secret, key, last["created_at"], "id", last["_key"])
        return Page([documents.event_from_doc(d) for d in page], next_cursor)

    # --- graph ----------------------------------------------------------------------------------
    def add_edge(self, edge: Edge) -> None:
        validation.edge(edge)
        doc = documents.edge_doc(edge, self._clock())
        self._run(self._rw, aql.insert_ignore(edge.kind, [doc]), "add_edge")

    def traverse(
        self,
        start: NodeRef,
        kinds: Sequence[EdgeKind] | None = None,
        *,
        max_depth: int = 1,
        direction: str = "outbound",
    ) -> list[NodeRef]:
        wanted = validation.traversal(start, kinds, max_depth, direction)
        start_id = keys.vertex_id(start)
        q = aql.traverse(start_id, list(wanted), max_depth=max_depth, direction=cast(aql.Direction, direction))
        paths = self._run(self._ro, q, "traverse")
        return order_traversal(start, start_id, paths)

    # --- maintenance ----------------------------------------------------------------------------
    def expire(self, now: float) -> int:
        validation.finite("now", now)
        removed = 0
        while True:
            with self._transaction((names.MESSAGES, *names.EDGE_COLLECTIONS), "expire") as txn:
                ids = [str(i) for i in self._run(txn, aql.expire_messages(now, self._expire_batch), "expire")]
                if ids:
                    for edges in names.EDGE_COLLECTIONS:
                        self._run(txn, aql.remove_edges_of(edges, ids), "expire")
            removed += len(ids)
            if len(ids) < self._expire_batch:
                break
        with contextlib.suppress(StoreError):  # housekeeping only
            self._run(self._rw, aql.purge_cursors(self._clock()), "expire")
        return removed

    def health(self) -> Health:
        try:
            details = self._details()
        except StoreError as exc:
            return Health(False, self.backend, {"database": self._conn.database, "error": exc.message})
        return Health(True, self.backend, details)

    def _details(self) -> dict[str, Any]:
        with translated("health"):
            version = str(self._ro.version())
        spaces = []
        for s in self._spaces():
            st = self._space_state(s.metric, s.dimension)
            spaces.append(
                {
                    "metric": s.metric,
                    "dimension": s.dimension,
                    "embedding_version": s.embedding_version,
                    "kind": st.state,
                    "n_lists": st.n_lists,
                    "error": st.error,
                }
            )
        return {
            "database": self._conn.database,
            "server_version": version,
            "vector_index": "ivf" if spaces and all(s["kind"] == "ivf" for s in spaces) else "exact",
            "vector_spaces": spaces,
            "vector_threshold": self._vector_threshold,
            "n_probe": self._n_probe,
            "guard": None
            if self.guard_report is None
            else {
                "vector_index_option": self.guard_report.vector_index,
                "detected_by": self.guard_report.detected_by,
                "warnings": [p.message for p in self.guard_report.problems if not p.fatal],
            },
        }

    def stats(self, agent_id: str | None = None) -> dict[str, Any]:
        if agent_id is not None:
            validation.identifier("agent_id", agent_id)
        rows = self._run(self._ro, aql.stats(agent_id), "stats")
        counts = {k: int(v or 0) for k, v in (rows[0] if rows else {}).items()}
        out: dict[str, Any] = {"backend": self.backend, "agent_id": agent_id, **counts}
        if agent_id is None:
            out.update(self._details())
        return out

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ArangoStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _VectorIndexUnusable(Exception):
    """APPROX_NEAR could not use the index (1554: not applied, 1555: not trained yet)."""


# --- helpers --------------------------------------------------------------------------------------
def order_traversal(start: NodeRef, start_id: str, paths: Sequence[Any]) -> list[NodeRef]:
    """Reached refs, breadth first, in the embedded adapter's order.

    Each path is the list of edges ``{f, t, k, src, dst}`` from the start to one newly reached
    vertex. Vertices are rebuilt from the edges (not from ``v``, which is null for refs without
    a document). Within one depth the order is: parent's position, outbound before inbound,
    then edge kind, collection and key.
    """
    position: dict[str, int] = {start_id: -1}
    ref_of: dict[str, NodeRef] = {start_id: start}
    by_depth: dict[int, list[tuple[tuple[Any, ...], str, NodeRef]]] = {}
    for path in paths:
        if not isinstance(path, list) or not path:
            continue
        current = start_id
        parent = start_id
        ref: NodeRef | None = None
        outbound = True
        kind = ""
        for e in path:
            parent = current
            if e.get("f") == current:
                current, ref, outbound = e.get("t"), documents.ref_from_pair(e.get("dst")), True
            else:
                current, ref, outbound = e.get("f"), documents.ref_from_pair(e.get("src")), False
            kind = str(e.get("k") or "")
        if not isinstance(current, str) or current in ref_of:
            continue
        if ref is None:  # an edge written without refs: fall back to the document id
            collection, _, key = current.partition("/")
            ref = NodeRef(cast(Any, collection), key)
        by_depth.setdefault(len(path), []).append(((parent, not outbound, kind), current, ref))
    out: list[NodeRef] = []
    for depth in sorted(by_depth):
        level = by_depth[depth]
        level.sort(
            key=lambda item: (
                position.get(item[0][0], len(position)),
                item[0][1],
                item[0][2],
                item[2].collection,
                item[2].key,
            )
        )
        for _, vertex, ref in level:
            if vertex in ref_of:
                continue
            ref_of[vertex] = ref
            position[vertex] = len(out)
            out.append(ref)
    return [r for r in out if r != start]


def _replayed_batch(commit: EvictionCommit, done: Mapping[str, Any]) -> EvictionResult:
    return EvictionResult(
        commit.agent_id, commit.batch_id, str(done["summary_rev"]), int(done["messages_committed"]), True
    )


def _space_doc(metric: str, dimension: int, version: str) -> dict[str, Any]:
    return {
        "_key": keys.doc_key("space", metric, version),
        "kind": "vector_space",
        "metric": metric,
        "dimension": dimension,
        "embedding_version": version,
    }


def _chunks_by_size(docs: Sequence[dict[str, Any]], cap: int) -> list[list[dict[str, Any]]]:
    return chunk_by_size(docs, [size_of(d) for d in docs], cap)


__all__ = ["ArangoStore", "order_traversal"]
