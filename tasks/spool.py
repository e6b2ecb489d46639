"""Write-behind of appended messages to the store's recall log.

Idempotent by message id (the store keeps the first write). A message no longer in Redis has left
with its eviction batch, which committed it to the store first, so it is skipped, not lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hotpath.state import HotState
from hotpath.types import Message
from store.port import MemoryStore
from store.types import StoredMessage
from tasks.faults import NO_FAULTS, Faults
from tasks.message_vectors import MessageVectorizer, Turn, message_text

# Hot-path fields with no StoredMessage column travel in metadata under this key.
VCM_METADATA = "_vcm"


def stored_message(agent_id: str, message: Message, *, ttl_s: int = 0) -> StoredMessage:
    """The store's form of a hot-path message; the spooler and the eviction commit share it, so
    whichever writes first writes the same row."""
    extra: dict[str, Any] = {}
    if message.kind != "message":
        extra["kind"] = message.kind
    if message.pinned:
        extra["pinned"] = True
    if message.tool_call_id:
        extra["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        extra["tool_calls"] = [dict(c) for c in message.tool_calls]
    metadata = dict(message.metadata)
    if extra:
        metadata[VCM_METADATA] = extra
    return StoredMessage(
        agent_id=agent_id,
        message_id=message.id,
        seq=message.seq,
        role=message.role,
        content=message.content,
        tokens=message.tokens,
        created_at=message.created_at,
        name=message.name,
        metadata=metadata,
        expires_at=message.created_at + ttl_s if ttl_s else None,
    )


@dataclass(frozen=True)
class SpoolOutcome:
    asked: int
    found: int  # still in Redis
    written: int  # new in the store
    embedded: int | None = None  # new message vectors, when a vectorizer was given

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"outcome": "spooled", "asked": self.asked, "found": self.found, "written": self.written}
        if self.embedded is not None:
            out["embedded"] = self.embedded
        return out


def spool_messages(
    hot: HotState,
    store: MemoryStore,
    agent_id: str,
    message_ids: Sequence[str],
    *,
    ttl_s: int = 0,
    faults: Faults = NO_FAULTS,
    vectorizer: MessageVectorizer | None = None,
) -> SpoolOutcome:
    """Write the messages still in Redis to the store; with a ``vectorizer``, also embed them (in
    the context of the turns before them still in the agent's window) for vector recall. Both
    writes are idempotent, so a retried spool re-embeds at worst and stores nothing twice."""
    messages = hot.get_messages(agent_id, list(dict.fromkeys(message_ids)))
    faults.point("spool.before_write", agent_id)
    written = store.spool_messages([stored_message(agent_id, m, ttl_s=ttl_s) for m in messages]) if messages else 0
    if vectorizer is None:
        return SpoolOutcome(len(message_ids), len(messages), written)
    embedded = embed_messages(hot, store, agent_id, messages, vectorizer)
    return SpoolOutcome(len(message_ids), len(messages), written, embedded)


def embed_messages(
    hot: HotState, store: MemoryStore, agent_id: str, messages: Sequence[Message], vectorizer: MessageVectorizer
) -> int:
    """Embed spooled messages with text (context: the agent's window, read once) and store the
    vectors under the vectorizer's version. Returns how many were new."""
    targets = [m for m in messages if m.content.strip()]
    if not targets:
        return 0
    window = hot.snapshot(agent_id).fifo if vectorizer.context else []
    history = [Turn(m.seq, message_text(m.content, m.name)) for m in window if m.content.strip()]
    vectors = vectorizer.embed(history, [Turn(m.seq, message_text(m.content, m.name)) for m in targets])
    pairs = [(m.id, [float(x) for x in v]) for m, v in zip(targets, vectors, strict=True) if v is not None]
    return store.put_message_vectors(agent_id, pairs, vectorizer.version) if pairs else 0
