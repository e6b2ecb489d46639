"""Argument checks of the store port (pure), the same for both adapters.

Both adapters run these before anything is written or sent, so bad input raises
:class:`~vcm.errors.ValidationError`, writes nothing, and is refused alike whichever
adapter is configured. Checks that depend on stored state (a vector space's dimension) take
that state as an argument.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vcm.errors import ValidationError
from vcm.store.types import (
    EDGE_KINDS,
    SUMMARY_BLOCK_ID,
    CoreBlockWrite,
    Edge,
    EdgeKind,
    EvictionCommit,
    IdempotencyRecord,
    MemoryEvent,
    NodeRef,
    StoredMessage,
    SummaryVersion,
)

MAX_LIMIT = 1000
MAX_DEPTH = 32  # traversal depth; AQL's 1..@max_depth has no bound of its own
MAX_ID_CHARS = 512
METRICS = ("cosine", "l2")
DIRECTIONS = ("outbound", "inbound", "any")
NODE_COLLECTIONS = ("core_memory", "messages", "archival_docs", "memory_events", "agent_longterm_memory")


def identifier(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-empty string", field=name)
    if len(value) > MAX_ID_CHARS:
        raise ValidationError(f"{name} is longer than {MAX_ID_CHARS} characters", field=name)
    return value


def limit(name: str, value: Any, maximum: int = MAX_LIMIT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ValidationError(f"{name} must be an integer between 1 and {maximum}", field=name, value=repr(value))
    return value


def after_seq(value: Any) -> int:
    """A ``seq`` to page after: an integer from -1 (before the first message) up."""
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ValidationError("after_seq must be an integer >= -1", field="after_seq", value=repr(value))
    return value


def finite(name: str, value: Any, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{name} must be a finite number", field=name)
    return float(value)


def non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{name} must be a non-negative integer", field=name)
    return value


def json_mapping(name: str, value: Any) -> str:
    """A metadata/payload mapping as canonical JSON text, refusing what JSON cannot hold.

    The text is what the embedded adapter stores; ``json.loads`` of it is what any adapter reads
    back, so the ArangoDB adapter uses that to answer writes exactly as a later read would.
    """
    if not isinstance(value, Mapping):
        raise ValidationError(f"{name} must be a mapping", field=name)
    try:
        return json.dumps(dict(value), allow_nan=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{name} must be JSON-serialisable: {exc}", field=name) from exc


def json_value(name: str, value: Any) -> str:
    """Any JSON value as canonical text (state values)."""
    try:
        return json.dumps(value, allow_nan=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{name} must be JSON-serialisable: {exc}", field=name) from exc


def fact(f: Any) -> Any:
    """The shape of a fact as the store keeps it (business rules live in vcm.facts)."""
    from vcm.store.types import Fact

    if not isinstance(f, Fact):
        raise ValidationError("fact must be a Fact")
    identifier("agent_id", f.agent_id)
    identifier("fact_id", f.fact_id)
    identifier("scope", f.scope)
    identifier("type", f.type)
    identifier("status", f.status)
    text("value", f.value)
    if f.key is not None:
        identifier("key", f.key)
    text("category", f.category)
    for name in ("importance", "confidence", "created_at", "updated_at", "last_used"):
        finite(name, getattr(f, name))
    finite("expires_at", f.expires_at, optional=True)
    non_negative_int("access_count", f.access_count)
    for tag in f.tags:
        text("tag", tag)
    for e in f.evidence:
        json_mapping("evidence", e)
    if f.embedding is not None:
        vector = [finite("embedding", x) for x in f.embedding]
        if not vector:
            raise ValidationError("embedding must not be empty", field="embedding")
    return f


def text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a string", field=name)
    return value


def summary_rewrites(agent_id: str, versions: Any) -> list[SummaryVersion]:
    """Versions to rewrite (``rewrite_summaries``): of ``agent_id``, text and a token count each."""
    identifier("agent_id", agent_id)
    if isinstance(versions, (str, bytes)) or not isinstance(versions, Sequence):
        raise ValidationError("versions must be a list of SummaryVersion", field="versions")
    for v in versions:
        if not isinstance(v, SummaryVersion) or v.agent_id != agent_id:
            raise ValidationError("versions must be SummaryVersion instances of the agent", field="versions")
        text("summary", v.text)
        non_negative_int("tokens", v.tokens)
    return list(versions)


def message(m: Any) -> StoredMessage:
    if not isinstance(m, StoredMessage):
        raise ValidationError("messages must be StoredMessage instances")
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
        raise ValidationError("messages must be a sequence of StoredMessage")
    return [message(m) for m in items]


def core_write(block: Any) -> CoreBlockWrite:
    if not isinstance(block, CoreBlockWrite):
        raise ValidationError("block must be a CoreBlockWrite")
    identifier("agent_id", block.agent_id)
    block_id(block.block_id)
    identifier("role", block.role)
    text("content", block.content)
    non_negative_int("tokens", block.tokens)
    if not isinstance(block.pinned, bool):
        raise ValidationError("pinned must be true or false", field="pinned")
    json_mapping("metadata", block.metadata)
    return block


def block_id(value: Any) -> str:
    identifier("block_id", value)
    if value == SUMMARY_BLOCK_ID:
        raise ValidationError(
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
        raise ValidationError("commit must be an EvictionCommit")
    identifier("agent_id", commit.agent_id)
    non_negative_int("batch_id", commit.batch_id)
    text("summary_text", commit.summary_text)
    non_negative_int("summary_tokens", commit.summary_tokens)
    rev("expected_summary_rev", commit.expected_summary_rev, optional=True)
    json_mapping("event", commit.event)
    identifier("actor", commit.actor)
    keyed_events(commit.events)
    batch = messages(commit.messages)
    if not batch:
        raise ValidationError("an eviction batch needs at least one message")
    for m in batch:
        if m.agent_id != commit.agent_id:
            raise ValidationError(
                "every message of an eviction batch must belong to the batch's agent",
                message_id=m.message_id,
            )
    return commit


def event(e: Any) -> MemoryEvent:
    if not isinstance(e, MemoryEvent):
        raise ValidationError("event must be a MemoryEvent")
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
        raise ValidationError("graph nodes must be NodeRef instances")
    if n.collection not in NODE_COLLECTIONS:
        raise ValidationError(f"unknown node collection {n.collection!r}; use one of {', '.join(NODE_COLLECTIONS)}")
    identifier("node key", n.key)
    return n


def edge_kinds(kinds: Any) -> tuple[EdgeKind, ...]:
    if kinds is None:
        return tuple(EDGE_KINDS)
    if isinstance(kinds, str) or not isinstance(kinds, Sequence) or not kinds:
        raise ValidationError("kinds must be a non-empty sequence of edge kinds")
    for kind in kinds:
        if kind not in EDGE_KINDS:
            raise ValidationError(f"unknown edge kind {kind!r}; use one of {', '.join(EDGE_KINDS)}")
    return tuple(kinds)


def edge(e: Any) -> Edge:
    if not isinstance(e, Edge):
        raise ValidationError("edge must be an Edge")
    edge_kinds([e.kind])
    node(e.src)
    node(e.dst)
    identifier("agent_id", e.agent_id)
    finite("created_at", e.created_at)
    json_mapping("attributes", e.attributes)
    return e


def idempotency_record(r: Any) -> IdempotencyRecord:
    if not isinstance(r, IdempotencyRecord):
        raise ValidationError("idempotency records must be IdempotencyRecord instances")
    identifier("agent_id", r.agent_id)
    # Any printable key the hot path accepts (a blank one too), so not identifier().
    if not isinstance(r.key, str) or not 0 < len(r.key) <= MAX_ID_CHARS:
        raise ValidationError(f"key must be 1-{MAX_ID_CHARS} characters", field="key")
    identifier("fingerprint", r.fingerprint)
    text("result", r.result)
    finite("expires_at", r.expires_at)
    return r


def idempotency_records(items: Any) -> list[IdempotencyRecord]:
    """Checked records, the last of each (agent, key) kept: a later write of a key (a claim's
    settled result) wins over an earlier one in the same call."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise ValidationError("idempotency records must be a sequence of IdempotencyRecord")
    return list({(r.agent_id, r.key): r for r in (idempotency_record(r) for r in items)}.values())


def keyed_events(items: Any) -> list[MemoryEvent]:
    """Audit rows written along with other writes: each needs its own ``event_id``, which is
    what makes the write they ride with replay-safe for them too."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise ValidationError("events must be a sequence of MemoryEvent")
    out = [event(e) for e in items]
    for e in out:
        if not e.event_id:
            raise ValidationError("events written with other writes need an event_id", kind=e.kind)
    return out


@dataclass(frozen=True)
class EventListing:
    """The checked filters of ``query_events``."""

    kinds: list[str] | None
    since: float | None
    until: float | None
    actor: str | None
    idempotency_key: str | None

    def key(self) -> tuple[Any, ...]:
        """What a cursor is bound to (with the agent id)."""
        return (self.kinds, self.since, self.until, self.actor, self.idempotency_key)


def event_listing(
    agent_id: Any,
    kinds: Any,
    since: Any,
    limit_: Any,
    *,
    until: Any = None,
    actor: Any = None,
    idempotency_key: Any = None,
) -> EventListing:
    """Arguments of ``query_events``; the kinds come back sorted and distinct."""
    if agent_id is not None:
        identifier("agent_id", agent_id)
    kind_list: list[str] | None = None
    if kinds is not None:
        if isinstance(kinds, str) or not isinstance(kinds, Sequence) or not kinds:
            raise ValidationError("kinds must be a non-empty sequence of event kinds")
        kind_list = sorted({identifier("kind", k) for k in kinds})
    start = finite("since", since, optional=True)
    end = finite("until", until, optional=True)
    if start is not None and end is not None and start >= end:
        raise ValidationError("since must be before until", field="since")
    if actor is not None:
        identifier("actor", actor)
    if idempotency_key is not None:
        identifier("idempotency_key", idempotency_key)
    limit("limit", limit_)
    return EventListing(kind_list, start, end, actor, idempotency_key)


def traversal(start: Any, kinds: Any, max_depth: Any, direction: Any) -> tuple[EdgeKind, ...]:
    """Arguments of ``traverse``; returns the edge kinds to follow."""
    node(start)
    wanted = edge_kinds(kinds)
    limit("max_depth", max_depth, MAX_DEPTH)
    if direction not in DIRECTIONS:
        raise ValidationError(f"direction must be one of {', '.join(DIRECTIONS)}", field="direction")
    return wanted


def agent_memory(agent_id: str, memory: Any) -> Any:
    """An :class:`~vcm.store.types.AgentMemory` to put back for ``agent_id``: every fact, state
    key and edge is the agent's, and edges are fact edges (``reset_context`` replaces only those)."""
    from vcm.store.types import FACT_EDGE_KINDS, AgentMemory, StateEntry

    if not isinstance(memory, AgentMemory):
        raise ValidationError("memory must be an AgentMemory")
    for f in memory.facts:
        fact(f)
        if f.agent_id != agent_id:
            raise ValidationError("a fact of another agent in the memory to restore", field="facts")
    keys: set[str] = set()
    for s in memory.state:
        if not isinstance(s, StateEntry) or s.agent_id != agent_id:
            raise ValidationError("state entries must be the agent's StateEntry rows", field="state")
        identifier("key", s.key)
        json_value("value", s.value)
        finite("updated_at", s.updated_at)
        finite("expires_at", s.expires_at, optional=True)
        if s.key in keys:
            raise ValidationError(f"state key {s.key!r} twice in the memory to restore", field="state")
        keys.add(s.key)
    for e in memory.edges:
        edge(e)
        if e.agent_id != agent_id or e.kind not in FACT_EDGE_KINDS:
            raise ValidationError("memory edges must be the agent's fact edges", field="edges")
    return memory
