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

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": "spooled", "asked": self.asked, "found": self.found, "written": self.written}


def spool_messages(
    hot: HotState,
    store: MemoryStore,
    agent_id: str,
    message_ids: Sequence[str],
    *,
    ttl_s: int = 0,
    faults: Faults = NO_FAULTS,
) -> SpoolOutcome:
    messages = hot.get_messages(agent_id, list(dict.fromkeys(message_ids)))
    faults.point("spool.before_write", agent_id)
    written = store.spool_messages([stored_message(agent_id, m, ttl_s=ttl_s) for m in messages]) if messages else 0
    return SpoolOutcome(len(message_ids), len(messages), written)
