"""Test data and probes for the store suites. Everything here uses the port API only."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from vcm.errors import InjectedFailure
from vcm.store.port import MemoryStore
from vcm.store.types import (
    ArchivalChunk,
    EvictionCommit,
    Metric,
    NodeRef,
    StoredMessage,
    chunk_node,
    message_node,
    summary_node,
)


class FaultSwitch:
    """A fault hook whose points a test arms; an armed point raises InjectedFailure."""

    def __init__(self) -> None:
        self.armed: set[str] = set()
        self.seen: list[str] = []

    def __call__(self, point: str) -> None:
        self.seen.append(point)
        if point in self.armed:
            raise InjectedFailure(f"injected failure at {point}", point=point)


def msg(
    agent: str,
    i: int,
    content: str | None = None,
    *,
    created_at: float | None = None,
    expires_at: float | None = None,
) -> StoredMessage:
    return StoredMessage(
        agent_id=agent,
        message_id=f"m{i:04d}",
        seq=i,
        role="user" if i % 2 == 0 else "assistant",
        content=content if content is not None else f"message number {i}",
        tokens=5,
        created_at=created_at if created_at is not None else 1_700_000_000.0 + i,
        metadata={"i": i},
        expires_at=expires_at,
    )


def clustered(
    n_clusters: int, per_cluster: int, dim: int, *, seed: int = 7, spread: float = 0.05
) -> tuple[np.ndarray[Any, np.dtype[np.float32]], np.ndarray[Any, np.dtype[np.int64]]]:
    """Unit-ish vectors around well separated random centres, and each vector's cluster."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = np.repeat(np.arange(n_clusters), per_cluster)
    points = centres[labels] + rng.normal(scale=spread, size=(len(labels), dim))
    return points.astype(np.float32), labels


def chunk(
    agent: str,
    doc: str,
    index: int,
    vector: Sequence[float],
    *,
    metric: Metric = "cosine",
    version: str = "v1",
    metadata: dict[str, Any] | None = None,
    valid_until: float | None = None,
) -> ArchivalChunk:
    return ArchivalChunk(
        agent_id=agent,
        doc_id=doc,
        chunk_index=index,
        text=f"{doc} chunk {index}",
        embedding=[float(x) for x in vector],
        metric=metric,
        embedding_version=version,
        model_id="test-model",
        char_start=index * 100,
        char_end=index * 100 + 99,
        source=f"file://{doc}.txt",
        metadata=metadata or {},
        valid_until=valid_until,
    )


def eviction(
    agent: str,
    batch_id: int,
    messages: Sequence[StoredMessage],
    expected_rev: str | None,
    text: str | None = None,
) -> EvictionCommit:
    return EvictionCommit(
        agent_id=agent,
        batch_id=batch_id,
        messages=list(messages),
        summary_text=text if text is not None else f"summary after batch {batch_id}",
        summary_tokens=7,
        expected_summary_rev=expected_rev,
        event={"reason": "flush", "drift": 0.93},
    )


def snapshot(
    store: MemoryStore,
    agents: Sequence[str],
    message_ids: Sequence[str] = (),
    extra_nodes: Sequence[NodeRef] = (),
) -> dict[str, Any]:
    """Everything observable about ``agents`` through the port, for before/after equality."""
    out: dict[str, Any] = {}
    for agent in agents:
        events: list[Any] = []
        cursor: str | None = None
        while True:
            page = store.query_events(agent, limit=100, cursor=cursor)
            events += [(e.event_id, e.kind, dict(e.payload)) for e in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
        nodes = [summary_node(agent), *extra_nodes]
        nodes += [message_node(agent, m) for m in message_ids]
        out[agent] = {
            "count": store.count_messages(agent),
            "messages": store.get_messages(agent, list(message_ids)),
            "summary": store.get_summary(agent),
            "core": store.list_core(agent),
            "batches": store.committed_batches(agent),
            "events": events,
            "edges": {(n.collection, n.key): store.traverse(n, max_depth=1, direction="any") for n in nodes},
            "stats": _counts(store.stats(agent)),
        }
    return out


def _counts(stats: dict[str, Any]) -> dict[str, Any]:
    keys = ("messages", "core_blocks", "archival_chunks", "events", "edges", "committed_batches")
    return {k: stats[k] for k in keys}


def doc_nodes(agent: str, doc: str, n: int, version: str = "v1") -> list[NodeRef]:
    return [chunk_node(agent, doc, i, version) for i in range(n)]


def now() -> float:
    return time.time()
