"""Write rules both adapters must apply identically (pure, no I/O).

The port fixes *what* a write means (``store/port.py``); these are the details that make two
adapters interchangeable on the same data and the same callers: the ids they derive, the
payload of the ``evict`` event, how an idempotent ``put_core`` recognises its replay, which
errors a lost optimistic lock raises, and how a fault hook aborts a write.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from vcm.errors import IdempotencyMismatch, RevConflict, StoreUnavailable, VcmError
from vcm.store.audit_names import audit_id
from vcm.store.cursor import fingerprint
from vcm.store.port import FaultHook
from vcm.store.types import CoreBlock, CoreBlockWrite, EvictionCommit, MemoryEvent, StoredMessage


def fire_fault(hook: FaultHook | None, point: str) -> None:
    """Call a test fault hook; whatever it raises aborts the write as a store failure would."""
    if hook is None:
        return
    try:
        hook(point)
    except VcmError:
        raise
    except Exception as exc:
        raise StoreUnavailable(f"operation aborted at {point}: {exc}") from exc


def distinct(messages: Sequence[StoredMessage]) -> list[StoredMessage]:
    """First occurrence of each (agent, message id): a batch may repeat a message."""
    seen: dict[tuple[str, str], StoredMessage] = {}
    for m in messages:
        seen.setdefault((m.agent_id, m.message_id), m)
    return list(seen.values())


# --- ids ------------------------------------------------------------------------------------------
def event_id(event: MemoryEvent) -> str:
    """The stored id of an event: its own, else one derived from its idempotency key (so a
    replay lands on the same row), else a fresh random one."""
    if event.event_id:
        return event.event_id
    if event.idempotency_key is None:
        return uuid.uuid4().hex
    return "key-" + digest(event.agent_id, event.idempotency_key)


def evict_event_id(agent_id: str, batch_id: int) -> str:
    """Id of the ``evict`` event of one batch: a replayed commit finds the same event."""
    return audit_id(agent_id, "evict", batch_id)


def evict_event_payload(commit: EvictionCommit, batch: Sequence[StoredMessage], summary_rev: str) -> dict[str, Any]:
    """Payload of the ``evict`` event: the caller's ``event`` mapping plus what was committed."""
    return {
        **dict(commit.event),
        "batch_id": commit.batch_id,
        "message_ids": [m.message_id for m in batch],
        "summary_rev": summary_rev,
    }


def digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


# --- put_core idempotency ---------------------------------------------------------------------------
def core_write_fingerprint(block: CoreBlockWrite) -> str:
    """What a ``put_core`` writes, so a reused idempotency key with other content is caught."""
    return fingerprint(
        block.agent_id,
        block.block_id,
        block.role,
        block.content,
        block.tokens,
        block.pinned,
        dict(block.metadata),
    )


def core_block_to_json(block: CoreBlock) -> dict[str, Any]:
    """The first result of a ``put_core``, as stored for its replays."""
    return {
        "agent_id": block.agent_id,
        "block_id": block.block_id,
        "role": block.role,
        "content": block.content,
        "tokens": block.tokens,
        "pinned": block.pinned,
        "rev": block.rev,
        "updated_at": block.updated_at,
        "metadata": dict(block.metadata),
    }


def core_block_from_json(data: Mapping[str, Any]) -> CoreBlock:
    return CoreBlock(**dict(data))


def replayed_core_write(stored_fingerprint: Any, stored_result: Mapping[str, Any], content: str, key: str) -> CoreBlock:
    """The answer to a ``put_core`` whose idempotency key was seen: the first result, if the
    content is the same."""
    if stored_fingerprint != content:
        raise IdempotencyMismatch(
            f"idempotency key {key!r} was used for a different write; use a new key for new content",
            idempotency_key=key,
        )
    return core_block_from_json(stored_result)


# --- optimistic locking -------------------------------------------------------------------------------
def state_rev_matches(expected: str | None, current: str | None) -> bool:
    """A state write's optimistic lock: None writes anyway, ``""`` only creates (the key must
    not exist or be expired: two instances creating one key cannot both win), a rev must be the
    current one."""
    return expected is None or expected == (current if current is not None else "")


def rev_conflict(what: str, expected: str | None, current: str | None) -> RevConflict:
    """The error of a lost optimistic lock, with a hint for each way it can be lost."""
    if current is None:
        hint = "it does not exist (any more); create it with expected_rev=None"
    elif expected == "":
        hint = "it already exists (created elsewhere first); read it and pass its rev"
    elif expected is None:
        hint = "it already exists; read it and pass its rev"
    else:
        hint = "it changed since you read it; read it again and retry"
    return RevConflict(
        f"revision conflict on {what}: expected {expected!r}, current {current!r}; {hint}",
        expected_rev=expected,
        current_rev=current,
    )


def restored_version(captured: int, current: int | None) -> int:
    """The version a fact put back by a restore gets (``reset_context`` with memory): its own,
    unless the store holds it now under another version, then one above both, so a version
    seen between the snapshot and the restore never matches different contents."""
    return captured if current is None or current == captured else max(captured, current) + 1
