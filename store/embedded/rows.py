"""Conversions between SQLite rows and the port's dataclasses (pure)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import numpy as np

from vcm.store.types import (
    ArchivalChunk,
    CoreBlock,
    MemoryEvent,
    StoredMessage,
    Summary,
)

MESSAGE_COLUMNS = "id, agent_id, message_id, seq, role, content, tokens, created_at, name, metadata, expires_at"
CORE_COLUMNS = "agent_id, block_id, role, content, tokens, pinned, rev, updated_at, metadata, batch_id"
ARCHIVAL_COLUMNS = (
    "id, agent_id, doc_id, chunk_index, embedding_version, metric, embedding, text, model_id, "
    "char_start, char_end, source, metadata, created_at, valid_until"
)
EVENT_COLUMNS = "seq, event_id, agent_id, kind, payload, created_at, actor, idempotency_key"


def dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, sort_keys=True, separators=(",", ":"))


def message(row: sqlite3.Row) -> StoredMessage:
    return StoredMessage(
        agent_id=row["agent_id"],
        message_id=row["message_id"],
        seq=row["seq"],
        role=row["role"],
        content=row["content"],
        tokens=row["tokens"],
        created_at=row["created_at"],
        name=row["name"],
        metadata=json.loads(row["metadata"]),
        expires_at=row["expires_at"],
    )


def core_block(row: sqlite3.Row) -> CoreBlock:
    return CoreBlock(
        agent_id=row["agent_id"],
        block_id=row["block_id"],
        role=row["role"],
        content=row["content"],
        tokens=row["tokens"],
        pinned=bool(row["pinned"]),
        rev=row["rev"],
        updated_at=row["updated_at"],
        metadata=json.loads(row["metadata"]),
    )


def summary(row: sqlite3.Row) -> Summary:
    return Summary(
        agent_id=row["agent_id"],
        text=row["content"],
        tokens=row["tokens"],
        rev=row["rev"],
        batch_id=row["batch_id"],
        updated_at=row["updated_at"],
    )


def chunk(row: sqlite3.Row, *, with_embedding: bool = True) -> ArchivalChunk:
    """A chunk from its row; without the embedding when only filters look at it."""
    embedding: list[float] = np.frombuffer(row["embedding"], dtype="<f4").tolist() if with_embedding else []
    return ArchivalChunk(
        agent_id=row["agent_id"],
        doc_id=row["doc_id"],
        chunk_index=row["chunk_index"],
        text=row["text"],
        embedding=embedding,
        metric=row["metric"],
        embedding_version=row["embedding_version"],
        model_id=row["model_id"],
        char_start=row["char_start"],
        char_end=row["char_end"],
        source=row["source"],
        metadata=json.loads(row["metadata"]),
        created_at=row["created_at"],
        valid_until=row["valid_until"],
    )


def event(row: sqlite3.Row) -> MemoryEvent:
    return MemoryEvent(
        agent_id=row["agent_id"],
        kind=row["kind"],
        payload=json.loads(row["payload"]),
        event_id=row["event_id"],
        created_at=row["created_at"],
        actor=row["actor"],
        idempotency_key=row["idempotency_key"],
    )
