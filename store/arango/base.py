"""What every part of :class:`~vcm.store.arango.adapter.ArangoStore` shares.

The store is composed of one mixin per concern (core memory, messages, recall, archival and its
vector spaces, events, graph, maintenance), each in its own module. They all derive from
:class:`ArangoBase`, which declares the attributes that ``ArangoStore.__init__`` sets, with their
types, and holds the plumbing every concern uses: running AQL and reading documents with driver
errors translated, stream transactions, fault points and the clock.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

from arango.database import StandardDatabase

from vcm.errors import AgentFenced, VcmError
from vcm.store import semantics
from vcm.store.arango import keys
from vcm.store.arango.aql import agents as aql_agents
from vcm.store.arango.aql import principals as aql_principals
from vcm.store.arango.aql.common import AqlQuery
from vcm.store.arango.client import Connection
from vcm.store.arango.errors import is_driver_failure, translate, translated
from vcm.store.arango.guard import GuardReport
from vcm.store.arango.schema import BootstrapReport, Schema, VectorIndexSpec
from vcm.store.arango.snapshots import Snapshots
from vcm.store.port import FaultHook, MemoryStore

# One logger for the whole adapter, under the name it had when it was one module, so that
# logging configuration aimed at ``vcm.store.arango.adapter`` keeps catching its records.
log = logging.getLogger("vcm.store.arango.adapter")


def fence_key(agent_id: str) -> str:
    """The key of the agent's record in ``core_memory`` (``vcm.store.arango.agents.agent_key``,
    which imports this module)."""
    return keys.doc_key(agent_id, "agent")


class ArangoBase(MemoryStore):
    """Shared state and plumbing of the ArangoDB store; set up by ``ArangoStore.__init__``."""

    backend = "arango"

    _conn: Connection
    _rw: StandardDatabase  # read-write handle: writes, stream transactions, DDL
    _ro: StandardDatabase  # read-only handle: reads and searches outside transactions
    _schema: Schema
    _spec: VectorIndexSpec
    _fault_hook: FaultHook | None
    _n_probe: int | None
    _auto_vector_index: bool
    _vector_threshold: int
    _cap: int  # estimated transaction size above which writes are split
    _txn_max: int
    _lock_timeout: int
    _lag_ms: int
    _max_results: int
    _ann_max_fetch: int
    _expire_batch: int
    _clock: Callable[[], float]
    bootstrap_report: BootstrapReport
    guard_report: GuardReport | None
    _secret: bytes
    _snapshots: Snapshots

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
            if isinstance(exc, Exception) and not isinstance(exc, VcmError) and is_driver_failure(exc):
                raise translate(exc, operation) from exc
            raise
        try:
            with translated(operation):
                txn.commit_transaction()
        except BaseException:
            with contextlib.suppress(Exception):
                txn.abort_transaction()
            raise

    def _fence(self, txn: Any, agent_ids: Iterable[str], incarnation: str | None, operation: str) -> None:
        """The fence of a cold-path write, inside its stream transaction (which must write
        ``core_memory``): every agent it writes for must still have its record, holding
        ``incarnation``; otherwise raise AgentFenced (the transaction aborts, nothing written).
        None checks nothing. See :func:`vcm.store.arango.aql.agents.fence`."""
        if incarnation is None:
            return
        wanted = list(dict.fromkeys(agent_ids))
        passed = set(
            self._run(txn, aql_agents.fence([fence_key(a) for a in wanted], incarnation, self._clock()), operation)
        )
        for agent_id in wanted:
            if agent_id not in passed:
                raise AgentFenced(
                    f"agent {agent_id!r} was deleted or re-created since this work began; nothing written",
                    agent_id=agent_id,
                )

    def _fence_holder(self, txn: Any, holder: str, incarnation: str | None, operation: str) -> None:
        """The fence of a write to a principal's shared memory (the transaction writes
        ``core_memory``): its record must still exist, holding ``incarnation`` when given. See
        :func:`vcm.store.arango.aql.principals.fence_holder`."""
        if not self._run(txn, aql_principals.fence_holder(fence_key(holder), incarnation, self._clock()), operation):
            raise AgentFenced(f"{holder!r} was deleted or re-created; nothing written", agent_id=holder)

    def _fenced_run(
        self,
        query: AqlQuery,
        collections: Sequence[str],
        agent_ids: Iterable[str],
        incarnation: str | None,
        operation: str,
    ) -> list[Any]:
        """One write query: as it is without ``incarnation``, else in a stream transaction with
        the fence (:meth:`_fence`) first."""
        if incarnation is None:
            return self._run(self._rw, query, operation)
        core = "core_memory"
        with self._transaction((core, *(c for c in collections if c != core)), operation) as txn:
            self._fence(txn, agent_ids, incarnation, operation)
            return self._run(txn, query, operation)

    def _now(self, given: float = 0.0) -> float:
        return given if given else self._clock()
