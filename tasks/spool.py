"""Write-behind of appended messages to the store's recall log.

Idempotent by message id (the store keeps the first write). The idempotency records of keyed
appends travel with their messages, so the store can replay them after Redis lost them. A message
no longer in Redis has left with its eviction batch, which committed it to the store first, so it
is skipped, not lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from vcm.durable import append_event, append_records, stored_message
from vcm.errors import AgentFenced, NotFound
from vcm.hotpath.state import HotState
from vcm.store.port import MemoryStore
from vcm.store.types import IdempotencyRecord
from vcm.tasks.faults import NO_FAULTS, Faults
from vcm.tasks.fence import fenced, note_fenced, read_fenced
from vcm.tasks.recall.vectors import Turn, Vectorizer, message_text, ready_targets
from vcm.types import Message


@dataclass(frozen=True)
class SpoolOutcome:
    asked: int
    found: int  # still in Redis
    written: int  # new in the store
    embedded: int | None = None  # new message vectors, when a vectorizer was given
    fenced: bool = False  # the agent was deleted or re-created since: nothing written

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "outcome": "fenced" if self.fenced else "spooled",
            "asked": self.asked,
            "found": self.found,
            "written": self.written,
        }
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
    vectorizer: Vectorizer | None = None,
) -> SpoolOutcome:
    """Write the messages still in Redis to the store; with a ``vectorizer``, also embed them for
    vector recall (see :func:`embed_messages`). Both writes are idempotent, so a retried spool
    re-embeds at worst and stores nothing twice. The messages are read between two reads of the
    agent's incarnation and written fenced by it (:mod:`vcm.tasks.fence`): a spool of an agent
    deleted or re-created since writes nothing and answers ``fenced``."""

    def messages_and_records() -> tuple[list[Message], list[IdempotencyRecord]]:
        # The keyed appends' records are read inside the fence too: read after it, a Redis lost
        # in between would leave messages stored without them, and a retry would append again.
        messages = hot.get_messages(agent_id, list(dict.fromkeys(message_ids)))
        return messages, append_records(hot, agent_id, messages)

    try:
        read = read_fenced(hot, agent_id, messages_and_records)
    except NotFound:  # the agent is gone, and its messages with it
        return SpoolOutcome(len(message_ids), 0, 0)
    if read is None:  # re-created meanwhile: the ids read may be the new agent's, its own spool's
        note_fenced("spool", agent_id)
        return SpoolOutcome(len(message_ids), 0, 0, fenced=True)
    incarnation, found = read
    try:
        return _write(hot, fenced(store, incarnation), agent_id, message_ids, found, ttl_s, faults, vectorizer)
    except AgentFenced:
        note_fenced("spool", agent_id)
        return SpoolOutcome(len(message_ids), len(found[0]), 0, fenced=True)


def _write(
    hot: HotState,
    store: MemoryStore,
    agent_id: str,
    message_ids: Sequence[str],
    read: tuple[list[Message], list[IdempotencyRecord]],
    ttl_s: int,
    faults: Faults,
    vectorizer: Vectorizer | None,
) -> SpoolOutcome:
    messages, records = read
    faults.point("spool.before_write", agent_id)
    written = (
        store.spool_messages(
            [stored_message(agent_id, m, ttl_s=ttl_s) for m in messages],
            events=[append_event(agent_id, m) for m in messages],
            # The records of keyed appends ride with their messages (one transaction).
            idempotency=records,
        )
        if messages
        else 0
    )
    # In the store now (or gone from Redis with a committed batch): out of write-behind's backlog.
    hot.backlog.done(agent_id, list(message_ids))
    if vectorizer is None:
        return SpoolOutcome(len(message_ids), len(messages), written)
    # Written before embedded: an embedding failure raises with the messages already stored,
    # and the caller's retry embeds them (while they are still in Redis).
    faults.point("spool.before_embed", agent_id)
    embedded = embed_messages(hot, store, agent_id, messages, vectorizer)
    return SpoolOutcome(len(message_ids), len(messages), written, embedded)


def embed_messages(
    hot: HotState, store: MemoryStore, agent_id: str, messages: Sequence[Message], vectorizer: Vectorizer
) -> int:
    """Embed messages for vector recall, in the context of the agent's window (read once), and
    store the vectors under the vectorizer's version. Returns how many were new.

    With turns *after* a message as context (``vectorizer.after``), a message is embedded once
    that many turns have followed it: spooling a message embeds the one ``after`` places before
    it. The newest ``after`` messages wait for their followers (they are in the context window
    meanwhile, and text search finds them); a message evicted before its followers arrive is
    embedded by its eviction (:func:`backfill_vectors`)."""
    spooled = [m for m in messages if m.content.strip()]
    if not spooled:
        return 0
    reach = _reach(vectorizer.context + vectorizer.after)
    window = (
        hot.fifo_near(agent_id, [m.id for m in spooled], before=reach, after=0, head=_reach(vectorizer.after))
        if reach
        else []
    )
    # The spooled messages count as context too (one may have left the FIFO with a batch).
    by_seq = _by_seq([*window, *spooled])
    ready = ready_targets(_turns(by_seq.values()), _turns(spooled), vectorizer.after)
    return _embed(store, agent_id, [by_seq[t.seq] for t in ready], by_seq.values(), vectorizer)


def backfill_vectors(
    hot: HotState, store: MemoryStore, agent_id: str, messages: Sequence[Message], vectorizer: Vectorizer
) -> int:
    """Embed the messages of an eviction batch that carry no vector yet, with the batch and the
    FIFO after it as context. The spool embeds a message only once its followers are spooled
    while it is still in Redis; when the spool queue lags behind evictions (or the window is
    small) a message leaves first, and without this it would stay out of vector recall for good.
    Call it after the batch is committed (vectors attach to stored messages only)."""
    candidates = [m for m in messages if m.content.strip()]
    if not candidates:
        return 0
    have = store.message_vector_ids(agent_id, [m.id for m in candidates], vectorizer.version)
    missing = [m for m in candidates if m.id not in have]
    if not missing:
        return 0
    # The batch has left the FIFO: the turns after it are the FIFO's oldest.
    window = hot.fifo_near(agent_id, [], before=0, after=0, head=_reach(vectorizer.after)) if vectorizer.after else []
    return _embed(store, agent_id, missing, _by_seq([*candidates, *window]).values(), vectorizer)


def _reach(turns: int) -> int:
    """FIFO places to read for ``turns`` turns of context: empty messages (tool calls) are no
    turns, so read twice as many and a few more; 0 when no context is wanted."""
    return 2 * turns + 8 if turns > 0 else 0


def _by_seq(messages: Iterable[Message]) -> dict[int, Message]:
    return {m.seq: m for m in messages if m.content.strip()}


def _turns(messages: Iterable[Message]) -> list[Turn]:
    return [Turn(m.seq, message_text(m.content, m.name)) for m in messages]


def _embed(
    store: MemoryStore,
    agent_id: str,
    targets: Sequence[Message],
    context: Iterable[Message],
    vectorizer: Vectorizer,
) -> int:
    """Embed ``targets`` with ``context`` around them and store the vectors; how many were new."""
    return embed_into_store(
        store, agent_id, [(m.id, t) for m, t in zip(targets, _turns(targets), strict=True)], _turns(context), vectorizer
    )


def embed_into_store(
    store: MemoryStore,
    agent_id: str,
    targets: Sequence[tuple[str, Turn]],
    context: Sequence[Turn],
    vectorizer: Vectorizer,
) -> int:
    """Embed the ``(message id, turn)`` targets with ``context`` around them and store the
    vectors under the vectorizer's version; how many were new. Shared by the spool, the eviction
    backfill and re-embedding (:mod:`vcm.tasks.recall.reembed`)."""
    if not targets:
        return 0
    vectors = vectorizer.embed(context, [t for _, t in targets])
    pairs = [(mid, [float(x) for x in v]) for (mid, _), v in zip(targets, vectors, strict=True) if v is not None]
    return store.put_message_vectors(agent_id, pairs, vectorizer.version) if pairs else 0
