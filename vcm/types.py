"""Domain types of the hot path (plain data, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant", "tool"})
Action = Literal["ok", "warning", "flush"]


def marked(marker: str | None, content: str) -> str:
    """A message's content as the prompt shows it: its time marker, if any, in front."""
    return f"{marker} {content}" if marker else content


@dataclass(frozen=True)
class Message:
    """A FIFO message as the hot state holds it; ``tokens`` was counted once, on append."""

    id: str
    seq: int
    role: str
    content: str
    tokens: int
    created_at: float
    pinned: bool = False
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: Sequence[Mapping[str, Any]] | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "message"  # "message" | "pressure" (vcm's memory-pressure notice)
    actor: str | None = None  # who appended it (audit); None for vcm's own messages
    idempotency_key: str | None = None
    # When it was said, as the prompt shows it (vcm.hotpath.timeline); counted in ``tokens``.
    marker: str | None = None
    # When vcm took it, where the caller gave ``created_at`` (history imported with its own
    # times): idempotency records, audit rows and the write-behind's grace period run on this.
    appended_at: float | None = None

    @property
    def appended(self) -> float:
        """When vcm took the message (its ``created_at`` unless the caller dated it)."""
        return self.created_at if self.appended_at is None else self.appended_at

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        return cls(
            id=data["id"],
            seq=int(data["seq"]),
            role=data["role"],
            content=data["content"],
            tokens=int(data["tokens"]),
            created_at=float(data["created_at"]),
            pinned=bool(data.get("pinned", False)),
            name=data.get("name"),
            tool_call_id=data.get("tool_call_id"),
            tool_calls=data.get("tool_calls") or None,
            metadata=data.get("metadata") or {},
            kind=data.get("kind", "message"),
            actor=data.get("actor"),
            idempotency_key=data.get("idempotency_key"),
            marker=data.get("marker") or None,
            appended_at=None if data.get("appended_at") is None else float(data["appended_at"]),
        )

    def as_json(self) -> dict[str, Any]:
        """The hot state's form (the inverse of :meth:`from_json`)."""
        out: dict[str, Any] = {
            "id": self.id,
            "seq": self.seq,
            "role": self.role,
            "content": self.content,
            "tokens": self.tokens,
            "created_at": self.created_at,
            "pinned": self.pinned,
            "kind": self.kind,
        }
        optional = {
            "name": self.name,
            "tool_call_id": self.tool_call_id,
            "tool_calls": [dict(c) for c in self.tool_calls] if self.tool_calls else None,
            "metadata": dict(self.metadata) if self.metadata else None,
            "actor": self.actor,
            "idempotency_key": self.idempotency_key,
            "marker": self.marker,
            "appended_at": self.appended_at,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out

    def chat(self) -> dict[str, Any]:
        """The message as an OpenAI chat-completions request holds it (with its time marker)."""
        out: dict[str, Any] = {"role": self.role, "content": marked(self.marker, self.content)}
        if self.name:
            out["name"] = self.name
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            out["tool_calls"] = list(self.tool_calls)
        return out


@dataclass(frozen=True)
class Block:
    """A working (core memory) block."""

    id: str
    role: str
    content: str
    tokens: int
    pinned: bool
    rev: str
    updated_at: float
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Block:
        return cls(
            id=data["id"],
            role=data["role"],
            content=data["content"],
            tokens=int(data["tokens"]),
            pinned=bool(data["pinned"]),
            rev=str(data["rev"]),
            updated_at=float(data["updated_at"]),
            metadata=data.get("metadata") or {},
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "role": self.role,
            "content": self.content,
            "tokens": self.tokens,
            "pinned": self.pinned,
            "rev": self.rev,
            "updated_at": self.updated_at,
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True)
class AgentImage:
    """An agent's hot state beyond its configuration, as rebuilt from the store or a snapshot."""

    fifo: Sequence[Message]
    blocks: Sequence[Block]
    summary_text: str
    summary_tokens: int
    summary_batch: int  # the last batch folded into the summary (0: none)
    id_floor: int  # sequences continue from here
    token_sha256: str | None = None
    # Messages appended over the agent's life, as the store counts them (the ``appended`` counter
    # resumes from it; 0: count the FIFO only).
    appended: int = 0
    # The agent record's incarnation: a rebuilt hot state keeps the one its cold-path jobs check.
    incarnation: str = ""


@dataclass(frozen=True)
class BatchInfo:
    """An eviction batch begun by the hot path (step 1 of the protocol)."""

    id: int
    count: int
    tokens: int
    placeholder: int  # tokens it added to the one placeholder all pending batches share (0: joined it)
    message_ids: tuple[str, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> BatchInfo | None:
        if not data:
            return None
        ids = data.get("message_ids") or []
        return cls(
            id=int(data["id"]),
            count=int(data["count"]),
            tokens=int(data["tokens"]),
            placeholder=int(data["placeholder"]),
            message_ids=tuple(ids) if isinstance(ids, list) else (),
        )


@dataclass(frozen=True)
class Backlog:
    """One agent's write-behind backlog (:mod:`vcm.hotpath.backlog`): appends acknowledged and
    not yet in the store, as an append reported it or as read."""

    messages: int
    oldest_at: float | None  # when its oldest message was acknowledged (None: empty)

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.oldest_at) if self.oldest_at is not None else 0.0

    def over(self, max_messages: int, max_s: float, now: float) -> bool:
        """Past either bound (``[durability] write_behind_max_messages`` / ``write_behind_max_s``;
        0: that bound is off)."""
        by_size = max_messages > 0 and self.messages > max_messages
        by_age = max_s > 0 and self.age_s(now) > max_s
        return by_size or by_age


@dataclass(frozen=True)
class AppendResult:
    message_id: str
    seq: int
    tokens: int
    total: int
    action: Action
    batch: BatchInfo | None
    pressure_message_id: str | None
    target_unreachable: bool
    replayed: bool = False
    gauges: Gauges | None = None  # the main context right after this append (None: not reported)
    # The message as the hot state now holds it (None on a replay: the first call's is in Redis).
    message: Message | None = None
    # Write-behind only: the agent's backlog of messages not yet in the store, this one included
    # (None on a replay and when appends are written through).
    backlog: Backlog | None = None
    # A keyed append's idempotency record as Redis keeps it, (fingerprint, result JSON); None
    # unkeyed and on a replay. The store's copy is made from it, not read back from Redis, which
    # may have lost it since (a FLUSHDB between the append and its write-through).
    record: tuple[str, str] | None = None
    # The agent's incarnation the append ran under (None on a replay). Its store writes are fenced
    # by it: a delete (or a delete and re-create) racing them lands nothing of the old agent, and
    # a FLUSHDB (the agent gone from Redis, its store record unchanged) is told from a delete.
    incarnation: str | None = None


@dataclass(frozen=True)
class BlockResult:
    block_id: str
    rev: str | None
    tokens: int
    total: int
    action: Action
    deleted: bool
    batch: BatchInfo | None
    pressure_message_id: str | None
    replayed: bool = False
    # The block before this write (None when it did not exist or on a replay), for the audit row.
    previous: Block | None = None


@dataclass(frozen=True)
class FinishResult:
    batch_id: int
    summary_rev: int
    total: int
    action: Action
    batch: BatchInfo | None  # a follow-up batch, when the new summary pushed past flush
    pressure_message_id: str | None = None
    replayed: bool = False


@dataclass(frozen=True)
class AgentInfo:
    agent_id: str
    model: str
    window: int
    max_tokens: int
    system_tokens: int


@dataclass(frozen=True)
class Gauges:
    """Token gauges of one main context."""

    window: int
    max_tokens: int
    system: int
    working: int
    summary: int
    placeholders: int
    fifo: int
    pinned: int

    @property
    def total(self) -> int:
        return self.system + self.working + self.summary + self.placeholders + self.fifo

    @property
    def free(self) -> int:
        return self.max_tokens - self.total

    @property
    def occupancy(self) -> float:
        return self.total / self.window

    def as_dict(self) -> dict[str, float | int]:
        return {
            "window": self.window,
            "max": self.max_tokens,
            "system": self.system,
            "working": self.working,
            "summary": self.summary,
            "placeholders": self.placeholders,
            "fifo": self.fifo,
            "pinned": self.pinned,
            "total": self.total,
            "free": self.free,
            "occupancy": round(self.occupancy, 4),
        }


@dataclass(frozen=True)
class IngestRequest:
    """One document handed to the ``ingest`` queue: everything the worker needs, no objects."""

    agent_id: str
    job_id: str
    doc_id: str
    text: str
    source: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    actor: str = "system"
    idempotency_key: str | None = None
    # The agent's incarnation when the document was submitted: the chunks are stored only while
    # the agent still holds it (None: a request queued before incarnations; the job reads it).
    incarnation: str | None = None

    def as_kwargs(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "job_id": self.job_id,
            "doc_id": self.doc_id,
            "text": self.text,
            "source": self.source,
            "metadata": dict(self.metadata),
            "actor": self.actor,
            "idempotency_key": self.idempotency_key,
            **({} if self.incarnation is None else {"incarnation": self.incarnation}),
        }


class MaintenanceJob(StrEnum):
    """The periodic maintenance jobs, named once: the beat schedule, the Celery tasks, the
    run-now paths (``vcm maintenance run``, ``POST /v1/maintenance/{job}``) and the audit rows
    of their runs all use these names (``vcm.tasks.maintenance`` holds what each one does)."""

    EXPIRE = "expire"  # recall retention, expired facts, state keys and snapshots
    SWEEP = "sweep"  # re-drive stuck eviction batches, spool what the write-behind missed
    CONSOLIDATE = "consolidate"  # shadow facts through the replay test
    SNAPSHOT = "snapshot"  # a periodic snapshot of every agent
