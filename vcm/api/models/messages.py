"""The main context: appending messages, reading the context and its gauges, evicting
(:mod:`vcm.api.routes.messages`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field, field_validator

from vcm.api.models.common import IDEMPOTENCY_FIELD, BatchOut, RequestBody, Role
from vcm.hotpath.context import AssembledContext
from vcm.service import BuiltContext
from vcm.types import AppendResult


class ListedMessage(RequestBody):
    """One message: appended alone (:class:`MessageIn`) or in a list (:class:`MessagesIn`)."""

    role: Role
    content: str
    name: str | None = None
    pinned: bool = False
    metadata: dict[str, Any] | None = None
    tool_call_id: str | None = Field(None, max_length=256)
    tool_calls: list[dict[str, Any]] | None = None
    created_at: float | str | None = Field(
        None,
        description="When the message was said, for history imported with its own times: an ISO 8601 time "
        "(UTC unless it says otherwise) or seconds since the epoch; default now. At most 5 minutes ahead of "
        "the server's clock. Messages stay in the order appended.",
        examples=["2023-05-08T13:56:00Z"],
    )

    @field_validator("created_at")
    @classmethod
    def _seconds(cls, value: float | str | None) -> float | None:
        """An ISO 8601 time as seconds since the epoch (the range is the service's to check)."""
        if not isinstance(value, str):
            return value
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                "created_at must be an ISO 8601 time (2023-05-08T13:56:00Z) or seconds since the epoch"
            ) from None
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()

    def said_at(self) -> float | None:
        """``created_at`` as seconds (a string was converted when the body was read)."""
        return float(self.created_at) if self.created_at is not None else None

    def fields(self) -> dict[str, Any]:
        """The message as ``MemoryService.append_many`` takes it."""
        out = {"role": self.role, "content": self.content, "name": self.name, "pinned": self.pinned,
               "metadata": self.metadata, "tool_call_id": self.tool_call_id, "tool_calls": self.tool_calls,
               "created_at": self.said_at()}  # fmt: skip
        return {k: v for k, v in out.items() if v is not None}


class MessageIn(ListedMessage):
    idempotency_key: str | None = IDEMPOTENCY_FIELD


class MessagesIn(RequestBody):
    """A conversation appended in one call, in order (history imported with its times)."""

    messages: list[ListedMessage] = Field(min_length=1, max_length=1000)
    idempotency_key: str | None = Field(
        None,
        max_length=240,
        description="Keys each message as <key>:<index>: a retry of the whole list replays what went in and "
        "goes on from there (the Idempotency-Key header does the same).",
    )
    first_index: int = Field(
        0,
        ge=0,
        le=10**9,
        description="The index of the first message in a longer conversation sent in lists: message i is keyed "
        "<key>:<first_index + i>, so a retry in lists of another size replays each message (needs a key).",
    )


class AppendOut(BaseModel):
    message_id: str
    seq: int
    tokens: int
    total: int
    action: str
    batch: BatchOut | None
    pressure_message_id: str | None
    target_unreachable: bool
    replayed: bool

    @classmethod
    def of(cls, res: AppendResult) -> AppendOut:
        return cls(
            message_id=res.message_id,
            seq=res.seq,
            tokens=res.tokens,
            total=res.total,
            action=res.action,
            batch=BatchOut.of(res.batch),
            pressure_message_id=res.pressure_message_id,
            target_unreachable=res.target_unreachable,
            replayed=res.replayed,
        )


class AppendManyOut(BaseModel):
    results: list[AppendOut]


class Gauges(BaseModel):
    window: int
    max: int
    system: int
    working: int
    summary: int
    placeholders: int
    fifo: int
    pinned: int
    total: int
    free: int
    occupancy: float


class InjectedLayerOut(BaseModel):
    name: str
    tokens: int
    items: int
    dropped: int = Field(description="items its budget left out")
    sources: list[dict[str, Any]] = Field(description="{kind: fact|message|state|skill, id, tainted?} per item")


class ContextOut(BaseModel):
    agent_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    gauges: Gauges
    message_tokens: list[int]
    layers: list[str] = Field(
        description="each message's layer: system, working, summary, placeholder or fifo; with built=true also "
        "identity, tools_hint, state, sticky, memory and skills"
    )
    layer_tokens: dict[str, int] = Field(default_factory=dict, description="tokens per layer")
    injected: list[InjectedLayerOut] = Field(
        default_factory=list, description="with built=true: the layers the builder added, with their sources"
    )
    room: int | None = Field(None, description="with built=true: tokens the injected layers could use")
    query: str | None = Field(None, description="with built=true: what relevant memory and skills were chosen for")
    problems: list[dict[str, str]] = Field(default_factory=list, description="skill files left out, and why")
    left_out: int | None = Field(
        None,
        description="with built=true: the FIFO's oldest messages this prompt left out to keep [context] turn_room "
        "for the injected layers near the flush line (the hot state still holds them)",
    )

    @classmethod
    def of(cls, agent_id: str, ctx: AssembledContext) -> ContextOut:
        return cls(
            agent_id=agent_id,
            messages=ctx.messages,
            tools=ctx.tools,
            gauges=Gauges.model_validate(ctx.gauges.as_dict()),
            message_tokens=ctx.message_tokens,
            layers=ctx.layers,
            layer_tokens=ctx.layer_tokens(),
        )

    @classmethod
    def built(cls, agent_id: str, ctx: BuiltContext) -> ContextOut:
        return cls(
            agent_id=agent_id,
            messages=ctx.messages,
            tools=ctx.tools,
            gauges=Gauges.model_validate(ctx.gauges.as_dict()),
            message_tokens=ctx.message_tokens,
            layers=ctx.layers,
            layer_tokens=ctx.layer_tokens(),
            injected=[
                InjectedLayerOut(
                    name=x.name, tokens=x.tokens, items=x.items, dropped=x.dropped, sources=list(x.sources)
                )
                for x in ctx.injected
            ],
            room=ctx.room,
            query=ctx.query,
            problems=ctx.problems,
            left_out=ctx.left_out,
        )


class EvictIn(RequestBody):
    count: int = Field(ge=1, le=10_000)
    idempotency_key: str | None = IDEMPOTENCY_FIELD


class EvictOut(BaseModel):
    total: int
    batch: BatchOut | None
