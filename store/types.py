"""Plain data carried across the store port. No I/O here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from vcm.store.audit_names import Actor

T = TypeVar("T")

Metric = Literal["cosine", "l2"]
# recall_log: summary -> evicted message; cites: fact -> its evidence message; derived_from: chunk
# -> previous chunk; mentions: message -> entity fact it names; relates_to: entity -> entity
# (attributes: relation, fact_id of the relation fact).
EdgeKind = Literal["recall_log", "cites", "derived_from", "mentions", "relates_to"]
EDGE_KINDS: tuple[EdgeKind, ...] = ("recall_log", "cites", "derived_from", "mentions", "relates_to")
NodeCollection = Literal["core_memory", "messages", "archival_docs", "memory_events", "agent_longterm_memory"]
SUMMARY_BLOCK_ID = "queue_head_summary"


@dataclass(frozen=True)
class StoredMessage:
    """One conversation message as the recall log keeps it (idempotent by agent + message id)."""

    agent_id: str
    message_id: str
    seq: int  # per-agent append order, gap-free in the hot path
    role: str
    content: str
    tokens: int
    created_at: float  # unix seconds
    name: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    expires_at: float | None = None  # TTL (unix seconds); None keeps it forever


@dataclass(frozen=True)
class CoreBlock:
    agent_id: str
    block_id: str
    role: str
    content: str
    tokens: int
    pinned: bool
    rev: str
    updated_at: float
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CoreBlockWrite:
    agent_id: str
    block_id: str
    role: str
    content: str
    tokens: int
    pinned: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Summary:
    """The recursive summary (``queue_head_summary``) of everything evicted so far."""

    agent_id: str
    text: str
    tokens: int
    rev: str
    batch_id: int  # last batch folded into it
    updated_at: float


@dataclass(frozen=True)
class EvictionCommit:
    """Step 2 of the eviction protocol: everything the store must apply atomically."""

    agent_id: str
    batch_id: int
    messages: Sequence[StoredMessage]
    summary_text: str
    summary_tokens: int
    expected_summary_rev: str | None  # None when the agent has no summary yet
    event: Mapping[str, Any] = field(default_factory=dict)  # payload of the `evict` event row
    actor: str = Actor.SYSTEM  # of the `evict` event row
    events: Sequence[MemoryEvent] = ()  # more audit rows committed with it (the messages' appends)
    # The agent's incarnation the job started with: the commit writes nothing (AgentFenced) unless
    # the agent record still holds it. None: no check (callers outside the cold path).
    incarnation: str | None = None


@dataclass(frozen=True)
class EvictionResult:
    agent_id: str
    batch_id: int
    summary_rev: str
    messages_committed: int  # messages of the batch now in the recall log (spooled before or not)
    replayed: bool  # True when the batch had been committed before; nothing changed


@dataclass(frozen=True)
class RecallHit:
    message: StoredMessage
    score: float


@dataclass(frozen=True)
class ArchivalChunk:
    """One late-chunked piece of a document, with its provenance and embedding metadata."""

    agent_id: str
    doc_id: str
    chunk_index: int
    text: str
    embedding: Sequence[float]
    metric: Metric
    embedding_version: str
    model_id: str
    char_start: int
    char_end: int
    source: str = ""  # provenance: file path / URL / caller-defined
    metadata: Mapping[str, Any] = field(default_factory=dict)  # post-filterable attributes
    created_at: float = 0.0
    valid_until: float | None = None  # freshness: after this the chunk is stale

    @property
    def dimension(self) -> int:
        return len(self.embedding)


@dataclass(frozen=True)
class ArchivalHit:
    chunk: ArchivalChunk
    score: float  # cosine similarity (higher is better) or L2 distance (lower is better)


@dataclass(frozen=True)
class MemoryEvent:
    agent_id: str
    kind: str  # e.g. append, evict, summarize, drift_alarm, heartbeat_end, dead_letter, core_write
    payload: Mapping[str, Any]
    event_id: str = ""  # idempotency: same id twice stores one row; "" lets the store assign one
    created_at: float = 0.0
    actor: str = Actor.SYSTEM
    idempotency_key: str | None = None


@dataclass(frozen=True)
class NodeRef:
    collection: NodeCollection
    key: str


def core_node(agent_id: str, block_id: str) -> NodeRef:
    """Graph node of a core memory block; the summary is ``summary_node(agent_id)``."""
    return NodeRef("core_memory", f"{agent_id}:{block_id}")


def summary_node(agent_id: str) -> NodeRef:
    """Source of the ``recall_log`` edges that ``commit_eviction`` adds."""
    return core_node(agent_id, SUMMARY_BLOCK_ID)


def message_node(agent_id: str, message_id: str) -> NodeRef:
    return NodeRef("messages", f"{agent_id}:{message_id}")


def chunk_node(agent_id: str, doc_id: str, chunk_index: int, embedding_version: str) -> NodeRef:
    """Graph node of an archival chunk (``derived_from`` edges go from chunk i to chunk i-1)."""
    return NodeRef("archival_docs", f"{agent_id}:{doc_id}:{chunk_index}:{embedding_version}")


def fact_node(agent_id: str, fact_id: str) -> NodeRef:
    """Graph node of a fact (entities and relations are facts too)."""
    return NodeRef("agent_longterm_memory", f"{agent_id}:{fact_id}")


def event_node(event_id: str) -> NodeRef:
    return NodeRef("memory_events", event_id)


@dataclass(frozen=True)
class Edge:
    kind: EdgeKind
    src: NodeRef
    dst: NodeRef
    agent_id: str
    created_at: float = 0.0
    attributes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchStats:
    """How an adapter produced one search page, for metrics; adapters fill in what they know."""

    offset: int = 0  # items of the same search on earlier pages (0: the first page)
    # Candidates the post-filters judged while ranking this page, and how many they dropped. Both
    # 0 when the page came from a stored snapshot or the backend filtered (ArangoDB's AQL).
    judged: int = 0
    dropped: int = 0
    # The vector half searched its index plus only part of the not-yet-indexed vectors (the tail
    # past the adapter's bound, while the index catches up off the query path); ``unindexed``
    # is an upper bound on the vectors left out.
    partial: bool = False
    unindexed: int = 0


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None  # opaque; None when there is nothing more
    stats: SearchStats | None = None  # None: the adapter reports nothing about this page


@dataclass(frozen=True)
class Expiry:
    """What one retention sweep did: messages, snapshots and state keys deleted, facts marked
    ``expired`` (:meth:`MemoryStore.expire_all`), and idempotency records past their TTL deleted
    (:meth:`MemoryStore.expire_idempotency`, the same sweep)."""

    messages: int = 0
    snapshots: int = 0
    state: int = 0
    facts: int = 0
    idempotency: int = 0

    @property
    def total(self) -> int:
        return self.messages + self.snapshots + self.state + self.facts + self.idempotency

    def as_dict(self) -> dict[str, int]:
        return {
            "messages": self.messages,
            "snapshots": self.snapshots,
            "state": self.state,
            "facts": self.facts,
            "idempotency": self.idempotency,
        }


@dataclass(frozen=True)
class Health:
    ok: bool
    backend: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentRecord:
    """An agent as the store keeps it: the source its hot state is rebuilt from.

    ``config`` is the hot state's agent configuration (model, window, budget numbers, system
    prompt, tools), opaque to the store. ``id_floor`` is the lowest message sequence number and
    batch id the agent may hand out after its hot state is rebuilt: the hot path reserves ids
    below it in advance, so a rebuild never reuses an id (see :mod:`vcm.durable`).
    ``incarnation`` is chosen when the agent is created (a re-created id gets a new one); the
    cold path's writes check it (see :class:`~vcm.errors.AgentFenced`); a record made before
    incarnations existed holds ""."""

    agent_id: str
    config: Mapping[str, Any]
    token_sha256: str | None = None
    id_floor: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    incarnation: str = ""
    # The principals it belongs to (vcm.store.principals): whose shared memory it reads.
    user_id: str | None = None
    domain: str | None = None


@dataclass(frozen=True)
class SummaryVersion:
    """One version of an agent's recursive summary: what the commit of ``batch_id`` installed."""

    agent_id: str
    batch_id: int
    text: str
    tokens: int
    rev: str
    created_at: float


@dataclass(frozen=True)
class SnapshotRecord:
    """A stored point-in-time copy of an agent's state. ``payload`` is compressed and opaque to
    the store; ``sha256`` is its checksum, verified by whoever restores it."""

    agent_id: str
    snapshot_id: str
    kind: str  # manual | periodic | pre_upgrade | pre_restore
    reason: str
    payload: bytes
    sha256: str
    size: int  # bytes of the uncompressed state
    created_at: float
    expires_at: float | None = None


@dataclass(frozen=True)
class Forgotten:
    """What a lifecycle delete removed (counts by kind; never content)."""

    counts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Tombstones:
    """What was forgotten of an agent, for good: message and document ids with the time each
    was forgotten (``forget_message``/``forget_document`` write them with the removal). A
    snapshot restore honours them: nothing it restores brings a forgotten item back. Ids only,
    never content; they go with the agent."""

    messages: Mapping[str, float] = field(default_factory=dict)
    documents: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ContextReset:
    """A replacement of an agent's context as the store keeps it (snapshot restore, reset).

    Applied atomically by ``reset_context``: the summary becomes ``summary_text`` (recorded as
    the version of ``batch_id``, a fresh batch id), exactly the stored messages in ``fifo_ids``
    stay in the FIFO (every other message leaves it for recall), and, unless None, the agent's
    blocks become exactly ``blocks``, its configuration ``config``, and its facts, state keys
    and fact edges ``memory`` (see :class:`AgentMemory`)."""

    agent_id: str
    batch_id: int
    summary_text: str
    summary_tokens: int
    fifo_ids: Sequence[str]
    blocks: Sequence[CoreBlockWrite] | None = None
    # Unless None: the agent record's configuration becomes this (a snapshot's settings).
    config: Mapping[str, Any] | None = None
    # Unless None: the agent's facts, state keys and fact edges become exactly these (a snapshot's).
    memory: AgentMemory | None = None


@dataclass(frozen=True)
class Fact:
    """A unit of what an agent knows (seed 001's long-term memory, seed 002's InfoUnit, seed
    003's memory fact). ``evidence`` points at what supports it: ``{"kind": "message" |
    "tool_call" | "document", "id": ..., "span": [start, end]?}``. ``version`` counts its writes
    (optimistic locking); ``embedding`` is stored for vector search and never returned empty."""

    agent_id: str
    fact_id: str
    scope: str  # agent | user | domain
    type: str
    value: str
    key: str | None = None
    category: str = ""
    tags: Sequence[str] = ()
    importance: float = 0.5
    confidence: float = 0.5
    evidence: Sequence[Mapping[str, Any]] = ()
    status: str = "active"  # shadow | active | expired | archived
    conflict_with: Sequence[str] = ()  # facts of the same key holding another value
    created_at: float = 0.0
    updated_at: float = 0.0
    last_used: float = 0.0
    access_count: int = 0
    expires_at: float | None = None
    version: int = 1
    embedding: Sequence[float] | None = None
    # What a use or reconfirmation gives it again: expires_at moves to now + lifetime_s (never
    # earlier). None: it never expires, or its expiry is fixed.
    lifetime_s: float | None = None
    # An UNSURE dedup candidate (shadow): the fact it may duplicate, until consolidation or a
    # person settles it.
    duplicate_of: str | None = None


@dataclass(frozen=True)
class FactQuery:
    """Filters of a fact listing or search; every one given must match.

    ``statuses`` defaults to ``active`` alone: shadow facts (extracted or unconfirmed, not yet
    through consolidation's replay test) are found only where a caller names them, so no reader
    that forgets to filter puts them in a prompt or a default search. None or empty: any status."""

    scope: str | None = None
    types: Sequence[str] | None = None
    key: str | None = None
    statuses: Sequence[str] | None = ("active",)
    category: str | None = None
    tags: Sequence[str] | None = None  # all of them
    min_importance: float | None = None
    max_importance: float | None = None
    min_confidence: float | None = None
    since: float | None = None  # updated_at, inclusive
    until: float | None = None  # updated_at, exclusive
    created_since: float | None = None  # created_at, inclusive
    created_until: float | None = None  # created_at, exclusive
    unsure: bool = False  # only UNSURE dedup candidates (facts with a duplicate_of)

    def ranges(self) -> tuple[tuple[str, str, float], ...]:
        """The range filters given, as (fact field, comparison, bound): both adapters turn each
        into one condition (``field op bound``), so they mean the same."""
        bounds = (
            ("importance", ">=", self.min_importance), ("importance", "<=", self.max_importance),
            ("confidence", ">=", self.min_confidence), ("updated_at", ">=", self.since),
            ("updated_at", "<", self.until), ("created_at", ">=", self.created_since),
            ("created_at", "<", self.created_until),
        )  # fmt: skip
        return tuple((f, op, float(v)) for f, op, v in bounds if v is not None)

    limit: int = 100
    with_embeddings: bool = False  # query_facts: return embeddings too
    # Holder ids (vcm.store.principals) read with the agent's own facts: its user's and domain's.
    # Set by the service from the agent's record, never from a request.
    holders: Sequence[str] = ()


@dataclass(frozen=True)
class FactHit:
    fact: Fact
    score: float


@dataclass(frozen=True)
class FactScore:
    """A fact's place in a search, without the fact (``search_fact_scores``): its holder (the
    agent, or its user or domain), its id and its score."""

    agent_id: str
    fact_id: str
    score: float


@dataclass(frozen=True)
class DedupCandidate:
    """What dedup (``vcm.facts.dedup``) compares of a live fact: its text, key and review mark,
    and the cosine of its embedding to the write's (0.0 without either, or of another length),
    computed where the facts are stored. A write is compared with up to a thousand facts; whole
    facts with their embeddings cost ~20 ms to read and convert at that count."""

    agent_id: str
    fact_id: str
    value: str
    key: str | None
    duplicate_of: str | None
    cosine: float


@dataclass(frozen=True)
class StateEntry:
    """A working-memory key/value with an optional expiry (seeds 001 and 003)."""

    agent_id: str
    key: str
    value: Any
    rev: str
    updated_at: float
    expires_at: float | None = None


# The graph edges that belong to facts (written with them, gone with them): what an
# :class:`AgentMemory` carries and ``reset_context`` replaces.
FACT_EDGE_KINDS: tuple[EdgeKind, ...] = ("cites", "mentions", "relates_to")


@dataclass(frozen=True)
class AgentMemory:
    """An agent's structured memory as a snapshot holds it (``agent_memory`` reads it,
    ``reset_context`` puts it back): every fact whatever its status, with its embedding; the
    state keys live at the time; and the fact edges (:data:`FACT_EDGE_KINDS`) of the agent.

    Put back, facts keep their contents, statuses, evidence, lifetimes and versions, except that
    a fact stored now under another version gets one above both (so no version is handed out
    twice for different contents, :func:`vcm.store.semantics.restored_version`); state keys keep
    their values and expiries and get new revs (a rev is never reused either)."""

    facts: Sequence[Fact] = ()
    state: Sequence[StateEntry] = ()
    edges: Sequence[Edge] = ()


@dataclass(frozen=True)
class IdempotencyRecord:
    """The first result of one keyed hot-path operation (an append, a claim), kept so that a
    retry replays it after Redis lost it (a restart in embedded mode, a flushed Redis): the hot
    state's record is a cache of this one. ``fingerprint`` and ``result`` (JSON text) are as the
    hot state keeps them; the record counts until ``expires_at`` (``idempotency_ttl_s``)."""

    agent_id: str
    key: str  # the caller's idempotency key
    fingerprint: str
    result: str
    expires_at: float
