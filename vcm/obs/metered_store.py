"""A :class:`~vcm.store.port.MemoryStore` that records metrics around another one: the one place
where store errors are counted and searches are timed (see :mod:`vcm.obs.metrics`).

Process entry points wrap the store they open (``vcm.workers.runtime.build``), so the service, the tool
executor and the cold path all go through it. It adds no behaviour: every call is passed on as
is, and what it raises is re-raised unchanged after being counted. Only the store's own coded
errors are counted by code; anything else (a bug) counts as ``INTERNAL``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from vcm.errors import VcmError
from vcm.obs import metrics
from vcm.store.port import MemoryStore
from vcm.store.principals import Principal
from vcm.store.types import (
    AgentMemory,
    AgentRecord,
    ArchivalChunk,
    ArchivalHit,
    ContextReset,
    CoreBlock,
    CoreBlockWrite,
    DedupCandidate,
    Edge,
    EdgeKind,
    EvictionCommit,
    EvictionResult,
    Expiry,
    Fact,
    FactHit,
    FactQuery,
    FactScore,
    Forgotten,
    Health,
    IdempotencyRecord,
    MemoryEvent,
    NodeRef,
    Page,
    RecallHit,
    SnapshotRecord,
    StateEntry,
    StoredMessage,
    Summary,
    SummaryVersion,
    Tombstones,
)

R = TypeVar("R")


class MeteredStore(MemoryStore):
    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.backend: str = getattr(inner, "backend", type(inner).__name__)

    def _call(self, operation: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        try:
            return fn(*args, **kwargs)
        except VcmError as exc:
            metrics.store_error(operation, str(exc.code))
            raise
        except Exception:
            metrics.store_error(operation, "INTERNAL")
            raise

    def __getattr__(self, name: str) -> Any:
        # Adapter-only operations (EmbeddedStore.flush_text_index, ...) pass through unmetered.
        if name == "inner":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    # --- agents, lifecycle, snapshots ----------------------------------------------------------
    def put_agent(self, agent_id: str, config: Mapping[str, Any], *, incarnation: str = "") -> AgentRecord:
        return self._call("put_agent", self.inner.put_agent, agent_id, config, incarnation=incarnation)

    def get_agent(self, agent_id: str) -> AgentRecord:
        return self._call("get_agent", self.inner.get_agent, agent_id)

    def list_agents(self) -> list[AgentRecord]:
        return self._call("list_agents", self.inner.list_agents)

    def put_principal(self, principal: Principal) -> Principal:
        return self._call("put_principal", self.inner.put_principal, principal)

    def get_principal(self, kind: str, name: str) -> Principal:
        return self._call("get_principal", self.inner.get_principal, kind, name)

    def list_principals(self, kind: str) -> list[Principal]:
        return self._call("list_principals", self.inner.list_principals, kind)

    def delete_principal(self, kind: str, name: str) -> int:
        return self._call("delete_principal", self.inner.delete_principal, kind, name)

    def set_agent_principals(self, agent_id: str, *, user_id: str | None, domain: str | None) -> AgentRecord:
        return self._call(
            "set_agent_principals", self.inner.set_agent_principals, agent_id, user_id=user_id, domain=domain
        )

    def set_agent_token(self, agent_id: str, token_sha256: str | None) -> None:
        self._call("set_agent_token", self.inner.set_agent_token, agent_id, token_sha256)

    def advance_id_floor(self, agent_id: str, floor: int) -> int:
        return self._call("advance_id_floor", self.inner.advance_id_floor, agent_id, floor)

    def uncommitted_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 1000) -> list[StoredMessage]:
        return self._call(
            "uncommitted_messages", self.inner.uncommitted_messages, agent_id, after_seq=after_seq, limit=limit
        )

    def summary_versions(self, agent_id: str, *, limit: int = 20) -> list[SummaryVersion]:
        return self._call("summary_versions", self.inner.summary_versions, agent_id, limit=limit)

    def rewrite_summaries(
        self, agent_id: str, versions: Sequence[SummaryVersion], *, expected_rev: str | None
    ) -> Summary | None:
        return self._call(
            "rewrite_summaries", self.inner.rewrite_summaries, agent_id, versions, expected_rev=expected_rev
        )

    def put_fact(self, fact: Fact, expected_version: int | None, *, incarnation: str | None = None) -> Fact:
        return self._call("put_fact", self.inner.put_fact, fact, expected_version, incarnation=incarnation)

    def get_fact(self, agent_id: str, fact_id: str) -> Fact:
        return self._call("get_fact", self.inner.get_fact, agent_id, fact_id)

    def query_facts(self, agent_id: str, query: FactQuery) -> list[Fact]:
        return self._call("query_facts", self.inner.query_facts, agent_id, query)

    def dedup_candidates(self, agent_id: str, query: FactQuery, vector: Sequence[float] | None) -> list[DedupCandidate]:
        return self._call("dedup_candidates", self.inner.dedup_candidates, agent_id, query, vector)

    def search_facts(self, agent_id: str, text: str, vector: Sequence[float] | None, query: FactQuery) -> list[FactHit]:
        return self._call("search_facts", self.inner.search_facts, agent_id, text, vector, query)

    def search_fact_scores(
        self, agent_id: str, text: str, vector: Sequence[float] | None, query: FactQuery
    ) -> list[FactScore]:
        return self._call("search_fact_scores", self.inner.search_fact_scores, agent_id, text, vector, query)

    def read_fact_hits(self, agent_id: str, ranked: Sequence[FactScore], query: FactQuery) -> list[FactHit]:
        return self._call("read_fact_hits", self.inner.read_fact_hits, agent_id, ranked, query)

    def delete_facts(self, agent_id: str, fact_ids: Sequence[str]) -> int:
        return self._call("delete_facts", self.inner.delete_facts, agent_id, fact_ids)

    def fact_counts(self, agent_id: str) -> dict[str, dict[str, int]]:
        return self._call("fact_counts", self.inner.fact_counts, agent_id)

    def touch_facts(self, agent_id: str, fact_ids: Sequence[str], now: float) -> None:
        self._call("touch_facts", self.inner.touch_facts, agent_id, fact_ids, now)

    def agent_memory(self, agent_id: str, now: float) -> AgentMemory:
        return self._call("agent_memory", self.inner.agent_memory, agent_id, now)

    def put_state(
        self, agent_id: str, key: str, value: Any, *, expires_at: float | None, expected_rev: str | None
    ) -> StateEntry:
        return self._call(
            "put_state", self.inner.put_state, agent_id, key, value, expires_at=expires_at, expected_rev=expected_rev
        )

    def get_state(self, agent_id: str, key: str, now: float) -> StateEntry:
        return self._call("get_state", self.inner.get_state, agent_id, key, now)

    def list_state(self, agent_id: str, now: float) -> list[StateEntry]:
        return self._call("list_state", self.inner.list_state, agent_id, now)

    def delete_state(self, agent_id: str, key: str | None, expected_rev: str | None = None) -> int:
        return self._call("delete_state", self.inner.delete_state, agent_id, key, expected_rev)

    def reset_context(self, change: ContextReset) -> None:
        self._call("reset_context", self.inner.reset_context, change)

    def delete_agent(self, agent_id: str) -> Forgotten:
        return self._call("delete_agent", self.inner.delete_agent, agent_id)

    def forget_message(self, agent_id: str, message_id: str) -> Forgotten:
        return self._call("forget_message", self.inner.forget_message, agent_id, message_id)

    def forget_document(self, agent_id: str, doc_id: str) -> Forgotten:
        return self._call("forget_document", self.inner.forget_document, agent_id, doc_id)

    def tombstones(self, agent_id: str) -> Tombstones:
        return self._call("tombstones", self.inner.tombstones, agent_id)

    def put_snapshot(self, snapshot: SnapshotRecord) -> SnapshotRecord:
        return self._call("put_snapshot", self.inner.put_snapshot, snapshot)

    def get_snapshot(self, agent_id: str, snapshot_id: str) -> SnapshotRecord:
        return self._call("get_snapshot", self.inner.get_snapshot, agent_id, snapshot_id)

    def list_snapshots(self, agent_id: str) -> list[SnapshotRecord]:
        return self._call("list_snapshots", self.inner.list_snapshots, agent_id)

    def delete_snapshot(self, agent_id: str, snapshot_id: str) -> bool:
        return self._call("delete_snapshot", self.inner.delete_snapshot, agent_id, snapshot_id)

    # --- core memory ---------------------------------------------------------------------------
    def get_core(self, agent_id: str, block_id: str) -> CoreBlock:
        return self._call("get_core", self.inner.get_core, agent_id, block_id)

    def list_core(self, agent_id: str) -> list[CoreBlock]:
        return self._call("list_core", self.inner.list_core, agent_id)

    def put_core(self, block: CoreBlockWrite, expected_rev: str | None, idempotency_key: str) -> CoreBlock:
        return self._call("put_core", self.inner.put_core, block, expected_rev, idempotency_key)

    def delete_core(self, agent_id: str, block_id: str, expected_rev: str) -> None:
        self._call("delete_core", self.inner.delete_core, agent_id, block_id, expected_rev)

    def get_summary(self, agent_id: str) -> Summary | None:
        return self._call("get_summary", self.inner.get_summary, agent_id)

    # --- messages / recall ---------------------------------------------------------------------
    def spool_messages(
        self,
        messages: Sequence[StoredMessage],
        *,
        events: Sequence[MemoryEvent] = (),
        idempotency: Sequence[IdempotencyRecord] = (),
        incarnation: str | None = None,
    ) -> int:
        return self._call(
            "spool_messages",
            self.inner.spool_messages,
            messages,
            events=events,
            idempotency=idempotency,
            incarnation=incarnation,
        )

    def get_messages(self, agent_id: str, message_ids: Sequence[str]) -> list[StoredMessage]:
        return self._call("get_messages", self.inner.get_messages, agent_id, message_ids)

    def list_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 100) -> list[StoredMessage]:
        return self._call("list_messages", self.inner.list_messages, agent_id, after_seq=after_seq, limit=limit)

    def count_messages(self, agent_id: str, *, id_prefix: str = "") -> int:
        return self._call("count_messages", self.inner.count_messages, agent_id, id_prefix=id_prefix)

    def commit_eviction(self, commit: EvictionCommit) -> EvictionResult:
        return self._call("commit_eviction", self.inner.commit_eviction, commit)

    def committed_batches(self, agent_id: str) -> list[int]:
        return self._call("committed_batches", self.inner.committed_batches, agent_id)

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
        started = time.perf_counter()
        page = self._call(
            "search_recall", self.inner.search_recall, agent_id, query, limit, cursor, since=since, until=until
        )
        metrics.recall_search("text", time.perf_counter() - started, len(page.items))
        return page

    def put_message_vectors(
        self,
        agent_id: str,
        vectors: Sequence[tuple[str, Sequence[float]]],
        embedding_version: str,
        *,
        incarnation: str | None = None,
    ) -> int:
        return self._call(
            "put_message_vectors",
            self.inner.put_message_vectors,
            agent_id,
            vectors,
            embedding_version,
            incarnation=incarnation,
        )

    def message_vector_ids(self, agent_id: str, message_ids: Sequence[str], embedding_version: str) -> set[str]:
        return self._call("message_vector_ids", self.inner.message_vector_ids, agent_id, message_ids, embedding_version)

    def message_authors(self, agent_id: str) -> list[str]:
        return self._call("message_authors", self.inner.message_authors, agent_id)

    def maintain_indexes(self) -> dict[str, int]:
        return self._call("maintain_indexes", self.inner.maintain_indexes)

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
        exclude: Collection[str] = (),
    ) -> Page[RecallHit]:
        started = time.perf_counter()
        page = self._call(
            "search_recall_hybrid",
            self.inner.search_recall_hybrid,
            agent_id,
            query,
            vector,
            limit=limit,
            cursor=cursor,
            since=since,
            until=until,
            mode=mode,
            embedding_version=embedding_version,
            exclude=exclude,
        )
        metrics.recall_search(mode, time.perf_counter() - started, len(page.items))
        if page.stats is not None and page.stats.partial:
            metrics.recall_partial(mode, page.stats.unindexed)
        return page

    # --- archival ------------------------------------------------------------------------------
    def ingest_archival(self, chunks: Sequence[ArchivalChunk], *, incarnation: str | None = None) -> int:
        return self._call("ingest_archival", self.inner.ingest_archival, chunks, incarnation=incarnation)

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
        started = time.perf_counter()
        page = self._call(
            "search_archival",
            self.inner.search_archival,
            agent_id,
            vector,
            k,
            filters=filters,
            cursor=cursor,
            n_probe=n_probe,
            metric=metric,
            embedding_version=embedding_version,
        )
        stats = page.stats
        metrics.archival_search(
            time.perf_counter() - started,
            len(page.items),
            None if stats is None else stats.offset,
            0 if stats is None else stats.judged,
            0 if stats is None else stats.dropped,
            k,
        )
        return page

    def get_archival(self, agent_id: str, doc_id: str) -> list[ArchivalChunk]:
        return self._call("get_archival", self.inner.get_archival, agent_id, doc_id)

    # --- events --------------------------------------------------------------------------------
    def append_event(self, event: MemoryEvent, *, incarnation: str | None = None) -> MemoryEvent:
        return self._call("append_event", self.inner.append_event, event, incarnation=incarnation)

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
        return self._call(
            "query_events",
            self.inner.query_events,
            agent_id,
            kinds,
            since=since,
            until=until,
            actor=actor,
            idempotency_key=idempotency_key,
            limit=limit,
            cursor=cursor,
        )

    # --- graph ---------------------------------------------------------------------------------
    def add_edge(self, edge: Edge, *, incarnation: str | None = None) -> None:
        self._call("add_edge", self.inner.add_edge, edge, incarnation=incarnation)

    def traverse(
        self,
        start: NodeRef,
        kinds: Sequence[EdgeKind] | None = None,
        *,
        max_depth: int = 1,
        direction: str = "outbound",
    ) -> list[NodeRef]:
        return self._call("traverse", self.inner.traverse, start, kinds, max_depth=max_depth, direction=direction)

    # --- idempotency records ---------------------------------------------------------------------
    def put_idempotency(self, records: Sequence[IdempotencyRecord], *, incarnation: str | None = None) -> None:
        self._call("put_idempotency", self.inner.put_idempotency, records, incarnation=incarnation)

    def get_idempotency(self, agent_id: str, key: str) -> IdempotencyRecord | None:
        return self._call("get_idempotency", self.inner.get_idempotency, agent_id, key)

    def list_idempotency(
        self, agent_id: str, *, after: str | None = None, limit: int = 1000
    ) -> list[IdempotencyRecord]:
        return self._call("list_idempotency", self.inner.list_idempotency, agent_id, after=after, limit=limit)

    def expire_idempotency(self, now: float) -> int:
        return self._call("expire_idempotency", self.inner.expire_idempotency, now)

    # --- maintenance ---------------------------------------------------------------------------
    def expire_all(self, now: float) -> Expiry:
        return self._call("expire", self.inner.expire_all, now)

    def health(self) -> Health:
        return self._call("health", self.inner.health)

    def stats(self, agent_id: str | None = None) -> dict[str, Any]:
        return self._call("stats", self.inner.stats, agent_id)

    def close(self) -> None:
        self._call("close", self.inner.close)

    def __enter__(self) -> MeteredStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def metered(store: MemoryStore) -> MemoryStore:
    """``store`` wrapped once (wrapping a wrapped store returns it as is)."""
    return store if isinstance(store, MeteredStore) else MeteredStore(store)
