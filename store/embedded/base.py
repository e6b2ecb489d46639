"""What every part of :class:`~vcm.store.embedded.adapter.EmbeddedStore` shares.

The store is composed of one mixin per concern (core memory, messages, recall, archival, events,
graph, maintenance), each in its own module. They all derive from :class:`EmbeddedBase`, which
declares the attributes that ``EmbeddedStore.__init__`` sets, with their types, and holds the
small plumbing every concern calls (fault points, text index upkeep, revisions, the clock), so
that each mixin type-checks on its own and none has to know about another.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable

from vcm.errors import AgentFenced, VcmError
from vcm.store import semantics
from vcm.store.embedded.archival import ArchivalRanker
from vcm.store.embedded.db import Database, meta_add
from vcm.store.embedded.factvectors import FactVectors
from vcm.store.embedded.indexer import TextIndexer
from vcm.store.embedded.messageindex import MessageVectorIndexes
from vcm.store.embedded.recall import RecallRanker
from vcm.store.embedded.schema import META_REV_SEQ
from vcm.store.embedded.snapshots import Snapshots
from vcm.store.embedded.textindex import TextIndex
from vcm.store.embedded.upkeep import IndexUpkeep
from vcm.store.embedded.vectorindex import VectorIndexes
from vcm.store.port import FaultHook, MemoryStore


def fence(conn: sqlite3.Connection, agent_ids: Iterable[str], incarnation: str | None) -> None:
    """The fence of a cold-path write, inside its BEGIN IMMEDIATE transaction: every agent it
    writes for must still have its record, holding ``incarnation`` (NULL, a record older than
    incarnations, reads ""). None checks nothing. The write lock the transaction holds keeps a
    ``delete_agent`` from landing between this check and the commit."""
    if incarnation is None:
        return
    for agent_id in dict.fromkeys(agent_ids):
        row = conn.execute("SELECT incarnation FROM agents WHERE agent_id = ?", (agent_id,)).fetchone()
        if row is None or (row[0] or "") != incarnation:
            raise AgentFenced(
                f"agent {agent_id!r} was deleted or re-created since this work began; nothing written",
                agent_id=agent_id,
            )


class EmbeddedBase(MemoryStore):
    """Shared state and plumbing of the embedded store; set up by ``EmbeddedStore.__init__``."""

    backend = "embedded"

    path: str
    _tempdir: str | None  # the directory of a ":memory:" store, removed by close()
    _n_probe: int | None
    _fault_hook: FaultHook | None
    _lag_ok: bool
    _busy_timeout_s: float
    _clock: Callable[[], float]
    _db: Database
    _secret: bytes
    _text: TextIndex
    _indexer: TextIndexer
    _recall: RecallRanker
    _vectors: VectorIndexes
    _message_vectors: MessageVectorIndexes
    _upkeep: IndexUpkeep
    _archival: ArchivalRanker
    _max_results: int
    hybrid_depth_factor: int
    _snapshots: Snapshots
    _fact_vectors: FactVectors

    def _fault(self, point: str) -> None:
        semantics.fire_fault(self._fault_hook, point)

    def _with_text_errors(self, action: Callable[[], object]) -> None:
        """Text index upkeep after a commit: its failure must not fail the committed write."""
        try:
            action()
        except (VcmError, OSError, ValueError, RuntimeError, sqlite3.Error):
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
