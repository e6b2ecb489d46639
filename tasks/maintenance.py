"""Periodic upkeep: the maintenance jobs (:data:`JOBS`: retention expiry, the eviction sweeper and
write-behind reconciliation, fact consolidation, periodic snapshots) and the record of their runs.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from vcm.errors import NotFound, VcmError
from vcm.hotpath.keys import message_seq
from vcm.obs import audit, footprint, metrics
from vcm.service import MemoryService
from vcm.service.maintenance import IDLE_RECORD_S
from vcm.store.audit_names import EventKind, audit_id
from vcm.store.types import Expiry, MemoryEvent
from vcm.tasks.deps import Deps
from vcm.tasks.spool import spool_messages
from vcm.types import MaintenanceJob

log = logging.getLogger(__name__)


# --- pure decisions ---------------------------------------------------------------------------
def heads(pending: Mapping[str, list[int]]) -> dict[str, int]:
    """Each agent's oldest pending batch."""
    return {agent: min(batches) for agent, batches in pending.items() if batches}


def stuck(before: Mapping[str, int], now: Mapping[str, int]) -> dict[str, int]:
    """Agents whose oldest pending batch did not move between two looks."""
    return {agent: batch for agent, batch in now.items() if before.get(agent) == batch}


def recently_dead_lettered(events: list[MemoryEvent], batch_id: int) -> bool:
    return any(e.kind == EventKind.DEAD_LETTER and e.payload.get("batch_id") == batch_id for e in events)


# --- I/O ----------------------------------------------------------------------------------------
def observe(deps: Deps) -> dict[str, int]:
    """First look: every agent's oldest pending batch."""
    return heads(deps.hot.agents_with_pending_batches())


@dataclass(frozen=True)
class RedriveOutcome:
    redriven: dict[str, int]
    held_back: dict[str, int]  # dead-lettered recently; left for the operator for now
    respooled: int
    indexes: Mapping[str, int] = field(default_factory=dict)  # the store's index upkeep (counts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": "swept",
            "redriven": len(self.redriven),
            "held_back": len(self.held_back),
            "respooled": self.respooled,
            **{f"indexes_{k}": v for k, v in self.indexes.items()},
        }


def redrive(deps: Deps, before: Mapping[str, int]) -> RedriveOutcome:
    """Second look: dispatch the batches that did not move, then reconcile the write-behind."""
    now = deps.clock()
    wait = deps.settings.maintenance.redrive_dead_letters_after_s
    redriven: dict[str, int] = {}
    held: dict[str, int] = {}
    for agent, batch in stuck(before, observe(deps)).items():
        if wait > 0:
            events = deps.store.query_events(agent, [EventKind.DEAD_LETTER], since=now - wait, limit=1000).items
            if recently_dead_lettered(events, batch):
                held[agent] = batch
                continue
        log.warning("re-dispatching eviction batch %s of %s: pending for a whole sweep", batch, agent)
        deps.dispatcher.evict(agent, batch)
        redriven[agent] = batch
    respooled = reconcile_spool(deps, older_than=now - deps.settings.maintenance.sweep_grace_s)
    return RedriveOutcome(redriven, held, respooled, maintain_indexes(deps))


def maintain_indexes(deps: Deps) -> dict[str, int]:
    """The store's index upkeep (creating ArangoDB's vector indexes once due), here rather than
    in the query or the write that finds one missing; its failure is logged, not the sweep's."""
    try:
        return deps.store.maintain_indexes()
    except VcmError as exc:
        log.warning("index upkeep failed, the next sweep retries: %s", exc)
        return {}


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
    due = [m for m in by_id.values() if m.appended <= older_than]
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


def expire(deps: Deps) -> Expiry:
    """Delete recall messages past their TTL, expired snapshots, state keys and idempotency
    records, mark expired facts ``expired``, and record the sweep when it changed anything. The
    store reports counts for all agents, so the row belongs to no single agent (``agent_id``
    ``*``)."""
    now = deps.clock()
    expiry = replace(deps.store.expire_all(now), idempotency=deps.store.expire_idempotency(now))
    if expiry.total:
        deps.store.append_event(
            audit.event(
                audit.ALL_AGENTS,
                EventKind.EXPIRE,
                footprint.expiry(expiry.messages, now),
                actor=audit.worker("expire"),
                event_id=f"expire:{now:.6f}",
                created_at=now,
                details={
                    "removed": expiry.messages,
                    **expiry.as_dict(),
                    "retention_s": deps.settings.maintenance.recall_ttl_s,
                },
            )
        )
    for kind, n in expiry.as_dict().items():
        if n:
            metrics.EXPIRED.labels(kind=kind).inc(n)
    return expiry


# --- the jobs ----------------------------------------------------------------------------------
# One function per job (vcm.types.MaintenanceJob), shared by the Celery tasks that beat sends
# (vcm.workers.tasks) and the run-now paths (vcm.workers.maintenance), so a run answers the same
# outcome whoever started it. Each returns a small dict with an ``outcome``.
JobBody = Callable[[Deps], dict[str, Any]]


def expire_job(deps: Deps) -> dict[str, Any]:
    return {"outcome": "expired", **expire(deps).as_dict()}


def sweep_now(deps: Deps) -> dict[str, Any]:
    """Both looks of the sweeper at once (the run-now path): without a second look ``sweep_grace_s``
    later, every agent's oldest pending batch counts as stuck and is dispatched again. That is safe
    (an eviction is idempotent: a duplicate finds nothing to do), and what an operator who asks
    for a sweep wants; beat's sweeps keep the two looks (tasks.sweep, then tasks.sweep_confirm)."""
    return redrive(deps, observe(deps)).as_dict()


def snapshot_job(deps: Deps) -> dict[str, Any]:
    """A periodic snapshot of every agent, through the façade like any other caller."""
    taken = MemoryService(deps.hot, deps.store, deps.dispatcher).snapshot_all(kind="periodic")
    return {"outcome": "snapshots", "taken": taken}


def consolidate_job(deps: Deps) -> dict[str, Any]:
    """Shadow facts of every agent through the replay test (SHADOW -> ACTIVE, seed 002 §8)."""
    service = MemoryService(deps.hot, deps.store, deps.dispatcher, embed=deps.embed)
    totals: dict[str, int] = {}
    agents = service.store_agent_ids()
    for agent_id in agents:
        try:
            found = service.consolidate(agent_id)
        except NotFound:  # deleted meanwhile
            continue
        for name, n in found.items():
            totals[name] = totals.get(name, 0) + n
    return {"outcome": "consolidated", "agents": len(agents), **totals}


JOBS: dict[MaintenanceJob, JobBody] = {
    MaintenanceJob.EXPIRE: expire_job,
    MaintenanceJob.SWEEP: sweep_now,
    MaintenanceJob.CONSOLIDATE: consolidate_job,
    MaintenanceJob.SNAPSHOT: snapshot_job,
}

# A run that changed nothing is recorded at most this often per job: sweeps run every minute, and
# a row for each would be 1 440 rows a day of "nothing to do"; this keeps "when did it last run"
# answerable (``vcm doctor``) to within the hour from the store, which every process of a
# deployment can read, while every run that did something keeps its own row.


def run(deps: Deps, job: MaintenanceJob, body: JobBody | None = None, *, trigger: str = "beat") -> dict[str, Any]:
    """Run one job (``body``: a different body for the same job, the second look of beat's sweep),
    count it and record its run (see :func:`record_run`); returns its outcome."""
    started = deps.clock()
    outcome = (body or JOBS[job])(deps)
    metrics.MAINTENANCE_RUNS.labels(job=str(job), trigger=trigger).inc()
    if job is MaintenanceJob.SWEEP:
        metrics.REDRIVEN.inc(int(outcome.get("redriven", 0)))
        metrics.RESPOOLED.inc(int(outcome.get("respooled", 0)))
    record_run(deps, job, outcome, started=started, trigger=trigger)
    return outcome


def did_something(outcome: Mapping[str, Any]) -> bool:
    """Whether an outcome reports any work: a positive count anywhere in it."""
    return any(isinstance(v, int) and not isinstance(v, bool) and v > 0 for k, v in outcome.items() if k != "agents")


def record_run(deps: Deps, job: MaintenanceJob, outcome: Mapping[str, Any], *, started: float, trigger: str) -> bool:
    """The audit row of one run (kind ``maintenance``, agent ``*``, actor ``worker:<job>``): always
    for a run that did something or was asked for now, else at most one per :data:`IDLE_RECORD_S`.
    Returns whether a row was written."""
    now = deps.clock()
    actor = audit.worker(str(job))
    if trigger == "beat" and not did_something(outcome):
        recent = deps.store.query_events(
            audit.ALL_AGENTS, [EventKind.MAINTENANCE], since=now - IDLE_RECORD_S, actor=actor, limit=1
        )
        if recent.items:
            return False
    deps.store.append_event(
        audit.event(
            audit.ALL_AGENTS,
            EventKind.MAINTENANCE,
            None,
            actor=actor,
            event_id=audit_id(audit.ALL_AGENTS, "maintenance", job, f"{started:.6f}"),
            created_at=now,
            details={"job": str(job), "trigger": trigger, "duration_s": round(now - started, 3), **outcome},
        )
    )
    return True
