"""Durable agent state: the store is the source of truth, Redis a cache rebuilt from it.

What the store holds for each agent, and who writes it:

* the agent record (configuration, token hash, id floor): written when the agent is created or
  its token changes, before the caller is answered;
* working blocks: written through after each edit, carrying the hot state's ``_rev``;
* messages: written through before an append is acknowledged (``durability.messages`` =
  ``write_through``, the default when the hot state is in-process), or spooled by the cold path
  (``write_behind``: on a Redis loss, what the spool had not reached yet is lost; the spool lag
  is usually under a second);
* the summary and its versions, and which messages left the FIFO: ``commit_eviction``;
* **idempotency records** (the first result under a caller's key, for ``idempotency_ttl_s``):
  a keyed append's record travels with its message, in the same store write (write-through
  before the append is acknowledged, or the spool; an eviction that commits a message the spool
  missed writes its record first); a claim's record (:meth:`vcm.service.core.Core.claim`: facts,
  state, tools, reset, snapshot, restore, token rotation, notes, ingestion) and its settled
  result are written before the operation is acknowledged. Redis holds a cache of them.

**Rebuild.** An agent whose hot state is missing (a restart in embedded mode, a Redis
``FLUSHALL``) is re-created from its record; its FIFO is every stored message no committed batch
holds (messages of a batch that had begun but not committed come back, and are evicted again
when over budget), its blocks and summary are the stored ones. Its unexpired idempotency records
are put back first, so the append script's own check replays a retried key.

**Ids are never reused.** Message sequence numbers and batch ids come from counters in Redis.
The store keeps an ``id_floor`` ahead of them: whenever an agent's sequence comes within half of
``durability.id_reserve`` of the floor, the floor is raised by a reserve first. A rebuilt agent
continues from the floor, above every id it may have handed out.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from vcm.errors import NotFound, RevConflict
from vcm.hotpath import keys
from vcm.hotpath.backlog import writes_through
from vcm.hotpath.state import HotState
from vcm.obs import audit, footprint
from vcm.store.audit_names import EventKind, audit_id
from vcm.store.port import MemoryStore
from vcm.store.types import CoreBlockWrite, IdempotencyRecord, MemoryEvent, StoredMessage
from vcm.types import AgentImage, Block, FinishResult, Message

log = logging.getLogger(__name__)

# Hot-path fields with no StoredMessage column travel in metadata under this key.
VCM_METADATA = "_vcm"
# A block's hot-state revision, kept in the stored block's metadata so a rebuild restores it.
HOT_REV = "_hot_rev"
# Ids the hot path gives appended messages (recall notes have "r..." ids and never were in a FIFO).
_CONTEXT_ID = re.compile(r"^m\d+$")


# --- pure conversions -------------------------------------------------------------------------
def stored_message(agent_id: str, message: Message, *, ttl_s: int = 0) -> StoredMessage:
    """The store's form of a hot-path message; the write-through, the spooler and the eviction
    commit share it, so whichever writes first writes the same row."""
    extra: dict[str, Any] = {}
    if message.kind != "message":
        extra["kind"] = message.kind
    if message.pinned:
        extra["pinned"] = True
    if message.tool_call_id:
        extra["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        extra["tool_calls"] = [dict(c) for c in message.tool_calls]
    if message.marker:  # counted in its tokens: a rebuilt FIFO shows it as the first did
        extra["marker"] = message.marker
    if message.appended_at is not None:  # dated by its caller: when vcm took it
        extra["appended_at"] = message.appended_at
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


def is_notice(stored: StoredMessage) -> bool:
    """vcm's own notice (a memory-pressure warning), kept in the recall log with the conversation
    but never part of it: the summary skips it, and relevant memory does not show it."""
    extra = stored.metadata.get(VCM_METADATA) or {}
    return isinstance(extra, dict) and extra.get("kind", "message") != "message"


def hot_message(stored: StoredMessage) -> Message:
    """The inverse of :func:`stored_message` (actor and idempotency key stay in the audit row)."""
    metadata = dict(stored.metadata)
    extra = metadata.pop(VCM_METADATA, None) or {}
    return Message(
        id=stored.message_id,
        seq=stored.seq,
        role=stored.role,
        content=stored.content,
        tokens=stored.tokens,
        created_at=stored.created_at,
        pinned=bool(extra.get("pinned", False)),
        name=stored.name,
        tool_call_id=extra.get("tool_call_id"),
        tool_calls=extra.get("tool_calls") or None,
        metadata=metadata,
        kind=str(extra.get("kind", "message")),
        marker=extra.get("marker") or None,
        appended_at=None if extra.get("appended_at") is None else float(extra["appended_at"]),
    )


def in_context(stored: StoredMessage) -> bool:
    """Whether a stored message came through the FIFO (not a recall note or a spooled output)."""
    return bool(_CONTEXT_ID.match(stored.message_id))


def append_event(agent_id: str, message: Message) -> MemoryEvent:
    """The audit row of one append, written with the message by whichever stores it first (same
    event id). Its actor and idempotency key travelled with the message in Redis; vcm's own
    notices (memory pressure) have neither."""
    return audit.event(
        agent_id,
        EventKind.APPEND,
        footprint.append(message.content, message.tokens, role=message.role, pinned=message.pinned),
        actor=message.actor or audit.SYSTEM,
        event_id=audit_id(agent_id, "append", message.id),
        idempotency_key=message.idempotency_key,
        created_at=message.appended,  # the audit trail's time is vcm's, not the caller's
        details={"message_id": message.id, "seq": message.seq, "kind": message.kind},
    )


def append_records(
    hot: HotState, agent_id: str, messages: Sequence[Message], *, held: Mapping[str, tuple[str, str]] | None = None
) -> list[IdempotencyRecord]:
    """The store's copies of the idempotency records of keyed appends among ``messages``: those
    the caller ``held`` (key -> (fingerprint, result), from the append's own reply), the rest
    read from Redis (one MGET; none for unkeyed messages). A record expires ``idempotency_ttl_s``
    after its message was appended, as Redis's does; an expired one is not copied (its key may
    mean another request by now)."""
    keyed = [m for m in messages if m.idempotency_key]
    if not keyed:
        return []
    found = dict(held or {})
    missing = [m.idempotency_key for m in keyed if m.idempotency_key and m.idempotency_key not in found]
    if missing:
        found.update(hot.idempotency_records(agent_id, missing))
    ttl, now = hot.settings.idempotency_ttl_s, hot.clock()
    out: list[IdempotencyRecord] = []
    for m in keyed:
        record = found.get(m.idempotency_key or "")
        # From when vcm took the message, not when it was said (an imported message's own time).
        if record is not None and m.appended + ttl > now:
            out.append(IdempotencyRecord(agent_id, m.idempotency_key or "", record[0], record[1], m.appended + ttl))
    return out


def block_write(agent_id: str, block: Block) -> CoreBlockWrite:
    return CoreBlockWrite(
        agent_id=agent_id,
        block_id=block.id,
        role=block.role,
        content=block.content,
        tokens=block.tokens,
        pinned=block.pinned,
        metadata={**dict(block.metadata), HOT_REV: block.rev, "_updated_at": block.updated_at},
    )


def hot_block(
    stored_metadata: Mapping[str, Any], block_id: str, role: str, content: str, tokens: int, pinned: bool
) -> Block:
    metadata = dict(stored_metadata)
    rev = str(metadata.pop(HOT_REV, "1"))
    updated = float(metadata.pop("_updated_at", 0.0))
    return Block(block_id, role, content, tokens, pinned, rev, updated, metadata)


def floor_due(seq: int, floor: int, reserve: int) -> int | None:
    """The floor to raise to when ``seq`` came within half a reserve of ``floor``, else None."""
    return seq + reserve if seq + reserve // 2 >= floor else None


def agent_config(model: str, system_prompt: str, tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What re-creating the agent needs (budget numbers follow from the settings and the model)."""
    return {"model": model, "system_prompt": system_prompt, "tools": [dict(t) for t in tools]}


# --- the store side of the hot path ---------------------------------------------------------------
class Durability:
    """Writes the hot path's changes to the store and rebuilds hot state from it."""

    def __init__(self, hot: HotState, store: MemoryStore) -> None:
        self.hot = hot
        self.store = store
        settings = hot.settings.durability
        self.write_through = writes_through(hot.settings)
        self.reserve = settings.id_reserve
        self._floors: dict[str, int] = {}
        self._lock = threading.Lock()

    # --- writes ---------------------------------------------------------------------------------
    def agent_created(self, agent_id: str, config: Mapping[str, Any]) -> None:
        # The hot state's incarnation (a replayed creation's is the first one's); a record that
        # exists already keeps its own, which a rebuild gave the hot state.
        record = self.store.put_agent(agent_id, config, incarnation=self.hot.incarnation(agent_id))
        self._remember_floor(agent_id, record.id_floor)
        if record.id_floor < self.reserve:
            self._raise_floor(agent_id, self.reserve)

    def appended(
        self,
        agent_id: str,
        message_ids: Sequence[str],
        seq: int,
        *,
        known: Sequence[Message] = (),
        records: Mapping[str, tuple[str, str]] | None = None,
        incarnation: str | None = None,
    ) -> None:
        """After a successful append: keep the id floor ahead, and write the messages through
        (``known``: those the caller holds already, saving a read of them back from Redis;
        ``records``: their keys' idempotency records, key -> (fingerprint, result), likewise),
        fenced by the ``incarnation`` the append ran under: an agent deleted (or re-created) since
        gets none of them, and AGENT_FENCED says so."""
        floor = self._floor(agent_id)
        target = floor_due(seq, floor, self.reserve)
        if target is not None:
            self._raise_floor(agent_id, target)
        if not self.write_through:
            return
        have = {m.id: m for m in known}
        rest = [m for m in message_ids if m not in have]
        messages = [have[m] for m in message_ids if m in have] + (self.hot.get_messages(agent_id, rest) if rest else [])
        # A message already gone from Redis left with a committed batch: the store has it.
        if messages:
            self.store.spool_messages(
                [stored_message(agent_id, m, ttl_s=self.hot.settings.maintenance.recall_ttl_s) for m in messages],
                events=[append_event(agent_id, m) for m in messages],
                idempotency=append_records(self.hot, agent_id, messages, held=records),
                incarnation=incarnation,
            )

    def keep_record(self, agent_id: str, idempotency_key: str, fingerprint: str, result: str) -> None:
        """Write one idempotency record (a claim's, or its settled result) to the store, for
        ``idempotency_ttl_s`` from now; the caller acknowledges its operation after this."""
        expires_at = self.hot.clock() + self.hot.settings.idempotency_ttl_s
        self.store.put_idempotency([IdempotencyRecord(agent_id, idempotency_key, fingerprint, result, expires_at)])

    def keep_hot_record(self, agent_id: str, idempotency_key: str | None) -> None:
        """Copy the record a keyed hot-state mutation (a block edit, a requested eviction) left
        in Redis to the store."""
        if not idempotency_key:
            return
        found = self.hot.idempotency_records(agent_id, [idempotency_key]).get(idempotency_key)
        if found is not None:
            self.keep_record(agent_id, idempotency_key, *found)

    def reinstall_records(self, agent_id: str) -> int:
        """Put the agent's unexpired idempotency records from the store back into Redis (those
        Redis holds stay); how many were written."""
        written, after = 0, None
        while True:
            page = self.store.list_idempotency(agent_id, after=after, limit=1000)
            written += self.hot.install_idempotency(
                agent_id, [(r.key, r.fingerprint, r.result, r.expires_at) for r in page]
            )
            if len(page) < 1000:
                return written
            after = page[-1].key

    def block_written(self, agent_id: str, block_id: str) -> None:
        """Copy the block as the hot state now holds it (a newer hot rev always wins, so two
        edits racing to the store end with the later one)."""
        try:
            block = self.hot.get_block(agent_id, block_id)
        except NotFound:
            return  # deleted meanwhile; the delete writes its own change
        write = block_write(agent_id, block)
        for _ in range(5):
            try:
                current = self.store.get_core(agent_id, block_id)
            except NotFound:
                current = None
            if current is not None and _rev_number(current.metadata.get(HOT_REV)) >= _rev_number(block.rev):
                return
            try:
                self.store.put_core(write, None if current is None else current.rev, f"hot:{block_id}:{block.rev}")
                return
            except RevConflict:
                continue  # another writer got there between our read and write: look again

    def block_deleted(self, agent_id: str, block_id: str) -> None:
        for _ in range(5):
            try:
                current = self.store.get_core(agent_id, block_id)
                self.store.delete_core(agent_id, block_id, current.rev)
                return
            except NotFound:
                return
            except RevConflict:
                continue

    def token_changed(self, agent_id: str, token_sha256: str | None) -> None:
        self.store.set_agent_token(agent_id, token_sha256)

    # --- rebuild ----------------------------------------------------------------------------------
    def image(self, agent_id: str) -> AgentImage:
        """The agent's hot state as the store knows it."""
        record = self.store.get_agent(agent_id)
        fifo = [hot_message(m) for m in self.uncommitted(agent_id) if in_context(m)]
        blocks = [
            hot_block(b.metadata, b.block_id, b.role, b.content, b.tokens, b.pinned)
            for b in self.store.list_core(agent_id)
        ]
        summary = self.store.get_summary(agent_id)
        top_seq = max((m.seq for m in fifo), default=0)
        return AgentImage(
            fifo=fifo,
            blocks=blocks,
            summary_text=summary.text if summary else "",
            summary_tokens=summary.tokens if summary else 0,
            summary_batch=summary.batch_id if summary else 0,
            id_floor=max(record.id_floor, top_seq),
            token_sha256=record.token_sha256,
            incarnation=record.incarnation,
            # The hot path's appends the store holds (recall notes have other ids): the counter
            # resumes there rather than at the FIFO's length.
            appended=self.store.count_messages(agent_id, id_prefix=keys.MESSAGE_ID_PREFIX),
        )

    def uncommitted(self, agent_id: str) -> list[StoredMessage]:
        """Every stored message no committed batch holds, by seq (paged through the store)."""
        out: list[StoredMessage] = []
        after = -1
        while True:
            page = self.store.uncommitted_messages(agent_id, after_seq=after, limit=1000)
            out.extend(page)
            if len(page) < 1000:
                return out
            after = page[-1].seq

    def rebuild(self, agent_id: str) -> FinishResult | None:
        """Re-create the agent's hot state from the store when it is missing there. Returns what
        the budget decided on the rebuilt state (a batch to commit when it was over the flush
        line), or None when Redis still had the agent or the store has no such agent."""
        if self.hot.exists(agent_id):
            return None
        try:
            record = self.store.get_agent(agent_id)
        except NotFound:
            return None
        image = self.image(agent_id)
        # Before the agent exists again: no retry may reach it ahead of its key's record.
        self.reinstall_records(agent_id)
        config = record.config
        restored = self.hot.restore(
            agent_id,
            image,
            model=str(config.get("model") or "") or None,
            system_prompt=str(config.get("system_prompt", "")),
            tools=list(config.get("tools") or []),
        )
        if restored is None:
            return None  # another process rebuilt it first
        self._feed_restarted(agent_id)
        # The rebuilt agent continues from the floor: reserve the next stretch before use.
        self._remember_floor(agent_id, record.id_floor)
        self._raise_floor(agent_id, image.id_floor + self.reserve)
        log.info("rebuilt the hot state of agent %s from the store (%d FIFO messages)", agent_id, len(image.fifo))
        return restored

    def _feed_restarted(self, agent_id: str) -> None:
        """A change feed lost with the hot state begins again with an "agent reset" change, so a
        follower learns it cannot know what changed: one whose position came from the lost feed
        reads a gap (its position is older than the feed's first change, or beyond its head), and
        one reading the feed from its start ("0") meets the reset and drops its cache of the agent.
        A feed that survived (a reload after a reset or restore keeps it) is left as it is."""
        try:
            if not self.hot.changes.exists(agent_id):
                self.hot.changes.publish(agent_id, "agent", "*", None, "reset")
        except Exception:  # the rebuild stands; a follower still reads a gap at its next read
            log.warning("could not restart the change feed of %s", agent_id, exc_info=True)

    def missing(self) -> list[str]:
        """Stored agents whose hot state is missing."""
        present = set(self.hot.agents())
        return [r.agent_id for r in self.store.list_agents() if r.agent_id not in present]

    def forget(self, agent_id: str) -> None:
        with self._lock:
            self._floors.pop(agent_id, None)

    # --- id floor -----------------------------------------------------------------------------------
    def _floor(self, agent_id: str) -> int:
        with self._lock:
            known = self._floors.get(agent_id)
        if known is not None:
            return known
        try:
            floor = self.store.get_agent(agent_id).id_floor
        except NotFound:
            # An agent created before records existed: give it one now, from its hot state.
            snap = self.hot.snapshot(agent_id)
            config = agent_config(self.hot.agent(agent_id).model, snap.system_prompt, snap.tools)
            self.store.put_agent(agent_id, config, incarnation=self.hot.incarnation(agent_id))
            floor = 0
        self._remember_floor(agent_id, floor)
        return floor

    def _raise_floor(self, agent_id: str, target: int) -> None:
        self._remember_floor(agent_id, self.store.advance_id_floor(agent_id, target))

    def _remember_floor(self, agent_id: str, floor: int) -> None:
        with self._lock:
            self._floors[agent_id] = max(floor, self._floors.get(agent_id, 0))


def _rev_number(rev: object) -> int:
    try:
        return int(str(rev))
    except ValueError:
        return -1
