"""The store port: the one interface both adapters (embedded SQLite, ArangoDB) implement.

Contract (checked by ``tests/store/test_contract.py`` against every adapter):

* Every write is idempotent: replaying it with the same identity (message id, batch id,
  event id, chunk identity, block idempotency key) changes nothing and returns the first result.
* ``put_core`` / ``commit_eviction`` use optimistic locking on ``rev``; a stale rev raises
  :class:`~store.errors.RevConflictError` and writes nothing.
* ``commit_eviction`` is atomic: the recall append, the summary replace and the event row
  land together or not at all.
* Search cursors are opaque and stable: paging on while new data arrives never repeats or
  skips an item of the first page's snapshot.
* Errors are only those of :mod:`store.errors`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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
    NodeRef,
    Page,
    RecallHit,
    StoredMessage,
    Summary,
)

# Called by adapters at named points inside multi-step writes, so tests can inject a failure
# (e.g. "commit_eviction.after_recall_append"). Production passes None.
FaultHook = Callable[[str], None]


class MemoryStore(abc.ABC):
    """External memory tier of vcm. Implementations must be safe to share between threads."""

    # --- core memory ---------------------------------------------------------------------
    @abc.abstractmethod
    def get_core(self, agent_id: str, block_id: str) -> CoreBlock:
        """Raise NotFoundError when absent."""

    @abc.abstractmethod
    def list_core(self, agent_id: str) -> list[CoreBlock]: ...

    @abc.abstractmethod
    def put_core(
        self, block: CoreBlockWrite, expected_rev: str | None, idempotency_key: str
    ) -> CoreBlock:
        """Create (expected_rev None, block must not exist) or replace (rev must match).

        A replay with the same idempotency key returns the block as first written; the same key
        with different content raises IdempotencyMismatchError.
        """

    @abc.abstractmethod
    def delete_core(self, agent_id: str, block_id: str, expected_rev: str) -> None: ...

    @abc.abstractmethod
    def get_summary(self, agent_id: str) -> Summary | None: ...

    # --- messages / recall -------------------------------------------------------------
    @abc.abstractmethod
    def spool_messages(self, messages: Sequence[StoredMessage]) -> int:
        """Write-behind of appended messages; idempotent by (agent_id, message_id).

        Returns how many were new.
        """

    @abc.abstractmethod
    def get_messages(self, agent_id: str, message_ids: Sequence[str]) -> list[StoredMessage]:
        """Messages found, in the order asked; missing ids are left out."""

    @abc.abstractmethod
    def count_messages(self, agent_id: str) -> int: ...

    @abc.abstractmethod
    def commit_eviction(self, commit: EvictionCommit) -> EvictionResult:
        """Atomically: ensure the batch's messages exist, add `recall_log` edges from the summary
        to them, replace the summary (rev check), append the `evict` event. Replay-safe."""

    @abc.abstractmethod
    def committed_batches(self, agent_id: str) -> list[int]:
        """Batch ids committed for this agent, ascending."""

    @abc.abstractmethod
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
        """BM25 over message content, best first. Must also see messages written a moment ago
        (read-after-write) even if the text index lags."""

    # --- archival ---------------------------------------------------------------------------
    @abc.abstractmethod
    def ingest_archival(self, chunks: Sequence[ArchivalChunk]) -> int:
        """Idempotent by (agent_id, doc_id, chunk_index, embedding_version). Returns new count.
        Also links consecutive chunks of a document (`derived_from` edges to the previous)."""

    @abc.abstractmethod
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
        """Vector top-k with metadata post-filters (equality on chunk metadata / doc_id)."""

    @abc.abstractmethod
    def get_archival(self, agent_id: str, doc_id: str) -> list[ArchivalChunk]: ...

    # --- events ---------------------------------------------------------------------------
    @abc.abstractmethod
    def append_event(self, event: MemoryEvent) -> MemoryEvent:
        """Idempotent by event_id; returns the stored row (with id and created_at filled)."""

    @abc.abstractmethod
    def query_events(
        self,
        agent_id: str | None,
        kinds: Sequence[str] | None = None,
        *,
        since: float | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[MemoryEvent]:
        """Oldest first."""

    # --- graph ----------------------------------------------------------------------------
    @abc.abstractmethod
    def add_edge(self, edge: Edge) -> None:
        """Idempotent by (kind, src, dst)."""

    @abc.abstractmethod
    def traverse(
        self,
        start: NodeRef,
        kinds: Sequence[EdgeKind] | None = None,
        *,
        max_depth: int = 1,
        direction: str = "outbound",
    ) -> list[NodeRef]:
        """Distinct nodes reachable within max_depth, breadth first, start excluded."""

    # --- maintenance ------------------------------------------------------------------------
    @abc.abstractmethod
    def expire(self, now: float) -> int:
        """Delete rows whose expires_at/valid_until TTL has passed; returns how many."""

    @abc.abstractmethod
    def health(self) -> Health: ...

    @abc.abstractmethod
    def stats(self, agent_id: str | None = None) -> dict[str, Any]: ...

    @abc.abstractmethod
    def close(self) -> None: ...
