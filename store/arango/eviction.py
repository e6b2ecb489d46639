"""Planning of ``commit_eviction`` writes (pure): documents, and how to split big batches.

One stream transaction normally carries the whole commit: the batch's messages (idempotent
inserts), the ``recall_log`` edges summary -> message, the summary replace (``_rev`` checked),
the ``evict`` event and the batch marker. ArangoDB caps a stream transaction's size
(``--transaction.streaming-max-transaction-size``: 128 MiB up to 3.12.3, 512 MiB from 3.12.4,
docs/reference/arangodb.md §3.1) and intermediate commits are disabled for stream transactions, so a
batch whose estimated payload exceeds ``cap_bytes`` is split:

* **pre-writes**: the message documents go first, in chunks under the cap, each chunk one
  idempotent ``INSERT ... overwriteMode "ignore"``. They are exactly the rows the write-behind
  spool (``spool_messages``) writes for every appended message anyway, so a crash or failure
  after them leaves nothing a reader could tell from normal spooling: no summary change, no
  edge, no event, no marker; a retry re-inserts them as no-ops.
* **the final transaction** holds everything that makes the batch *committed*: the
  ``recall_log`` edges, the summary replace, the event and the marker. They stay atomic
  together, which is the port's contract (recall append + summary replace + event row). Edges
  are small (~300 B), so the final part stays far below the cap for any batch a context window
  can produce; if it still does not fit, the commit is refused before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vcm.errors import ValidationError
from vcm.store.arango import documents, keys
from vcm.store.semantics import distinct, evict_event_id, evict_event_payload
from vcm.store.types import Edge, EvictionCommit, StoredMessage, message_node, summary_node

DEFAULT_CAP_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class EvictionPlan:
    marker_key: str
    summary_key: str
    event_id: str
    messages: list[StoredMessage]  # the batch, first occurrence of each message id
    pre_writes: list[list[dict[str, Any]]]  # message chunks written before the transaction
    final_messages: list[dict[str, Any]]  # messages inside the transaction ([] when split)
    edges: list[dict[str, Any]]
    estimated_bytes: int
    final_bytes: int

    @property
    def split(self) -> bool:
        return bool(self.pre_writes)


def size_of(doc: Any) -> int:
    """Bytes of a document as JSON: what the server stores, within index overhead."""
    return len(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def plan_eviction(commit: EvictionCommit, *, now: float, cap_bytes: int = DEFAULT_CAP_BYTES) -> EvictionPlan:
    if cap_bytes < 1024:
        raise ValidationError("the transaction size cap must be at least 1 KiB")
    agent = commit.agent_id
    batch = distinct(commit.messages)
    summary_ref = summary_node(agent)
    message_docs = [documents.message_doc(m) for m in batch]
    edge_docs = [
        documents.edge_doc(
            Edge(
                "recall_log",
                summary_ref,
                message_node(agent, m.message_id),
                agent,
                now,
                {"batch_id": commit.batch_id},
            ),
            now,
        )
        for m in batch
    ]
    event_bytes = size_of(evict_event_payload(commit, batch, "x" * 32)) + 512
    summary_bytes = len(commit.summary_text.encode("utf-8")) + 512
    final_fixed = sum(size_of(e) for e in edge_docs) + event_bytes + summary_bytes + 256
    message_bytes = [size_of(d) for d in message_docs]
    total = final_fixed + sum(message_bytes)
    if final_fixed > cap_bytes:
        raise ValidationError(
            f"eviction batch {commit.batch_id} is too large to commit atomically: its edges, "
            f"summary and event need ~{final_fixed} bytes, over the {cap_bytes}-byte transaction "
            "cap; evict fewer messages per batch",
            batch_id=commit.batch_id,
        )
    split = total > cap_bytes
    return EvictionPlan(
        marker_key=keys.batch_key(agent, commit.batch_id),
        summary_key=documents.summary_key(agent),
        event_id=evict_event_id(agent, commit.batch_id),
        messages=batch,
        pre_writes=chunk_by_size(message_docs, message_bytes, cap_bytes) if split else [],
        final_messages=[] if split else message_docs,
        edges=edge_docs,
        estimated_bytes=total,
        final_bytes=final_fixed if split else total,
    )


def chunk_by_size(docs: Sequence[dict[str, Any]], sizes: Sequence[int], cap: int) -> list[list[dict[str, Any]]]:
    """Greedy, order-keeping chunks of at most ``cap`` bytes (a single bigger doc goes alone)."""
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    used = 0
    for doc, size in zip(docs, sizes, strict=True):
        if current and used + size > cap:
            chunks.append(current)
            current, used = [], 0
        current.append(doc)
        used += size
    if current:
        chunks.append(current)
    return chunks
