"""The ArangoDB adapter of the store port.

Reads go through the read-only handle, writes through the read-write handle
(:mod:`vcm.store.arango.client`). Every query text comes from :mod:`vcm.store.arango.aql`. Multi-step
writes run in stream transactions that declare all their collections up front and are aborted on
any exception; the port's fault points (``fault_hook``) sit where the embedded adapter has them:

=========================  ===========================================================
``put_core``               ``put_core.before_commit``
``spool_messages``         ``spool_messages.before_commit``
``commit_eviction``        ``commit_eviction.after_recall_append``, ``commit_eviction.before_commit``
``ingest_archival``        ``ingest_archival.before_commit``
=========================  ===========================================================

Design notes (details in the modules named):

* Idempotency: every ``_key`` derives from the write's identity (:mod:`~vcm.store.arango.keys`);
  inserts use ``overwriteMode: "ignore"``.
* ``commit_eviction``: one transaction, split above a size cap (:mod:`~vcm.store.arango.eviction`).
* Recall: BM25 over ``messages_view`` plus a scan of messages the view may not hold yet
  (:func:`~vcm.store.arango.aql.messages.recall_search`).
* Archival: exact search until a space's vector index exists, then ``APPROX_NEAR_*`` with
  post-filters and over-fetch (:func:`~vcm.store.arango.aql.archival.archival_ann`); see
  :mod:`~vcm.store.arango.schema` for when the index is created.
* Cursors: ranked snapshots in ``cursors`` (:mod:`~vcm.store.arango.snapshots`); event listings use
  keyset paging.

The class is composed of one mixin per concern, each in its own module, over the shared state and
plumbing of :mod:`~vcm.store.arango.base`: :mod:`~vcm.store.arango.core_memory`,
:mod:`~vcm.store.arango.messages` (spooling and eviction), :mod:`~vcm.store.arango.recall_ops`,
:mod:`~vcm.store.arango.archival_ops`, :mod:`~vcm.store.arango.vector_spaces` (per-space vector
index state), :mod:`~vcm.store.arango.events`, :mod:`~vcm.store.arango.graph` and
:mod:`~vcm.store.arango.maintenance`. This module keeps the constructor, ``from_url`` and the
lifecycle.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from arango.exceptions import DocumentInsertError

from vcm.errors import StoreUnavailable, ValidationError, VcmError
from vcm.store import validation
from vcm.store.arango import names

# ``X as X``: re-exported names (ANN_GROWTH, log, VECTOR_RECHECK_S) that this module defined before
# the class was split into mixins, so imports from here keep working.
from vcm.store.arango.agents import AgentOps
from vcm.store.arango.archival_ops import ANN_GROWTH as ANN_GROWTH
from vcm.store.arango.archival_ops import ArchivalOps
from vcm.store.arango.base import log as log
from vcm.store.arango.client import Connection, connect
from vcm.store.arango.core_memory import CoreMemoryOps
from vcm.store.arango.errors import translated
from vcm.store.arango.events import EventOps
from vcm.store.arango.eviction import DEFAULT_CAP_BYTES
from vcm.store.arango.facts import FactOps
from vcm.store.arango.graph import GraphOps, order_traversal
from vcm.store.arango.guard import GuardReport, run_guard
from vcm.store.arango.idempotency import IdempotencyOps
from vcm.store.arango.lifecycle import LifecycleOps
from vcm.store.arango.maintenance import MaintenanceOps
from vcm.store.arango.messages import MessageOps
from vcm.store.arango.principals import PrincipalOps
from vcm.store.arango.recall_ops import RecallOps
from vcm.store.arango.schema import Schema, bootstrap, load_schema
from vcm.store.arango.snapshots import Snapshots
from vcm.store.arango.summaries import SummaryOps
from vcm.store.arango.vector_spaces import VECTOR_RECHECK_S as VECTOR_RECHECK_S
from vcm.store.port import FaultHook

SECRET_KEY = "cursor_secret"
_GUARDED: dict[str, GuardReport] = {}  # servers that passed the guard


class ArangoStore(
    AgentOps,
    SummaryOps,
    FactOps,
    PrincipalOps,
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
    """ArangoDB 3.12.4+ behind the store port. Thread-safe: python-arango sessions are."""

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
                (:mod:`vcm.store.arango.guard`); ``probe_vector_index`` allows the probe fallback.
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
            raise ValidationError("cursor_ttl_s must be positive")
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
        self._space_states = {}
        self._init_recall_vectors()
        self._init_recall_authors()
        self.bootstrap_report = bootstrap(self._rw, self._schema, retention=retention)
        self.guard_report = None
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

    # --- lifecycle -------------------------------------------------------------------------------
    def _load_secret(self) -> bytes:
        meta = self._rw.collection(names.META)
        with translated("read store settings"):
            with contextlib.suppress(DocumentInsertError):  # another process seeded it first
                meta.insert({"_key": SECRET_KEY, "value": secrets.token_hex(32)}, overwrite_mode="ignore")
            doc = meta.get(SECRET_KEY)
        if not isinstance(doc, dict) or not isinstance(doc.get("value"), str):
            raise StoreUnavailable("the cursor secret in vcm_meta is missing or damaged")
        return bytes.fromhex(doc["value"])

    def maintain_indexes(self) -> dict[str, int]:
        """Create the vector indexes that are due, off the query and write paths (the cold path's
        sweep calls it): the recall index of each dimension whose messages reached the vector
        threshold, and each archival space's. Queries rank exactly until an index is ready."""
        created = self.maintain_recall_indexes()
        if self._auto_vector_index:
            for space in {(s.metric, s.dimension) for s in self._spaces()}:
                before = self.vector_index_state(*space)
                with contextlib.suppress(VcmError):  # logged and recorded by ensure_vector_index
                    created += int(before != "ivf" and self.ensure_vector_index(*space) == "ivf")
        return {"created": created}

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ArangoStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ArangoStore", "order_traversal"]
