"""Periodic upkeep: recall TTL expiry, the eviction sweeper, and write-behind reconciliation.

The sweeper works in two looks, ``sweep_grace_s`` apart, and keeps no state of its own: the
first look records each agent's oldest pending batch and hands that record to the second (a
countdown task). A batch that is still the oldest pending one at the second look has had no
successful job for the whole grace period (its message lost with a dead worker, its dispatch
failed, or it was dead-lettered), so it is dispatched again. That is always safe: ``evict_batch``
is idempotent and commits in order, so a duplicate at worst finds nothing to do. Only the
oldest batch per agent is dispatched; finishing it dispatches the next. A dead-lettered batch
waits ``redrive_dead_letters_after_s`` before the sweeper tries it again (an operator may act
first), so a batch that keeps failing does not spin.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vcm.errors import NotFound
from vcm.hotpath.keys import message_seq
from vcm.obs import audit, footprint
from vcm.store.audit_names import EventKind
from vcm.store.types import MemoryEvent
from vcm.tasks.deps import Deps
from vcm.tasks.spool import spool_messages

log = logging.getLogger(__name__)


# --- pure decisions ---------------------------------------------------------------------------
def heads(pending: Mapping[str, list[int]]) -> dict[str, int]:
    """Each agent's oldest pending batch."""
    return {agent: min(batches) for agent, batches in pending.items() if batches}


def stuck(before: Mapping[str, int], now: Mapping[str, int]) -> dict[str, int]:
    """Agents whose oldest pending batch did not move between two looks."""
    return {agent: batch for agent, batch in now.items() if before.get(agent) == batch}


def recently_dead_lettered(events: list[MemoryEvent], batch_id: int) -> bool:
    return any(e.kind == "dead_letter" and e.payload.get("batch_id") == batch_id for e in events)


# --- I/O ----------------------------------------------------------------------------------------
def observe(deps: Deps) -> dict[str, int]:
    """First look: every agent's oldest pending batch."""
    return heads(deps.hot.agents_with_pending_batches())


@dataclass(frozen=True)
class RedriveOutcome:
    redriven: dict[str, int]
    held_back: dict[str, int]  # dead-lettered recently; left for the operator for now
    respooled: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": "swept",
            "redriven": len(self.redriven),
            "held_back": len(self.held_back),
            "respooled": self.respooled,
        }


def redrive(deps: Deps, before: Mapping[str, int]) -> RedriveOutcome:
    """Second look: dispatch the batches that did not move, then reconcile the write-behind."""
    now = deps.clock()
    wait = deps.settings.maintenance.redrive_dead_letters_after_s
    redriven: dict[str, int] = {}
    held: dict[str, int] = {}
    for agent, batch in stuck(before, observe(deps)).items():
        if wait > 0:
            events = deps.store.query_events(agent, ["dead_letter"], since=now - wait, limit=1000).items
            if recently_dead_lettered(events, batch):
                held[agent] = batch
                continue
        log.warning("re-dispatching eviction batch %s of %s: pending for a whole sweep", batch, agent)
        deps.dispatcher.evict(agent, batch)
        redriven[agent] = batch
    respooled = reconcile_spool(deps, older_than=now - deps.settings.maintenance.sweep_grace_s)
    return RedriveOutcome(redriven, held, respooled)


def reconcile_spool(deps: Deps, *, older_than: float) -> int:
    """Spool FIFO messages the write-behind missed (lost task, failed dispatch). Returns how many
    were written. Messages in pending batches are left to their eviction commit.

    Each agent keeps a watermark (:meth:`HotState.reconciled_seq`): the FIFO's messages up to it
    were found stored by an earlier sweep, so a sweep reads the FIFO's ids and only the messages
    after it, not whole 128k windows of every agent every 30 s."""
    written = 0
    for agent in deps.hot.agents():
        try:
            written += _reconcile_agent(deps, agent, older_than)
        except NotFound:  # removed since the listing
            continue
    return written


def _reconcile_agent(deps: Deps, agent: str, older_than: float) -> int:
    start = mark = deps.hot.reconciled_seq(agent)
    fresh = [i for i in deps.hot.fifo_ids(agent) if (message_seq(i) or mark + 1) > mark]
    if not fresh:
        return 0
    by_id = {m.id: m for m in deps.hot.get_messages(agent, fresh)}
    due = [m for m in by_id.values() if m.created_at <= older_than]
    written = 0
    if due:
        stored = {m.message_id for m in deps.store.get_messages(agent, [m.id for m in due])}
        missing = [m.id for m in due if m.id not in stored]
        if missing:
            outcome = spool_messages(deps.hot, deps.store, agent, missing, ttl_s=deps.settings.maintenance.recall_ttl_s)
            written = outcome.written
            log.warning("spooled %s messages of %s that the write-behind missed", written, agent)
    # Up to the first message still in its grace period, everything is now stored (or has left
    # the FIFO with a batch, whose commit stores it).
    for message_id in fresh:
        message = by_id.get(message_id)
        seq = message_seq(message_id)
        if seq is None or (message is not None and message.created_at > older_than):
            break
        mark = seq
    if mark != start:
        deps.hot.set_reconciled_seq(agent, mark)
    return written


def expire(deps: Deps) -> int:
    """Delete recall messages past their TTL, and record the sweep when it deleted any. The
    store reports one count for all agents, so the row belongs to no single agent
    (``agent_id`` ``*``)."""
    now = deps.clock()
    removed = deps.store.expire(now)
    if removed:
        deps.store.append_event(
            audit.event(
                audit.ALL_AGENTS,
                EventKind.EXPIRE,
                footprint.expiry(removed, now),
                actor=audit.worker("expire"),
                event_id=f"expire:{now:.6f}",
                created_at=now,
                details={"removed": removed, "retention_s": deps.settings.maintenance.recall_ttl_s},
            )
        )
    return removed
