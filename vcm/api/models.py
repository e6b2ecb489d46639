"""Request and response bodies of the HTTP API (they are also its OpenAPI documentation).

Request bodies are strict (``"true"`` is not a boolean, ``"5"`` not a number) and closed (an unknown
field is an error, so a typo never silently drops a setting). Lengths, roles and ids are checked by
:mod:`vcm.validation` behind the service, so the limits live in one place; here a body is only
refused for what no layer below can represent: lone UTF-16 surrogates and non-finite numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, model_validator

from vcm.context_builder import BuiltContext
from vcm.hotpath.context import AssembledContext
from vcm.store.types import ArchivalHit, MemoryEvent, StoredMessage
from vcm.types import AgentInfo, BatchInfo, Block, BlockResult

MAX_JSON_DEPTH = 64
IDEMPOTENCY_FIELD = Field(
    None,
    description="Same as the Idempotency-Key header: a retry with the same key returns the first result.",
)


def _representable(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` cannot be stored and sent on (None when it can)."""
    if depth > MAX_JSON_DEPTH:
        return f"nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains text that is not valid UTF-8 (a lone surrogate)"
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "contains NaN or Infinity, which JSON cannot carry"
    if isinstance(value, Mapping):
        for key, item in value.items():
            why = _representable(key, depth + 1) or _representable(item, depth + 1)
            if why:
                return why
    elif isinstance(value, list | tuple):
        for item in value:
            why = _representable(item, depth + 1)
            if why:
                return why
    return None


class RequestBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _json_safe(cls, data: Any) -> Any:
        why = _representable(data)
        if why:
            raise ValueError(f"the body {why}")
        return data


Role = Literal["system", "user", "assistant", "tool"]


class AgentCreate(RequestBody):
    agent_id: str = Field(description="1-128 of letters, digits, '_', '.', '-'")
    model: str | None = Field(None, description="a model from the server's [models]; default: default_model")
    system_prompt: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list, description="tool schemas counted into the window")
    vcm_tools: bool = Field(False, description="also count vcm's own tool schemas (GET /v1/tools)")


class MessageIn(RequestBody):
    role: Role
    content: str
    name: str | None = None
    pinned: bool = False
    metadata: dict[str, Any] | None = None
    tool_call_id: str | None = Field(None, max_length=256)
    tool_calls: list[dict[str, Any]] | None = None
    idempotency_key: str | None = IDEMPOTENCY_FIELD


class BlockPut(RequestBody):
    content: str
    role: str = "working"
    pinned: bool = False
    metadata: dict[str, Any] | None = None
    rev: str | None = Field(
        None, alias="_rev", description="the block's current _rev (or send If-Match); omit to create"
    )
    idempotency_key: str | None = IDEMPOTENCY_FIELD
    justification: str | None = Field(
        None,
        max_length=2000,
        description="why content that reads like instructions to the model (TAINTED_CONTENT) belongs in the block: "
        "a sentence of at least 3 words",
    )


class RecallNote(RequestBody):
    content: str
    role: Role = "assistant"
    idempotency_key: str | None = Field(None, description="required here or as the Idempotency-Key header")


class EvictIn(RequestBody):
    count: int = Field(ge=1, le=10_000)
    idempotency_key: str | None = IDEMPOTENCY_FIELD


class ArchivalSearch(RequestBody):
    query: str
    k: int = Field(10, ge=1, le=1000)
    filters: dict[str, Any] | None = Field(None, description="equalities on doc_id, source or metadata keys")
    cursor: str | None = None


class ArchivalIngest(RequestBody):
    text: str
    doc_id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-/]{0,199}$")
    source: str = Field("", max_length=2048)
    metadata: dict[str, Any] | None = None
    idempotency_key: str | None = IDEMPOTENCY_FIELD


class ToolCall(RequestBody):
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments (its JSON schema)")
    tool_call_id: str | None = Field(None, max_length=256)


# --- responses --------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


# The error answers every /v1 route documents (OpenAPI), and the agent id of its path.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description}
    for status, description in [
        (401, "UNAUTHORIZED: missing or invalid bearer token"),
        (404, "NOT_FOUND: no such agent (or not yours), block or route"),
        (422, "VALIDATION_ERROR, TOKEN_BUDGET_EXCEEDED, PIN_LIMIT_EXCEEDED, IDEMPOTENCY_MISMATCH"),
        (503, "STORE_UNAVAILABLE"),
    ]
}
AgentId = Annotated[str, Path(description="the agent's id", max_length=128)]


class AgentOut(BaseModel):
    agent_id: str
    model: str
    window: int
    max_tokens: int
    system_tokens: int

    @classmethod
    def of(cls, info: AgentInfo) -> AgentOut:
        return cls(
            agent_id=info.agent_id,
            model=info.model,
            window=info.window,
            max_tokens=info.max_tokens,
            system_tokens=info.system_tokens,
        )


class AgentCreated(BaseModel):
    agent: AgentOut
    token: str = Field(description="the agent's bearer token; shown only now, stored only as a hash")


class AgentList(BaseModel):
    agents: list[str]


class TokenOut(BaseModel):
    agent_id: str
    token: str


class BatchOut(BaseModel):
    id: int
    count: int
    tokens: int
    placeholder: int
    message_ids: list[str]

    @classmethod
    def of(cls, batch: BatchInfo | None) -> BatchOut | None:
        if batch is None:
            return None
        return cls(
            id=batch.id,
            count=batch.count,
            tokens=batch.tokens,
            placeholder=batch.placeholder,
            message_ids=list(batch.message_ids),
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
        )


class BlockOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: str
    role: str
    content: str
    tokens: int
    pinned: bool
    rev: str = Field(alias="_rev")
    updated_at: float
    metadata: dict[str, Any]

    @classmethod
    def of(cls, block: Block) -> BlockOut:
        return cls(
            id=block.id,
            role=block.role,
            content=block.content,
            tokens=block.tokens,
            pinned=block.pinned,
            rev=block.rev,
            updated_at=block.updated_at,
            metadata=dict(block.metadata),
        )


class BlockList(BaseModel):
    blocks: list[BlockOut]


class BlockWriteOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    block_id: str
    rev: str | None = Field(alias="_rev", description="the new _rev; null after a delete")
    tokens: int
    total: int
    action: str
    deleted: bool
    batch: BatchOut | None
    pressure_message_id: str | None
    replayed: bool

    @classmethod
    def of(cls, res: BlockResult) -> BlockWriteOut:
        return cls(
            block_id=res.block_id,
            rev=res.rev,
            tokens=res.tokens,
            total=res.total,
            action=res.action,
            deleted=res.deleted,
            batch=BatchOut.of(res.batch),
            pressure_message_id=res.pressure_message_id,
            replayed=res.replayed,
        )


class EvictOut(BaseModel):
    total: int
    batch: BatchOut | None


class MessageOut(BaseModel):
    message_id: str
    seq: int
    role: str
    content: str
    tokens: int
    created_at: float
    name: str | None
    metadata: dict[str, Any]
    expires_at: float | None

    @classmethod
    def of(cls, msg: StoredMessage) -> MessageOut:
        return cls(
            message_id=msg.message_id,
            seq=msg.seq,
            role=msg.role,
            content=msg.content,
            tokens=msg.tokens,
            created_at=msg.created_at,
            name=msg.name,
            metadata=dict(msg.metadata),
            expires_at=msg.expires_at,
        )


class RecallHitOut(BaseModel):
    message: MessageOut
    score: float
    tainted: bool = Field(False, description="the text reads like instructions to the model (vcm.poisoning)")
    taint_reasons: list[str] = Field(default_factory=list)


class RecallPage(BaseModel):
    items: list[RecallHitOut]
    next_cursor: str | None
    mode: str


class ArchivalHitOut(BaseModel):
    doc_id: str
    chunk_index: int
    text: str
    score: float
    source: str
    metadata: dict[str, Any]
    char_start: int
    char_end: int
    embedding_version: str
    model_id: str
    created_at: float
    valid_until: float | None
    tainted: bool = False
    taint_reasons: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, hit: ArchivalHit, taint: Mapping[str, Any] | None = None) -> ArchivalHitOut:
        c = hit.chunk
        return cls(
            **dict(taint or {}),
            doc_id=c.doc_id,
            chunk_index=c.chunk_index,
            text=c.text,
            score=hit.score,
            source=c.source,
            metadata=dict(c.metadata),
            char_start=c.char_start,
            char_end=c.char_end,
            embedding_version=c.embedding_version,
            model_id=c.model_id,
            created_at=c.created_at,
            valid_until=c.valid_until,
        )


class ArchivalPage(BaseModel):
    items: list[ArchivalHitOut]
    next_cursor: str | None


class IngestOut(BaseModel):
    """An archival ingestion job (:class:`vcm.hotpath.jobs.IngestJob`): poll it until done or failed."""

    job_id: str
    doc_id: str
    status: Literal["queued", "running", "done", "failed"]
    created_at: float
    updated_at: float
    chunks_total: int | None = Field(None, description="known once the worker has planned the chunks")
    chunks_done: int
    submissions: int = Field(description="times the job was queued: a failed job is queued again on resubmission")
    result: dict[str, Any] | None = Field(None, description="when done: chunks, written, embedding_version, ...")
    error: dict[str, Any] | None = Field(None, description="when failed: the coded error")


class ToolList(BaseModel):
    tools: list[dict[str, Any]]


class ToolCallOut(BaseModel):
    """:meth:`vcm.tools.results.ToolResult.as_dict`: ``payload`` is what the model reads (with
    ``{"error": {...}}`` when ``ok`` is false); ``message`` is the chat message carrying it."""

    model_config = ConfigDict(extra="allow")

    ok: bool
    payload: dict[str, Any]
    name: str | None = None
    tool_call_id: str | None = None
    message: dict[str, Any] | None = None
    tokens: int | None = None
    heartbeat: dict[str, Any] | None = None


class EventOut(BaseModel):
    event_id: str
    agent_id: str
    kind: str
    payload: dict[str, Any]
    created_at: float
    actor: str
    idempotency_key: str | None

    @classmethod
    def of(cls, ev: MemoryEvent) -> EventOut:
        return cls(
            event_id=ev.event_id,
            agent_id=ev.agent_id,
            kind=ev.kind,
            payload=dict(ev.payload),
            created_at=ev.created_at,
            actor=ev.actor,
            idempotency_key=ev.idempotency_key,
        )


class EventPage(BaseModel):
    items: list[EventOut]
    next_cursor: str | None


class ComponentHealth(BaseModel):
    ok: bool
    backend: str


class HealthOut(BaseModel):
    ok: bool
    redis: ComponentHealth
    store: ComponentHealth


class Figure(BaseModel):
    conveyance: float = Field(description="C = (W*R*H/T) * Ctx^alpha; 0 when zeroed_by is not empty")
    zeroed_by: list[str]
    factors: dict[str, float] = Field(description="W, R, H, T, Ctx and Ctx's parts L, I, A, G")
    signals: dict[str, int]


class AgentFigure(Figure):
    message_vectors: int


class ReportOut(BaseModel):
    generated_at: float
    alpha: float
    overall: Figure
    unreachable: dict[str, str]
    agents: dict[str, AgentFigure]


# --- lifecycle and snapshots ---------------------------------------------------------------------
class RemovedOut(BaseModel):
    agent_id: str
    removed: dict[str, int] = Field(description="what went, by kind (counts only)")


class ResetOut(BaseModel):
    agent_id: str
    messages_to_recall: int


class SnapshotIn(RequestBody):
    kind: Literal["manual", "pre_upgrade"] = "manual"
    reason: str = Field("", max_length=1000)
    ttl_s: int | None = Field(None, ge=0, le=10 * 365 * 86400, description="lifetime; 0 keeps it; default: settings")
    idempotency_key: str | None = None


class SnapshotOut(BaseModel):
    agent_id: str
    snapshot_id: str
    kind: str
    reason: str
    sha256: str
    size: int = Field(description="bytes of the uncompressed state")
    created_at: float
    expires_at: float | None

    @classmethod
    def of(cls, s: Any) -> SnapshotOut:
        return cls(
            agent_id=s.agent_id,
            snapshot_id=s.snapshot_id,
            kind=s.kind,
            reason=s.reason,
            sha256=s.sha256,
            size=s.size,
            created_at=s.created_at,
            expires_at=s.expires_at,
        )


class SnapshotList(BaseModel):
    snapshots: list[SnapshotOut]


class RestoreOut(BaseModel):
    agent_id: str
    snapshot_id: str
    pre_restore_snapshot_id: str


class SummaryVersionOut(BaseModel):
    batch_id: int
    text: str
    tokens: int
    rev: str
    created_at: float


class SummaryVersionList(BaseModel):
    versions: list[SummaryVersionOut]


# --- facts and state -----------------------------------------------------------------------------
class EvidenceIn(RequestBody):
    kind: Literal["message", "tool_call", "document"]
    id: str = Field(min_length=1, max_length=256)
    span: list[int] | None = Field(None, min_length=2, max_length=2)


class FactIn(RequestBody):
    value: str = Field(min_length=1)
    type: str = Field(min_length=1, max_length=32)
    key: str | None = Field(None, max_length=256)
    scope: Literal["agent", "user", "domain"] = "agent"
    category: str = Field("", max_length=64)
    tags: list[str] = Field(default_factory=list)
    importance: float = Field(0.5, ge=0.0, le=1.0)
    confidence: float = Field(0.5, ge=0.0, le=1.0)
    evidence: list[EvidenceIn] = Field(default_factory=list, max_length=64)
    status: Literal["active", "shadow"] = "active"
    ttl_s: int | None = Field(None, ge=0, description="lifetime in seconds; 0 never expires; default: the type's")
    justification: str | None = Field(None, max_length=2000)
    idempotency_key: str | None = None


class FactOut(BaseModel):
    fact_id: str
    scope: str
    type: str
    key: str | None
    value: str
    category: str
    tags: list[str]
    importance: float
    confidence: float
    evidence: list[dict[str, Any]]
    status: str
    conflict_with: list[str]
    created_at: float
    updated_at: float
    last_used: float
    access_count: int
    expires_at: float | None
    version: int

    @classmethod
    def of(cls, f: Any) -> FactOut:
        return cls(
            fact_id=f.fact_id, scope=f.scope, type=f.type, key=f.key, value=f.value, category=f.category,
            tags=list(f.tags), importance=f.importance, confidence=f.confidence, evidence=[dict(e) for e in f.evidence],
            status=f.status, conflict_with=list(f.conflict_with), created_at=f.created_at, updated_at=f.updated_at,
            last_used=f.last_used, access_count=f.access_count, expires_at=f.expires_at, version=f.version,
        )  # fmt: skip


class RememberOut(BaseModel):
    decision: str = Field(description="MATCH, NEW or CONFLICT (REPLAYED for a keyed retry)")
    fact: FactOut
    conflicts: list[FactOut]


class FactList(BaseModel):
    facts: list[FactOut]


class FactHitOut(BaseModel):
    fact: FactOut
    score: float


class FactHits(BaseModel):
    hits: list[FactHitOut]


class FactArchiveIn(RequestBody):
    types: list[str] | None = None
    tags: list[str] | None = None
    category: str | None = None
    until: float | None = Field(None, description="only facts last updated before this unix time")
    max_importance: float | None = Field(None, ge=0.0, le=1.0, description="only facts at most this important")


class StateIn(RequestBody):
    value: Any
    ttl_s: int | None = Field(None, ge=1)
    rev: str | None = Field(
        None, alias="_rev", description='only if the key is still at this rev; "": only if it does not exist yet'
    )
    justification: str | None = Field(None, max_length=2000)


class StateOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    key: str
    value: Any
    rev: str = Field(alias="_rev")
    updated_at: float
    expires_at: float | None

    @classmethod
    def of(cls, e: Any) -> StateOut:
        return cls.model_validate(
            {"key": e.key, "value": e.value, "_rev": e.rev, "updated_at": e.updated_at, "expires_at": e.expires_at}
        )


class StateList(BaseModel):
    state: list[StateOut]


class FactStatsOut(BaseModel):
    facts: int
    by_type: dict[str, int]
    by_status: dict[str, int]
    by_scope: dict[str, int]
    conflicts: int = Field(description="live facts marked as conflicting with another value of their key")


class ArchivedOut(BaseModel):
    archived: int


class ConsolidatedOut(BaseModel):
    promoted: int
    kept_shadow: int
    contradicted: int


class WorkingSetItemOut(BaseModel):
    fact_id: str
    type: str
    key: str | None
    value: str
    utility: float
    conflict: bool
    evidence: list[dict[str, Any]]


class EntityGraphOut(BaseModel):
    entity: FactOut
    neighbours: list[FactOut] = Field(description="entities within depth relates_to hops, nearest first")
    relations: list[FactOut] = Field(description="relation facts (key source|relation|target) among them")
    mentioned_in: list[str] = Field(description="ids of messages that mention the entity")


class WorkingSetOut(BaseModel):
    sections: dict[str, list[WorkingSetItemOut]] = Field(
        description="goal, constraints, facts, entities, relations, open_questions, next_actions, risk_flags"
    )
    dropped: dict[str, int] = Field(description="items each section's cap left out (lowest utility first)")
