# mypy: disable-error-code="untyped-decorator"
"""Thin Celery wrappers around the cold-path functions. The logic lives in the modules they call.

Tasks take ids, never objects, and are idempotent, so a redelivery is harmless. Each task:

* retries any failure with exponential backoff and full jitter (:mod:`vcm.tasks.backoff`) up to
  ``max_retries``; then it is dead-lettered: recorded, never dropped (the eviction batch stays in
  Redis for the sweeper, a missed spool is caught by the sweeper's reconciliation);
* counts its deliveries (:class:`vcm.workers.runtime.DeliveryLog`): a message delivered
  ``max_deliveries`` times without finishing (its worker killed each time) is dead-lettered
  instead of run again, so a task that crashes its worker cannot loop forever.

Return values are small dicts with an ``outcome``; ``vcm.workers.metrics`` counts them.
Retry attributes (``max_retries``, ``retry_backoff``, ...) come from ``vcm.workers.config``'s
``task_annotations``; the class defaults below apply when no app sets them.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from celery.exceptions import Reject

from vcm.dispatch import COLD_PATH
from vcm.tasks import evict, maintenance
from vcm.tasks.backoff import delay_s
from vcm.tasks.ingest import jobs as ingest_job
from vcm.tasks.recall import reembed
from vcm.tasks.spool import spool_messages
from vcm.types import IngestRequest, MaintenanceJob
from vcm.workers import runtime
from vcm.workers.names import (
    CONSOLIDATE,
    DEAD_LETTER,
    EVICT,
    EXPIRE,
    INGEST,
    REEMBED,
    SNAPSHOT,
    SPOOL,
    SPOOL_MANY,
    SWEEP,
    SWEEP_CONFIRM,
)

log = logging.getLogger(__name__)


class VcmTask(Task):  # type: ignore[misc]  # celery ships no type information
    max_retries = 8
    retry_backoff = 2.0
    retry_backoff_max = 120.0
    max_deliveries = 5

    # Seconds a task waits for a generation in this process to end (embedded mode; 0: never).
    pause_for_generation_s = 10.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if COLD_PATH.active and self.pause_for_generation_s:
            COLD_PATH.wait_idle(self.pause_for_generation_s)
        request = self.request
        if request.id and not request.is_eager:
            deliveries = runtime.deliveries().record(request.id, request.retries or 0)
            if deliveries > self.max_deliveries:
                reason = f"delivered {deliveries} times without finishing (its worker died each time)"
                return self.give_up(reason, *args, **kwargs)
        return super().__call__(*args, **kwargs)

    def retry_or_give_up(self, exc: Exception, *args: Any, **kwargs: Any) -> Any:
        """Schedule a retry (raises celery's Retry), or dead-letter when retries are spent."""
        attempt = self.request.retries or 0
        if attempt < self.max_retries:
            countdown = delay_s(attempt, float(self.retry_backoff), float(self.retry_backoff_max))
            log.warning("%s%s failed (%r); retry %s in %.1fs", self.name, args, exc, attempt + 1, countdown)
            try:
                raise self.retry(exc=exc, countdown=countdown, max_retries=self.max_retries)
            except Reject as rejected:
                # Celery rejects *without* requeue when it cannot publish the retry, which happens
                # when the broker is the Redis that just blinked: the message would be dropped and
                # counted as a dead letter after one attempt. Requeue it instead (or, if the broker
                # cannot take even that, it stays unacknowledged and is restored).
                raise Reject(rejected.reason, requeue=True) from exc
        return self.give_up(f"{type(exc).__name__}: {exc}", *args, **kwargs)

    def give_up(self, reason: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        log.error("%s%s dead-lettered: %s", self.name, args, reason)
        return {"outcome": "dead_lettered", "reason": reason}


class EvictTask(VcmTask):
    def give_up(self, reason: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        agent_id, batch_id = _evict_args(*args, **kwargs)
        attempts = (self.request.retries or 0) + 1
        try:
            outcome = evict.dead_letter(
                runtime.deps(), agent_id, batch_id, reason=reason, attempts=attempts, delivery=self.request.id or "-"
            )
            return outcome.as_dict() | {"reason": reason}
        except Exception as exc:  # the store may be what is failing: the batch is in Redis anyway
            log.error("could not record the dead letter of %s batch %s: %r", agent_id, batch_id, exc)
            return {"outcome": "dead_lettered", "agent_id": agent_id, "batch_id": batch_id, "reason": reason}


def _evict_args(agent_id: str, batch_id: int) -> tuple[str, int]:
    return agent_id, batch_id


@shared_task(bind=True, base=EvictTask, name=EVICT)
def evict_batch(self: EvictTask, agent_id: str, batch_id: int) -> dict[str, Any]:
    try:
        return evict.evict_batch(runtime.deps(), agent_id, batch_id).as_dict()
    except Exception as exc:  # any failure leaves the batch in Redis; retrying is safe
        return dict(self.retry_or_give_up(exc, agent_id, batch_id))


@shared_task(bind=True, base=VcmTask, name=SPOOL)
def spool(self: VcmTask, agent_id: str, message_ids: list[str]) -> dict[str, Any]:
    deps = runtime.deps()
    try:
        outcome = spool_messages(
            deps.hot,
            deps.store,
            agent_id,
            message_ids,
            ttl_s=deps.settings.maintenance.recall_ttl_s,
            faults=deps.faults,
            vectorizer=deps.vectorizer,
        )
        return outcome.as_dict()
    except Exception as exc:  # spooling and embedding are idempotent
        # The messages are written before they are embedded: a failed embedding loses nothing,
        # and the retry embeds what is still in Redis.
        return dict(self.retry_or_give_up(exc, agent_id, message_ids))


@shared_task(bind=True, base=VcmTask, name=SPOOL_MANY)
def spool_agents(self: VcmTask, batches: dict[str, list[str]]) -> dict[str, Any]:
    """The spools of several agents (``{agent id: message ids}``), one after another. An agent
    whose spool fails is handed to a ``spool`` task of its own, which retries it with backoff,
    so one agent's trouble neither repeats the others' work nor holds them back; if even that
    hand-over fails, the sweeper's reconcile spools its messages."""
    deps = runtime.deps()
    written, handed_over = 0, 0
    for agent_id, message_ids in batches.items():
        try:
            written += spool_messages(
                deps.hot,
                deps.store,
                agent_id,
                message_ids,
                ttl_s=deps.settings.maintenance.recall_ttl_s,
                faults=deps.faults,
                vectorizer=deps.vectorizer,
            ).written
        except Exception as exc:  # idempotent: the agent's own task redoes what did not finish
            log.warning("spool of %s failed (%r); handing it to a task of its own", agent_id, exc)
            try:
                spool.apply_async(args=[agent_id, list(message_ids)])
                handed_over += 1
            except Exception as publish:
                log.error("could not hand over the spool of %s (%r); the sweeper will spool it", agent_id, publish)
    return {"outcome": "spooled", "agents": len(batches), "written": written, "handed_over": handed_over}


@shared_task(bind=True, base=VcmTask, name=SWEEP)
def sweep(self: VcmTask) -> dict[str, Any]:
    """First look of the sweeper; the second runs ``sweep_grace_s`` later (see vcm.tasks.maintenance)."""
    deps = runtime.deps()
    observed = maintenance.observe(deps)
    sweep_confirm.apply_async(args=[observed], countdown=deps.settings.maintenance.sweep_grace_s)
    return {"outcome": "observed", "agents": len(observed)}


@shared_task(bind=True, base=VcmTask, name=SWEEP_CONFIRM)
def sweep_confirm(self: VcmTask, observed: dict[str, int]) -> dict[str, Any]:
    """The second look: this is the sweep's run (recorded as job ``sweep``)."""
    before = {a: int(b) for a, b in observed.items()}
    return maintenance.run(
        runtime.deps(), MaintenanceJob.SWEEP, lambda deps: maintenance.redrive(deps, before).as_dict()
    )


# The other jobs: one task each, running the job function the run-now paths run too.
@shared_task(bind=True, base=VcmTask, name=EXPIRE)
def expire_recall(self: VcmTask) -> dict[str, Any]:
    return maintenance.run(runtime.deps(), MaintenanceJob.EXPIRE)


@shared_task(bind=True, base=VcmTask, name=SNAPSHOT)
def snapshot_agents(self: VcmTask) -> dict[str, Any]:
    """A periodic snapshot of every agent."""
    return maintenance.run(runtime.deps(), MaintenanceJob.SNAPSHOT)


@shared_task(bind=True, base=VcmTask, name=CONSOLIDATE)
def consolidate_facts(self: VcmTask) -> dict[str, Any]:
    """Shadow facts of every agent through the replay test (SHADOW -> ACTIVE, seed 002 §8)."""
    return maintenance.run(runtime.deps(), MaintenanceJob.CONSOLIDATE)


@shared_task(bind=True, base=VcmTask, name=DEAD_LETTER)
def record_dead_letter(
    self: VcmTask, agent_id: str, batch_id: int, reason: str, attempts: int, delivery: str
) -> dict[str, Any]:
    """The dead letter of an eviction whose process died on its last attempt: the parent worker
    process that saw it die does not open the store, so it sends this instead."""
    try:
        evict.dead_letter(runtime.deps(), agent_id, batch_id, reason=reason, attempts=attempts, delivery=delivery)
    except Exception as exc:
        return dict(self.retry_or_give_up(exc, agent_id, batch_id, reason, attempts, delivery))
    return {"outcome": "recorded", "agent_id": agent_id, "batch_id": batch_id}


# New vectors per task run: a few minutes of CPU, well inside the task time limit; the task
# sends itself again for the rest, so a long conversation never runs into the limit.
REEMBED_PER_RUN = 2000


@shared_task(bind=True, base=VcmTask, name=REEMBED)
def reembed_messages(self: VcmTask, agent_id: str, after_seq: int = -1) -> dict[str, Any]:
    """Embed the agent's stored messages that lack a vector of this worker's version (after a
    model change, or embeddings that failed). Resumable: a retry skips what is embedded."""
    deps = runtime.deps()
    if deps.vectorizer is None:
        return {"outcome": "skipped", "agent_id": agent_id, "reason": "[recall] vectors is off"}
    try:
        outcome = reembed.reembed_agent(
            deps.store,
            agent_id,
            deps.vectorizer,
            page=min(200, REEMBED_PER_RUN),
            after_seq=after_seq,
            max_embedded=REEMBED_PER_RUN,
            clock=deps.clock,
        )
    except Exception as exc:
        return dict(self.retry_or_give_up(exc, agent_id, after_seq))
    if not outcome.done:
        self.apply_async(args=[agent_id, outcome.next_after_seq])
    return outcome.as_dict()


class IngestTask(VcmTask):
    def give_up(self, reason: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        request = IngestRequest(**kwargs)
        deps = runtime.deps()
        ingest_job.give_up(deps.hot, request, reason, clock=deps.clock)
        log.error("ingestion job %s of %s dead-lettered: %s", request.job_id, request.agent_id, reason)
        return {"outcome": "dead_lettered", "job_id": request.job_id, "agent_id": request.agent_id, "reason": reason}


@shared_task(bind=True, base=IngestTask, name=INGEST)
def ingest_archival(self: IngestTask, **request: Any) -> dict[str, Any]:
    """One archival document (keyword arguments of :class:`vcm.types.IngestRequest`): chunk,
    embed, store, and move its job on for whoever polls it."""
    deps = runtime.deps()
    req = IngestRequest(**request)
    try:
        outcome = ingest_job.run_ingest_job(deps.hot, deps.store, runtime.ingester(deps), req, clock=deps.clock)
    except Exception as exc:  # chunks are keyed by document and version: a retry rewrites nothing
        return dict(self.retry_or_give_up(exc, **request))
    return outcome.as_dict()
