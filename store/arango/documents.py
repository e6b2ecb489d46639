"""Conversions between the port's dataclasses and ArangoDB documents (pure).

Every node document's ``_key`` is the vertex key of its port-level :class:`NodeRef`
(:mod:`vcm.store.arango.keys`), so ``recall_log``/``cites``/``derived_from`` edges built from refs
point at the real documents. Edges also carry their refs verbatim (``src``/``dst``) because the
port allows edges between refs that have no document, and traversals must give refs back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from vcm.store.arango import keys, names
from vcm.store.arango.aql.common import vector_attribute
from vcm.store.types import (
    SUMMARY_BLOCK_ID,
    ArchivalChunk,
    CoreBlock,
    CoreBlockWrite,
    Edge,
    MemoryEvent,
    Metric,
    NodeRef,
    StoredMessage,
    Summary,
    chunk_node,
    core_node,
    event_node,
    message_node,
    summary_node,
)

BLOCK_KIND = "block"
SUMMARY_KIND = "summary"


# --- messages -----------------------------------------------------------------------------------
def message_key(agent_id: str, message_id: str) -> str:
    return keys.vertex_key(message_node(agent_id, message_id))


def message_doc(m: StoredMessage) -> dict[str, Any]:
    return {
        "_key": message_key(m.agent_id, m.message_id),
        "agent_id": m.agent_id,
        "message_id": m.message_id,
        "seq": m.seq,
        "role": m.role,
        "content": m.content,
        "tokens": m.tokens,
        "created_at": float(m.created_at),
        "name": m.name,
        "metadata": dict(m.metadata),
        "expires_at": None if m.expires_at is None else float(m.expires_at),
    }


def message_from_doc(d: Mapping[str, Any]) -> StoredMessage:
    return StoredMessage(
        agent_id=d["agent_id"],
        message_id=d["message_id"],
        seq=int(d["seq"]),
        role=d["role"],
        content=d["content"],
        tokens=int(d["tokens"]),
        created_at=float(d["created_at"]),
        name=d.get("name"),
        metadata=dict(d.get("metadata") or {}),
        expires_at=None if d.get("expires_at") is None else float(d["expires_at"]),
    )


# --- core memory --------------------------------------------------------------------------------
def block_key(agent_id: str, block_id: str) -> str:
    return keys.vertex_key(core_node(agent_id, block_id))


def summary_key(agent_id: str) -> str:
    return keys.vertex_key(summary_node(agent_id))


def block_doc(block: CoreBlockWrite, now: float) -> dict[str, Any]:
    return {
        "_key": block_key(block.agent_id, block.block_id),
        "kind": BLOCK_KIND,
        "agent_id": block.agent_id,
        "block_id": block.block_id,
        "role": block.role,
        "content": block.content,
        "tokens": block.tokens,
        "pinned": block.pinned,
        "metadata": dict(block.metadata),
        "updated_at": now,
    }


def block_from_doc(d: Mapping[str, Any], rev: str | None = None) -> CoreBlock:
    return CoreBlock(
        agent_id=d["agent_id"],
        block_id=d["block_id"],
        role=d["role"],
        content=d["content"],
        tokens=int(d["tokens"]),
        pinned=bool(d["pinned"]),
        rev=rev if rev is not None else d["_rev"],
        updated_at=float(d["updated_at"]),
        metadata=dict(d.get("metadata") or {}),
    )


def summary_doc(agent_id: str, text: str, tokens: int, batch_id: int, now: float) -> dict[str, Any]:
    # Block-shaped too, so get_core() can read the summary like the embedded adapter does.
    return {
        "_key": summary_key(agent_id),
        "kind": SUMMARY_KIND,
        "agent_id": agent_id,
        "block_id": SUMMARY_BLOCK_ID,
        "role": "system",
        "content": text,
        "tokens": tokens,
        "pinned": False,
        "metadata": {},
        "batch_id": batch_id,
        "updated_at": now,
    }


def summary_from_doc(d: Mapping[str, Any]) -> Summary:
    return Summary(
        agent_id=d["agent_id"],
        text=d["content"],
        tokens=int(d["tokens"]),
        rev=d["_rev"],
        batch_id=int(d["batch_id"]),
        updated_at=float(d["updated_at"]),
    )


# --- archival -----------------------------------------------------------------------------------
def chunk_key(c: ArchivalChunk) -> str:
    return keys.vertex_key(chunk_node(c.agent_id, c.doc_id, c.chunk_index, c.embedding_version))


def chunk_doc(c: ArchivalChunk, vector: list[float], now: float) -> dict[str, Any]:
    dimension = len(vector)
    return {
        "_key": chunk_key(c),
        "agent_id": c.agent_id,
        "doc_id": c.doc_id,
        "chunk_index": c.chunk_index,
        "text": c.text,
        "metric": c.metric,
        "dimension": dimension,
        vector_attribute(c.metric, dimension): vector,
        "embedding_version": c.embedding_version,
        "model_id": c.model_id,
        "char_start": c.char_start,
        "char_end": c.char_end,
        "source": c.source,
        "metadata": dict(c.metadata),
        "created_at": float(c.created_at) if c.created_at else now,
        "valid_until": None if c.valid_until is None else float(c.valid_until),
    }


def chunk_from_doc(d: Mapping[str, Any]) -> ArchivalChunk:
    metric = cast(Metric, d["metric"])
    attr = vector_attribute(metric, int(d["dimension"]))
    return ArchivalChunk(
        agent_id=d["agent_id"],
        doc_id=d["doc_id"],
        chunk_index=int(d["chunk_index"]),
        text=d["text"],
        embedding=[float(x) for x in d.get(attr) or []],
        metric=metric,
        embedding_version=d["embedding_version"],
        model_id=d["model_id"],
        char_start=int(d["char_start"]),
        char_end=int(d["char_end"]),
        source=d.get("source", ""),
        metadata=dict(d.get("metadata") or {}),
        created_at=float(d["created_at"]),
        valid_until=None if d.get("valid_until") is None else float(d["valid_until"]),
    )


# --- events -------------------------------------------------------------------------------------
def event_key(event_id: str) -> str:
    return keys.vertex_key(event_node(event_id))


def event_doc(e: MemoryEvent, event_id: str, created_at: float) -> dict[str, Any]:
    return {
        "_key": event_key(event_id),
        "event_id": event_id,
        "agent_id": e.agent_id,
        "kind": e.kind,
        "payload": dict(e.payload),
        "created_at": created_at,
        "actor": e.actor,
        "idempotency_key": e.idempotency_key,
    }


def event_from_doc(d: Mapping[str, Any]) -> MemoryEvent:
    return MemoryEvent(
        agent_id=d["agent_id"],
        kind=d["kind"],
        payload=dict(d.get("payload") or {}),
        event_id=d["event_id"],
        created_at=float(d["created_at"]),
        actor=d.get("actor", "system"),
        idempotency_key=d.get("idempotency_key"),
    )


# --- edges --------------------------------------------------------------------------------------
def edge_doc(e: Edge, now: float) -> dict[str, Any]:
    return {
        "_key": keys.edge_key(e.kind, e.src, e.dst),
        "_from": keys.vertex_id(e.src),
        "_to": keys.vertex_id(e.dst),
        "kind": e.kind,
        "agent_id": e.agent_id,
        "created_at": float(e.created_at) if e.created_at else now,
        "attributes": dict(e.attributes),
        "src": [e.src.collection, e.src.key],
        "dst": [e.dst.collection, e.dst.key],
    }


def ref_from_pair(pair: Any) -> NodeRef | None:
    if isinstance(pair, list | tuple) and len(pair) == 2 and pair[0] in names.NODE_COLLECTIONS:
        return NodeRef(pair[0], str(pair[1]))
    return None
