"""Re-embedding of stored messages for vector recall.

The spool embeds each message once, under the vectorizer's version (model and context mode).
After a model change every older message lacks a vector of the new version, and a message whose
embedding failed lacks one for good: text search still finds them (hybrid recall scores a
missing vector by the text score, see ``vcm.store.fusion.convex``), vector search cannot. This
pages through an agent's stored conversation in ``seq`` order and embeds each message without a
vector of the current version, with its stored neighbours as context, as the spool would have.

Idempotent (the store keeps the first vector of a version) and resumable: a run stopped midway
is finished by the next, which skips what is already embedded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vcm.errors import AgentFenced, NotFound
from vcm.obs import audit
from vcm.store import validation
from vcm.store.audit_names import EventKind, audit_id
from vcm.store.port import MemoryStore
from vcm.store.types import StoredMessage
from vcm.tasks.fence import fenced, note_fenced
from vcm.tasks.recall.vectors import Turn, Vectorizer, message_text
from vcm.tasks.spool import embed_into_store

ACTOR = audit.worker("reembed")


@dataclass(frozen=True)
class ReembedOutcome:
    agent_id: str
    version: str
    scanned: int  # stored messages read
    embedded: int  # new vectors stored
    done: bool = True  # False: stopped at max_embedded; resume with after_seq=next_after_seq
    next_after_seq: int = -1

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": "reembedded" if self.done else "partial",
            "agent_id": self.agent_id,
            "version": self.version,
            "scanned": self.scanned,
            "embedded": self.embedded,
            "next_after_seq": self.next_after_seq,
        }


def reembed_agent(
    store: MemoryStore,
    agent_id: str,
    vectorizer: Vectorizer,
    *,
    page: int = 200,
    after_seq: int = -1,
    max_embedded: int | None = None,
    clock: Callable[[], float] = time.time,
) -> ReembedOutcome:
    """Embed the agent's stored messages after ``after_seq`` that have no vector of
    ``vectorizer.version``.

    Each page is embedded with the ``context`` turns before it (the previous page's tail) and,
    for ``after`` turns of context after a message, its last ``after`` messages wait for the next
    page (all are embedded at the end). With ``max_embedded``, stops after a page that reached
    it; the outcome's ``next_after_seq`` resumes where the context of the rest begins. Records one
    ``reembed`` event when anything was new.

    Fenced by the agent's incarnation as the store holds it at the start (:mod:`vcm.tasks.fence`):
    an agent deleted or re-created meanwhile gets no vector of this run (the run ends, done)."""
    validation.limit("page", page)
    try:
        incarnation = store.get_agent(agent_id).incarnation
    except NotFound:  # deleted, or never stored: nothing of it to embed
        return ReembedOutcome(agent_id, vectorizer.version, 0, 0, True, after_seq)
    try:
        return _reembed(fenced(store, incarnation), agent_id, vectorizer, page, after_seq, max_embedded, clock)
    except AgentFenced:
        note_fenced("reembed", agent_id)
        return ReembedOutcome(agent_id, vectorizer.version, 0, 0, True, after_seq)


def _reembed(
    store: MemoryStore,
    agent_id: str,
    vectorizer: Vectorizer,
    page: int,
    after_seq: int,
    max_embedded: int | None,
    clock: Callable[[], float],
) -> ReembedOutcome:
    keep_before = max(vectorizer.context, 0)
    keep_after = max(vectorizer.after, 0)
    history: list[StoredMessage] = []
    pending: list[StoredMessage] = []
    cursor, scanned, embedded = after_seq, 0, 0
    done = True
    while True:
        found = store.list_messages(agent_id, after_seq=cursor, limit=page)
        scanned += len(found)
        if found:
            cursor = found[-1].seq
        final = len(found) < page
        candidates = [*pending, *(m for m in found if m.content.strip())]
        wait = 0 if final else min(keep_after, len(candidates))
        ready, pending = candidates[: len(candidates) - wait], candidates[len(candidates) - wait :]
        embedded += _embed_missing(store, agent_id, ready, [*history, *candidates], vectorizer)
        history = [*history, *ready][-keep_before:] if keep_before else []
        if final:
            break
        if max_embedded is not None and embedded >= max_embedded:
            done = False
            first = history or pending
            cursor = first[0].seq - 1 if first else cursor
            break
    if embedded:
        store.append_event(
            audit.event(
                agent_id,
                EventKind.REEMBED,
                None,
                actor=ACTOR,
                event_id=audit_id(agent_id, "reembed", vectorizer.version, cursor, embedded),
                created_at=clock(),
                details={"version": vectorizer.version, "scanned": scanned, "embedded": embedded},
            )
        )
    return ReembedOutcome(agent_id, vectorizer.version, scanned, embedded, done, cursor)


def _embed_missing(
    store: MemoryStore,
    agent_id: str,
    ready: list[StoredMessage],
    context: list[StoredMessage],
    vectorizer: Vectorizer,
) -> int:
    if not ready:
        return 0
    have = store.message_vector_ids(agent_id, [m.message_id for m in ready], vectorizer.version)
    targets = [(m.message_id, _turn(m)) for m in ready if m.message_id not in have]
    return embed_into_store(store, agent_id, targets, [_turn(m) for m in context], vectorizer)


def _turn(message: StoredMessage) -> Turn:
    return Turn(message.seq, message_text(message.content, message.name))
