"""A forgotten message's words leave the summary: its versions are re-summarised from what remains.

The recursive summary folds each eviction batch into the previous summary, so a message's words
can be in the version of the batch that evicted it and in every later one. A forget of an evicted
message therefore replays the summariser from that batch on: the version before it is kept (it
never saw the message), and each later version is rebuilt from the rebuilt previous one and its
batch's messages as the store now holds them (the forgotten one is gone). The evicting batch is
found in the ``evict`` audit rows, which list message ids (never content).

Versions a reset or snapshot restore installed (no ``evict`` row) are kept as written, and the
chain continues from them; the restore path notes a forget in a restored summary itself.

The rewrite is one store transaction, fenced by the current summary's rev (an eviction that
committed meanwhile makes it start over), then the hot state's summary is replaced while it is
still the rewritten batch's. An eviction whose store commit landed just before the rewrite but
whose hot install has not yet run would install its own, older draft: the replace waits for it
(bounded) and goes after it.

The summariser is the cold path's (``vcm.tasks``, above this layer): a :class:`SummaryRewriter`
wired by the entry point. Without one, the summary only gets a note that a message was removed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from vcm.errors import Conflict, NotFound, RevConflict
from vcm.service.core import Core
from vcm.store.audit_names import Actor, EventKind
from vcm.store.types import StoredMessage, Summary, SummaryVersion

# Versions read for a replay, at most (a longer history keeps the older versions unrewritten,
# which a forget's check then reports).
MAX_VERSIONS = 1000
# Tries of a replay that an eviction committing meanwhile interrupted.
ATTEMPTS = 4
# How long the hot-state install of a rewritten summary waits for a committed eviction's own
# install to go first.
HOT_WAIT_S = 5.0


class SummaryRewriter(Protocol):
    def __call__(self, agent_id: str, previous: str, messages: Sequence[StoredMessage]) -> tuple[str, int]:
        """``messages`` folded into the summary ``previous`` by the cold path's summariser (its cap,
        drift check and poisoning scan); the text and its tokens."""


@dataclass(frozen=True)
class Redaction:
    """What a replay rewrote: the first batch it started from and each version's batch id and new
    rev (the forget's check compares them)."""

    from_batch: int
    versions: tuple[tuple[int, str], ...]


class SummaryRedaction:
    def __init__(self, core: Core, rewriter: SummaryRewriter | None) -> None:
        self.core = core
        self.rewriter = rewriter

    @property
    def available(self) -> bool:
        return self.rewriter is not None

    def batch_of(self, agent_id: str, message_id: str) -> int | None:
        """The batch whose eviction folded ``message_id`` into the summary (None: none did)."""
        cursor: str | None = None
        while True:
            page = self.core.store.query_events(agent_id, [EventKind.EVICT], limit=1000, cursor=cursor)
            for row in page.items:
                if message_id in (row.payload.get("message_ids") or ()):
                    return int(row.payload["batch_id"])
            cursor = page.next_cursor
            if not cursor:
                return None

    def redact(self, agent_id: str, from_batch: int) -> Redaction:
        """Re-summarise every version from ``from_batch`` on (see the module docstring)."""
        assert self.rewriter is not None
        for _ in range(ATTEMPTS):
            current = self.core.store.get_summary(agent_id)
            rewritten = self._replay(agent_id, from_batch)
            try:
                after = self.core.store.rewrite_summaries(
                    agent_id, rewritten, expected_rev=current.rev if current is not None else None
                )
            except RevConflict:
                continue  # an eviction committed meanwhile: its version joins the replay
            if after is not None and any(v.batch_id == after.batch_id for v in rewritten):
                self._install(agent_id, after)
            revs = {v.batch_id: v.rev for v in self.core.store.summary_versions(agent_id, limit=MAX_VERSIONS)}
            return Redaction(from_batch, tuple((v.batch_id, revs.get(v.batch_id, "")) for v in rewritten))
        raise Conflict(
            f"the summary of agent {agent_id!r} kept changing while a forget rewrote it; forget again",
            agent_id=agent_id,
        )

    def _replay(self, agent_id: str, from_batch: int) -> list[SummaryVersion]:
        assert self.rewriter is not None
        versions = sorted(self.core.store.summary_versions(agent_id, limit=MAX_VERSIONS), key=lambda v: v.batch_id)
        batches = self._evicted(agent_id, from_batch)
        previous = next((v.text for v in reversed(versions) if v.batch_id < from_batch), "")
        out: list[SummaryVersion] = []
        for v in versions:
            if v.batch_id < from_batch:
                continue
            ids = batches.get(v.batch_id)
            if ids is None:  # a reset's or a restore's: kept, and the chain goes on from it
                previous = v.text
                continue
            messages = sorted(self.core.store.get_messages(agent_id, ids), key=lambda m: m.seq)
            text, tokens = self.rewriter(agent_id, previous, messages)
            out.append(replace(v, text=text, tokens=tokens))
            previous = text
        return out

    def _evicted(self, agent_id: str, from_batch: int) -> dict[int, list[str]]:
        """Message ids of each batch evicted from ``from_batch`` on, from the ``evict`` rows."""
        found: dict[int, list[str]] = {}
        cursor: str | None = None
        while True:
            page = self.core.store.query_events(agent_id, [EventKind.EVICT], limit=1000, cursor=cursor)
            for row in page.items:
                batch = int(row.payload.get("batch_id", 0))
                if batch >= from_batch:
                    found[batch] = [str(m) for m in row.payload.get("message_ids") or ()]
            cursor = page.next_cursor
            if not cursor:
                return found

    def _install(self, agent_id: str, summary: Summary) -> None:
        """The rewritten current summary into the hot state (see the module docstring)."""
        deadline = time.monotonic() + HOT_WAIT_S
        while True:
            try:
                finished = self.core.hot_call(
                    agent_id, self.core.hot.replace_summary, agent_id, summary.batch_id, summary.text
                )
            except NotFound:
                return  # no hot state: a rebuild reads the store's summary, rewritten
            except Conflict as exc:
                held = int(exc.details.get("batch_id", 0))
                if held > summary.batch_id or time.monotonic() > deadline:
                    return  # a later eviction folded the rewritten summary in already
                time.sleep(0.05)  # the eviction that committed it has not installed it yet
                continue
            if finished.pressure_message_id:
                self.core.dispatcher.spool(agent_id, [finished.pressure_message_id])
            if finished.batch is not None:
                self.core.batch_begun(agent_id, finished.batch, finished.total, False, Actor.SYSTEM)
            return
