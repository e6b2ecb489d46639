"""Argument checks shared by the embedded store's operations (pure).

Everything is checked before a transaction opens, so bad input raises
:class:`~store.errors.StoreValidationError` and writes nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from store.errors import StoreValidationError
from store.types import (
    EDGE_KINDS,
    SUMMARY_BLOCK_ID,
    ArchivalChunk,
    CoreBlockWrite,
    Edge,
    EvictionCommit,
    MemoryEvent,
    NodeRef,
    StoredMessage,
)

MAX_LIMIT = 1000
MAX_DEPTH = 32
MAX_ID_CHARS = 512
METRICS = ("cosine", "l2")
DIRECTIONS = ("outbound", "inbound", "any")
NODE_COLLECTIONS = ("core_memory", "messages", "archival_docs", "memory_events")


def identifier(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise StoreValidationError(f"{name} must be a non-empty string", field=name)
    if len(value) > MAX_ID_CHARS:
        raise StoreValidationError(f"{name} is longer than {MAX_ID_CHARS} characters", field=name)
    return value


def limit(name: str, value: Any, maximum: int = MAX_LIMIT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise StoreValidationError(
            f"{name} must be an integer between 1 and {maximum}", field=name, value=repr(value)
        )
    return value


def finite(name: str, value: Any, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StoreValidationError(f"{name} must be a finite number", field=name)
    return float(value)


def non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreValidationError(f"{name} must be a non-negative integer", field=name)
    return value


def json_mapping(name: str, value: Any) -> str:
    """Serialise a metadata/payload mapping, refusing what JSON cannot hold."""
    if not isinstance(value, Mapping):
        raise StoreValidationError(f"{name} must be a mapping", field=name)
    try:
        return json.dumps(dict(value), allow_nan=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StoreValidationError(f"{name} must be JSON-serialisable: {exc}", field=name) from exc


def text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise StoreValidationError(f"{name} must be a string", field=name)
    return value


def message(m: Any) -> StoredMessage:
    if not isinstance(m, StoredMessage):
        raise StoreValidationError("messages must be StoredMessage instances")
    identifier("agent_id", m.agent_id)
    identifier("message_id", m.message_id)
    identifier("role", m.role)
    non_negative_int("seq", m.seq)
    non_negative_int("tokens", m.tokens)
    text("content", m.content)
    finite("created_at", m.created_at)
    finite("expires_at", m.expires_at, optional=True)
    if m.name is not None:
        text("name", m.name)
    json_mapping("metadata", m.metadata)
    return m


def messages(items: Any) -> list[StoredMessage]:
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise StoreValidationError("messages must be a sequence of StoredMessage")
    return [message(m) for m in items]


def core_write(block: Any) -> CoreBlockWrite:
    if not isinstance(block, CoreBlockWrite):
        raise StoreValidationError("block must be a CoreBlockWrite")
    identifier("agent_id", block.agent_id)
    block_id(block.block_id)
    identifier("role", block.role)
    text("content", block.content)
    non_negative_int("tokens", block.tokens)
    if not isinstance(block.pinned, bool):
        raise StoreValidationError("pinned must be true or false", field="pinned")
    json_mapping("metadata", block.metadata)
    return block


def block_id(value: Any) -> str:
    identifier("block_id", value)
    if value == SUMMARY_BLOCK_ID:
        raise StoreValidationError(
            f"{SUMMARY_BLOCK_ID} is written only by commit_eviction; read it with get_summary",
            field="block_id",
        )
    return str(value)


def rev(name: str, value: Any, *, optional: bool) -> str | None:
    if value is None and optional:
        return None
    return identifier(name, value)


def eviction(commit: Any) -> EvictionCommit:
    if not isinstance(commit, EvictionCommit):
        raise StoreValidationError("commit must be an EvictionCommit")
    identifier("agent_id", commit.agent_id)
    non_negative_int("batch_id", commit.batch_id)
    text("summary_text", commit.summary_text)
    non_negative_int("summary_tokens", commit.summary_tokens)
    rev("expected_summary_rev", commit.expected_summary_rev, optional=True)
    json_mapping("event", commit.event)
    batch = messages(commit.messages)
    if not batch:
        raise StoreValidationError("an eviction batch needs at least one message")
    for m in batch:
        if m.agent_id != commit.agent_id:
            raise StoreValidationError(
                "every message of an eviction batch must belong to the batch's agent",
                message_id=m.message_id,
            )
    return commit


def event(e: Any) -> MemoryEvent:
    if not isinstance(e, MemoryEvent):
        raise StoreValidationError("event must be a MemoryEvent")
    identifier("agent_id", e.agent_id)
    identifier("kind", e.kind)
    identifier("actor", e.actor)
    if e.event_id != "":
        identifier("event_id", e.event_id)
    if e.idempotency_key is not None:
        identifier("idempotency_key", e.idempotency_key)
    finite("created_at", e.created_at)
    json_mapping("payload", e.payload)
    return e


def node(n: Any) -> NodeRef:
    if not isinstance(n, NodeRef):
        raise StoreValidationError("graph nodes must be NodeRef instances")
    if n.collection not in NODE_COLLECTIONS:
        raise StoreValidationError(
            f"unknown node collection {n.collection!r}; use one of {', '.join(NODE_COLLECTIONS)}"
        )
    identifier("node key", n.key)
    return n


def edge_kinds(kinds: Any) -> tuple[str, ...]:
    if kinds is None:
        return tuple(EDGE_KINDS)
    if isinstance(kinds, str) or not isinstance(kinds, Sequence) or not kinds:
        raise StoreValidationError("kinds must be a non-empty sequence of edge kinds")
    for kind in kinds:
        if kind not in EDGE_KINDS:
            raise StoreValidationError(f"unknown edge kind {kind!r}; use one of {', '.join(EDGE_KINDS)}")
    return tuple(kinds)


def edge(e: Any) -> Edge:
    if not isinstance(e, Edge):
        raise StoreValidationError("edge must be an Edge")
    edge_kinds([e.kind])
    node(e.src)
    node(e.dst)
    identifier("agent_id", e.agent_id)
    finite("created_at", e.created_at)
    json_mapping("attributes", e.attributes)
    return e


def metric(value: Any) -> str:
    if value not in METRICS:
        raise StoreValidationError(f"metric must be one of {', '.join(METRICS)}", field="metric")
    return str(value)


def vector(name: str, values: Any, *, metric_name: str) -> npt.NDArray[np.float32]:
    """A finite, non-empty float32 vector (non-zero for cosine, which must normalise it)."""
    if isinstance(values, str | bytes):
        raise StoreValidationError(f"{name} must be a sequence of numbers", field=name)
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise StoreValidationError(f"{name} must be a sequence of numbers", field=name) from exc
    if array.ndim != 1 or array.size == 0:
        raise StoreValidationError(f"{name} must be a non-empty flat vector", field=name)
    if not np.all(np.isfinite(array)):
        raise StoreValidationError(f"{name} contains NaN or infinite values", field=name)
    as32 = array.astype(np.float32)
    if not np.all(np.isfinite(as32)):
        raise StoreValidationError(f"{name} overflows float32", field=name)
    if metric_name == "cosine" and not np.any(as32):
        raise StoreValidationError(f"{name} is all zeros; cosine needs a direction", field=name)
    return as32


def chunk(c: Any) -> tuple[ArchivalChunk, npt.NDArray[np.float32]]:
    if not isinstance(c, ArchivalChunk):
        raise StoreValidationError("chunks must be ArchivalChunk instances")
    identifier("agent_id", c.agent_id)
    identifier("doc_id", c.doc_id)
    identifier("embedding_version", c.embedding_version)
    identifier("model_id", c.model_id)
    non_negative_int("chunk_index", c.chunk_index)
    non_negative_int("char_start", c.char_start)
    non_negative_int("char_end", c.char_end)
    if c.char_end < c.char_start:
        raise StoreValidationError("char_end must not be before char_start", doc_id=c.doc_id)
    text("text", c.text)
    text("source", c.source)
    metric(c.metric)
    finite("created_at", c.created_at)
    finite("valid_until", c.valid_until, optional=True)
    json_mapping("metadata", c.metadata)
    return c, vector("embedding", c.embedding, metric_name=c.metric)
