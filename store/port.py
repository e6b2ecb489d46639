"""The store port: the one interface both adapters (embedded SQLite, ArangoDB) implement.

Contract (checked by ``tests/store/test_contract.py`` against every adapter):

* Every write is idempotent: replaying it with the same identity (message id, batch id,
  event id, chunk identity, block idempotency key) changes nothing and returns the first result.
* ``put_core`` / ``commit_eviction`` use optimistic locking on ``rev``; a stale rev raises
  :class:`~vcm.errors.RevConflict` and writes nothing.
* ``commit_eviction`` is atomic: the recall append, the summary replace and the event row
  land together or not at all.
* Search cursors are opaque and stable: paging on while new data arrives never repeats or
  skips an item of the first page's snapshot.
* Errors are only those of :mod:`vcm.errors`.
* **Fenced writes.** The writes the cold path makes for an agent (``commit_eviction`` through
  ``EvictionCommit.incarnation``; ``spool_messages``, ``put_idempotency``,
  ``put_message_vectors``, ``ingest_archival``, ``put_fact``, ``append_event`` and ``add_edge``
  through their ``incarnation`` keyword) check, inside their own transaction, that the agent
  record of every agent they write for exists and holds that incarnation (a record without one
  holds ""); otherwise they write nothing and raise :class:`~vcm.errors.AgentFenced`.
  ``incarnation=None`` (the default) checks nothing. ``delete_agent`` removes the record in the
  transaction that removes the rows, so no fenced write lands after it.

Semantics both adapters share (the contract tests check them):

* The summary is the core block ``queue_head_summary``: only ``commit_eviction`` writes it
  (``put_core``/``delete_core`` on it raise ValidationError), ``list_core`` leaves it out.
  Graph nodes are named by ``vcm.store.types.core_node/summary_node/message_node/chunk_node``;
  ``recall_log`` edges go from ``summary_node(agent)`` to each evicted message's node.
* A rev check against a block that does not exist (any more) raises RevConflict with
  ``current_rev=None`` in its details.
* Time windows: ``since`` inclusive, ``until`` exclusive.
* Archival ``valid_until`` is freshness, not a TTL: ``expire`` never deletes chunks; searches
  skip stale chunks unless ``filters={"include_stale": True}``.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from vcm.store.principals import Principal
from vcm.store.types import (
    AgentMemory,
    AgentRecord,
    ArchivalChunk,
    ArchivalHit,
    ContextReset,
    CoreBlock,
    CoreBlockWrite,
    DedupCandidate,
    Edge,
    EdgeKind,
    EvictionCommit,
    EvictionResult,
    Expiry,
    Fact,
    FactHit,
    FactQuery,
    FactScore,
    Forgotten,
    Health,
    IdempotencyRecord,
    MemoryEvent,
    NodeRef,
    Page,
    RecallHit,
    SnapshotRecord,
    StateEntry,
    StoredMessage,
    Summary,
    SummaryVersion,
    Tombstones,
)

# Called by adapters at named points inside multi-step writes, so tests can inject a failure
# (e.g. "commit_eviction.after_recall_append"). Production passes None.
FaultHook = Callable[[str], None]


class MemoryStore(abc.ABC):
    """External memory tier of vcm. Implementations must be safe to share between threads."""

    # --- agents ---------------------------------------------------------------------------
    @abc.abstractmethod
    def put_agent(self, agent_id: str, config: Mapping[str, Any], *, incarnation: str = "") -> AgentRecord:
        """Create the agent's record or replace its ``config``; keeps ``id_floor``, the token
        hash, ``created_at`` and the incarnation (``incarnation`` is used only when the record is
        new). Idempotent."""

    @abc.abstractmethod
    def get_agent(self, agent_id: str) -> AgentRecord:
        """Raise NotFound when absent."""

    @abc.abstractmethod
    def list_agents(self) -> list[AgentRecord]:
        """Every agent, by id."""

    @abc.abstractmethod
    def set_agent_token(self, agent_id: str, token_sha256: str | None) -> None:
        """Record (or clear) the SHA-256 of the agent's bearer token. NotFound without a record."""

    @abc.abstractmethod
    def advance_id_floor(self, agent_id: str, floor: int) -> int:
        """Raise the agent's ``id_floor`` to at least ``floor`` (never lowers it); returns it."""

    @abc.abstractmethod
    def uncommitted_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 1000) -> list[StoredMessage]:
        """Messages by seq that no committed eviction batch holds (no ``recall_log`` edge from
        the summary): the FIFO of a rebuilt hot state, plus recall notes the caller filters."""

    @abc.abstractmethod
    def summary_versions(self, agent_id: str, *, limit: int = 20) -> list[SummaryVersion]:
        """The summaries ``commit_eviction`` installed, newest first."""

    @abc.abstractmethod
    def reset_context(self, change: ContextReset) -> None:
        """Apply a :class:`ContextReset` in one transaction (see there). Messages leaving the
        FIFO get ``recall_log`` edges (with ``batch_id``); messages re-entering it lose theirs.
        With ``memory``: every fact, state key and fact edge of the agent goes and those of the
        memory take their place (:class:`AgentMemory` says what they keep)."""

    @abc.abstractmethod
    def rewrite_summaries(
        self, agent_id: str, versions: Sequence[SummaryVersion], *, expected_rev: str | None
    ) -> Summary | None:
        """Replace the text and tokens of stored summary versions (matched by ``batch_id``; one the
        store does not hold is skipped), each getting a new rev; the current summary too when it is
        one of them. One transaction, and only while the current summary's rev is still
        ``expected_rev`` (``RevConflict`` otherwise: an eviction committed meanwhile). A forget
        uses it so that no version keeps a forgotten message's words. Returns the current summary."""

    # --- principals: users and domains, holders of shared memory (vcm.store.principals) ----------
    @abc.abstractmethod
    def put_principal(self, principal: Principal) -> Principal:
        """Create a user or domain; an existing one is returned as it is (its incarnation kept)."""

    @abc.abstractmethod
    def get_principal(self, kind: str, name: str) -> Principal:
        """Raise NotFound when absent."""

    @abc.abstractmethod
    def list_principals(self, kind: str) -> list[Principal]:
        """Every principal of the kind, by name."""

    @abc.abstractmethod
    def delete_principal(self, kind: str, name: str) -> int:
        """Remove the principal, every fact, state key and fact edge its holder id keys, and its
        name from every agent record, in one transaction; a write to its memory fenced by its
        incarnation fails after. Returns how many facts went; idempotent."""

    @abc.abstractmethod
    def set_agent_principals(self, agent_id: str, *, user_id: str | None, domain: str | None) -> AgentRecord:
        """Name the agent's user and domain (None: none). NotFound for a missing agent or principal."""

    @abc.abstractmethod
    def delete_agent(self, agent_id: str) -> Forgotten:
        """Remove everything of the agent: record, core memory, summary versions, messages and
        their vectors and index entries, edges, archival chunks, events, batches, idempotency
        records, cursors, snapshots and tombstones. Idempotent (a second call removes nothing)."""

    @abc.abstractmethod
    def forget_message(self, agent_id: str, message_id: str) -> Forgotten:
        """Remove one message with its vectors, index entries and edges, and write its
        tombstone (:meth:`tombstones`) in the same transaction, whether or not the message was
        stored (one still only in the hot state is forgotten too). Idempotent: a second call
        removes nothing and keeps the first tombstone's time."""

    @abc.abstractmethod
    def forget_document(self, agent_id: str, doc_id: str) -> Forgotten:
        """Remove one archival document's chunks (every embedding version) and their edges, and
        write its tombstone in the same transaction, as :meth:`forget_message` does."""

    @abc.abstractmethod
    def tombstones(self, agent_id: str) -> Tombstones:
        """The ids the agent's forgets named, with the time of each (a restore drops them)."""

    # --- facts and state ------------------------------------------------------------------------
    @abc.abstractmethod
    def put_fact(self, fact: Fact, expected_version: int | None, *, incarnation: str | None = None) -> Fact:
        """Create (``expected_version`` None: a new id) or replace (the stored version must equal
        it; the new one is that plus one); RevConflict otherwise, nothing written. Without an
        embedding a replacement keeps the stored one while the value holds (reads leave it out)."""

    @abc.abstractmethod
    def get_fact(self, agent_id: str, fact_id: str) -> Fact:
        """NotFound when absent. Its embedding is left out."""

    @abc.abstractmethod
    def query_facts(self, agent_id: str, query: FactQuery) -> list[Fact]:
        """Matching facts, most recently updated first, without embeddings."""

    @abc.abstractmethod
    def dedup_candidates(self, agent_id: str, query: FactQuery, vector: Sequence[float] | None) -> list[DedupCandidate]:
        """``query_facts``' facts, light (text, key, review mark), with their cosines to ``vector``."""

    @abc.abstractmethod
    def search_facts(self, agent_id: str, text: str, vector: Sequence[float] | None, query: FactQuery) -> list[FactHit]:
        """Hybrid search (``vcm.store.fact_rank``) over the facts matching ``query``, best first."""

    @abc.abstractmethod
    def search_fact_scores(
        self, agent_id: str, text: str, vector: Sequence[float] | None, q: FactQuery
    ) -> list[FactScore]:
        """``search_facts``' ranking without reading the facts (:meth:`read_fact_hits` reads some)."""

    @abc.abstractmethod
    def read_fact_hits(self, agent_id: str, ranked: Sequence[FactScore], query: FactQuery) -> list[FactHit]:
        """Whole facts of ``ranked`` still matching ``query``, in its order (others left out)."""

    @abc.abstractmethod
    def delete_facts(self, agent_id: str, fact_ids: Sequence[str]) -> int:
        """Delete facts by id; returns how many existed."""

    @abc.abstractmethod
    def fact_counts(self, agent_id: str) -> dict[str, dict[str, int]]:
        """``{"type": {...}, "status": {...}, "scope": {...}, "conflicts": {"live": n}}`` counts."""

    @abc.abstractmethod
    def touch_facts(self, agent_id: str, fact_ids: Sequence[str], now: float) -> None:
        """Record a use: ``last_used`` = now, ``access_count`` + 1 (no version change), and a
        live fact with a ``lifetime_s`` lives that long from now (a use refreshes a lifetime; it
        never shortens one and never revives an expired fact)."""

    @abc.abstractmethod
    def agent_memory(self, agent_id: str, now: float) -> AgentMemory:
        """The agent's facts (every status, with embeddings, by id), its state keys unexpired
        at ``now`` (by key) and its fact edges, in one consistent read: what a snapshot keeps."""

    @abc.abstractmethod
    def put_state(
        self, agent_id: str, key: str, value: Any, *, expires_at: float | None, expected_rev: str | None
    ) -> StateEntry:
        """Set a key; with ``expected_rev`` only if the current rev equals it, with ``""`` only if
        the key does not exist (RevConflict otherwise)."""

    @abc.abstractmethod
    def get_state(self, agent_id: str, key: str, now: float) -> StateEntry:
        """NotFound when absent or expired at ``now``."""

    @abc.abstractmethod
    def list_state(self, agent_id: str, now: float) -> list[StateEntry]:
        """Unexpired keys, by key."""

    @abc.abstractmethod
    def delete_state(self, agent_id: str, key: str | None, expected_rev: str | None = None) -> int:
        """Delete one key (``key`` None: every key of the agent); returns how many."""

    # --- snapshots ----------------------------------------------------------------------------
    @abc.abstractmethod
    def put_snapshot(self, snapshot: SnapshotRecord) -> SnapshotRecord:
        """Idempotent by (agent, snapshot id): a replay returns the first record."""

    @abc.abstractmethod
    def get_snapshot(self, agent_id: str, snapshot_id: str) -> SnapshotRecord:
        """Raise NotFound when absent or expired."""

    @abc.abstractmethod
    def list_snapshots(self, agent_id: str) -> list[SnapshotRecord]:
        """Unexpired snapshots, newest first, with empty payloads (metadata only)."""

    @abc.abstractmethod
    def delete_snapshot(self, agent_id: str, snapshot_id: str) -> bool:
        """True when a snapshot was deleted; False when there was none."""

    # --- core memory ---------------------------------------------------------------------
    @abc.abstractmethod
    def get_core(self, agent_id: str, block_id: str) -> CoreBlock:
        """Raise NotFound when absent."""

    @abc.abstractmethod
    def list_core(self, agent_id: str) -> list[CoreBlock]: ...

    @abc.abstractmethod
    def put_core(self, block: CoreBlockWrite, expected_rev: str | None, idempotency_key: str) -> CoreBlock:
        """Create (expected_rev None, block must not exist) or replace (rev must match).

        A replay with the same idempotency key returns the block as first written; the same key
        with different content raises IdempotencyMismatch.
        """

    @abc.abstractmethod
    def delete_core(self, agent_id: str, block_id: str, expected_rev: str) -> None: ...

    @abc.abstractmethod
    def get_summary(self, agent_id: str) -> Summary | None: ...

    # --- messages / recall -------------------------------------------------------------
    @abc.abstractmethod
    def spool_messages(
        self,
        messages: Sequence[StoredMessage],
        *,
        events: Sequence[MemoryEvent] = (),
        idempotency: Sequence[IdempotencyRecord] = (),
        incarnation: str | None = None,
    ) -> int:
        """Write-behind of appended messages; idempotent by (agent_id, message_id).

        ``events`` (their audit rows, idempotent by event id) and ``idempotency`` (the records of
        keyed appends, as :meth:`put_idempotency`) are written with the messages, in the same
        transaction (the ArangoDB adapter: with the last size-capped part), so a stored message
        never lacks its key's record. Returns how many messages were new.
        """

    @abc.abstractmethod
    def get_messages(self, agent_id: str, message_ids: Sequence[str]) -> list[StoredMessage]:
        """Messages found, in the order asked; missing ids are left out."""

    @abc.abstractmethod
    def count_messages(self, agent_id: str, *, id_prefix: str = "") -> int:
        """How many messages the agent has stored (only those whose id starts with
        ``id_prefix``, when given: the hot path's appends, without recall notes)."""

    @abc.abstractmethod
    def list_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 100) -> list[StoredMessage]:
        """The agent's stored messages with ``seq`` above ``after_seq``, in ``seq`` order, at most
        ``limit``: pages through a whole conversation (re-embedding after a model change,
        export). The next page starts after the last ``seq`` returned."""

    @abc.abstractmethod
    def commit_eviction(self, commit: EvictionCommit) -> EvictionResult:
        """Atomically: ensure the batch's messages exist, add `recall_log` edges from the summary
        to them, replace the summary (rev check), append the `evict` event (actor
        ``commit.actor``) and ``commit.events`` (idempotent by event id). Replay-safe."""

    @abc.abstractmethod
    def committed_batches(self, agent_id: str) -> list[int]:
        """Batch ids committed for this agent, ascending."""

    @abc.abstractmethod
    def search_recall(
        self,
        agent_id: str,
        query: str,
        limit: int = 10,
        cursor: str | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
    ) -> Page[RecallHit]:
        """BM25 over message content, best first. Must also see messages written a moment ago
        (read-after-write) even if the text index lags."""

    @abc.abstractmethod
    def put_message_vectors(
        self,
        agent_id: str,
        vectors: Sequence[tuple[str, Sequence[float]]],
        embedding_version: str,
        *,
        incarnation: str | None = None,
    ) -> int:
        """Store an embedding per (message_id, vector) for vector recall; how many were new.
        Idempotent by (agent, message, version): the first write stays; a message not in the
        store is skipped (spool first). Vectors are stored unit length; one version has one
        dimension (ArangoDB keeps one version per message: a new version replaces an older one)."""

    @abc.abstractmethod
    def message_vector_ids(self, agent_id: str, message_ids: Sequence[str], embedding_version: str) -> set[str]:
        """Which of ``message_ids`` already carry a recall vector of ``embedding_version`` (so a
        backfill embeds only the others)."""

    @abc.abstractmethod
    def search_recall_hybrid(
        self,
        agent_id: str,
        query: str,
        vector: Sequence[float] | None,
        *,
        limit: int = 10,
        cursor: str | None = None,
        since: float | None = None,
        until: float | None = None,
        mode: str = "hybrid",
        embedding_version: str | None = None,
        exclude: Collection[str] = (),
    ) -> Page[RecallHit]:
        """``mode`` text: as :meth:`search_recall`; vector: cosine over stored message vectors of
        ``embedding_version`` (None: the version this agent has most vectors of); hybrid:
        the weighted sum of normalised BM25 and cosine scores, with a share spread to neighbouring
        turns (:func:`vcm.store.fusion.hybrid`), and when ``query`` names some of the agent's
        message authors, the other authors' messages weighted down (:mod:`vcm.store.authors`);
        score = fused score. Same time window and stable cursor paging as :meth:`search_recall`;
        messages without a vector are found by the text leg only. ``exclude``: message ids left
        out of the ranking and its pages (a prompt build's FIFO is neither ranked nor read)."""

    @abc.abstractmethod
    def message_authors(self, agent_id: str) -> list[str]:
        """The distinct ``name`` values of the agent's stored messages, sorted, at most
        :data:`vcm.store.authors.MAX_AUTHORS` + 1 of them (one more says "too many to anchor
        on"); hybrid recall anchors on them (:mod:`vcm.store.authors`). Index seeks, one per
        name: no scan of the agent's messages."""

    # --- archival ---------------------------------------------------------------------------
    @abc.abstractmethod
    def ingest_archival(self, chunks: Sequence[ArchivalChunk], *, incarnation: str | None = None) -> int:
        """Idempotent by (agent_id, doc_id, chunk_index, embedding_version). Returns new count.
        Also links consecutive chunks of a document (`derived_from` edges to the previous)."""

    @abc.abstractmethod
    def search_archival(
        self,
        agent_id: str,
        vector: Sequence[float],
        k: int = 10,
        *,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
        n_probe: int | None = None,
        metric: str = "cosine",
        embedding_version: str | None = None,
    ) -> Page[ArchivalHit]:
        """Vector top-k with post-filters, all equalities: ``doc_id``, ``source``, ``model_id``
        match the chunk's fields, any other key matches ``metadata[key]``; the reserved key
        ``include_stale`` (bool) keeps chunks whose ``valid_until`` has passed. Scores: cosine
        similarity (higher first) or L2 distance (lower first). ``embedding_version`` None
        searches every version of that metric and dimension; a vector whose dimension matches
        no index of the metric (and version) raises ValidationError."""

    @abc.abstractmethod
    def get_archival(self, agent_id: str, doc_id: str) -> list[ArchivalChunk]: ...

    # --- events ---------------------------------------------------------------------------
    @abc.abstractmethod
    def append_event(self, event: MemoryEvent, *, incarnation: str | None = None) -> MemoryEvent:
        """Idempotent by event_id; returns the stored row (with id and created_at filled)."""

    @abc.abstractmethod
    def query_events(
        self,
        agent_id: str | None,
        kinds: Sequence[str] | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
        actor: str | None = None,
        idempotency_key: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[MemoryEvent]:
        """Oldest first; every filter given must match (``actor``, ``idempotency_key``: equal;
        ``since`` inclusive, ``until`` exclusive, on ``created_at``)."""

    # --- graph ----------------------------------------------------------------------------
    @abc.abstractmethod
    def add_edge(self, edge: Edge, *, incarnation: str | None = None) -> None:
        """Idempotent by (kind, src, dst)."""

    @abc.abstractmethod
    def traverse(
        self,
        start: NodeRef,
        kinds: Sequence[EdgeKind] | None = None,
        *,
        max_depth: int = 1,
        direction: str = "outbound",
    ) -> list[NodeRef]:
        """Distinct nodes reachable within max_depth, breadth first, start excluded."""

    # --- idempotency records of the hot path ----------------------------------------------
    @abc.abstractmethod
    def put_idempotency(self, records: Sequence[IdempotencyRecord], *, incarnation: str | None = None) -> None:
        """Keep the records, replacing one of the same (agent, key): a claim's settled result
        replaces its first one. Durable when it returns."""

    @abc.abstractmethod
    def get_idempotency(self, agent_id: str, key: str) -> IdempotencyRecord | None:
        """The agent's record under ``key``, or None (none, or expired: an expired record is gone
        whether or not :meth:`expire_idempotency` swept it yet)."""

    @abc.abstractmethod
    def list_idempotency(
        self, agent_id: str, *, after: str | None = None, limit: int = 1000
    ) -> list[IdempotencyRecord]:
        """The agent's unexpired records by key, at most ``limit``, those with keys above
        ``after``: the next page starts after the last key returned."""

    @abc.abstractmethod
    def expire_idempotency(self, now: float) -> int:
        """Delete the records expired before ``now``; returns how many."""

    # --- maintenance ------------------------------------------------------------------------
    @abc.abstractmethod
    def expire_all(self, now: float) -> Expiry:
        """Delete messages whose ``expires_at`` < now (with their edges), expired snapshots and
        state keys, and mark expired facts ``expired``; returns how many of each."""

    def expire(self, now: float) -> int:
        """:meth:`expire_all`, answering how many messages it deleted."""
        return self.expire_all(now).messages

    def maintain_indexes(self) -> dict[str, int]:
        """Index upkeep that must not run inside a query or a write: create the vector indexes
        that are due (ArangoDB). Called by the cold path's sweep; returns what it did (counts).
        The default does nothing (the embedded store keeps its indexes in a thread of the
        process that searches them)."""
        return {}

    @abc.abstractmethod
    def health(self) -> Health: ...

    @abc.abstractmethod
    def stats(self, agent_id: str | None = None) -> dict[str, Any]:
        """Counts (of one agent, or all): at least ``messages``, ``core_blocks`` (summary
        excluded), ``archival_chunks``, ``events``, ``edges``, ``committed_batches``,
        ``recall_log_edges`` and ``message_vectors`` (messages with a recall vector, any version).
        Overall (no agent) also ``facts_by_type``: ``[{"type", "status", "count"}, ...]``."""

    @abc.abstractmethod
    def close(self) -> None: ...
