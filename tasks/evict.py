"""Step 2 of the eviction protocol (docs/architecture.md §5): commit a begun batch, then finish it.

Order of work, each step safe to repeat:

1. Read the batch from Redis, between two reads of the agent's incarnation (:mod:`vcm.tasks.fence`).
   Gone means an earlier delivery finished it: nothing to do; a changed incarnation means the
   agent was re-created meanwhile: the batch read is the new agent's, its own job commits it.
   Every store write below carries the incarnation, and one that finds the agent deleted or
   re-created writes nothing: the job ends ``fenced``.
2. Batches of one agent commit in sequence: if an older batch is still pending, defer. The job
   that finishes the older batch dispatches the next pending one, and the sweeper re-drives
   anything left behind, so a deferred batch is never forgotten.
3. Read the previous summary from the store; its ``rev`` is the expected rev of the commit. If
   the store already holds this batch (an earlier delivery committed it and died before
   finishing), skip to step 6 with the store's summary.
4. Summarise and score drift (re-summarising below the threshold) before any transaction; the
   batch's fact candidates are extracted first, their vectors embedded on a thread meanwhile, and
   written through the façade once the summary is drafted.
5. ``commit_eviction``: recall append + summary replace + ``evict`` event, atomic and replay-safe.
6. ``finish_eviction`` in Redis (idempotent by batch id), then dispatch the next pending batch.

A failure anywhere leaves the batch in Redis and the store unchanged or fully committed; the
caller retries with backoff and, when retries run out, calls :func:`dead_letter`.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vcm import poisoning
from vcm.durable import append_event, append_records, stored_message
from vcm.errors import AgentFenced, NotFound, VcmError
from vcm.hotpath.budget import Budget
from vcm.obs import audit, footprint, metrics
from vcm.service import QUERY_VECTORS, MemoryService
from vcm.store.audit_names import EventKind, audit_id
from vcm.store.types import EvictionCommit, MemoryEvent
from vcm.tasks.deps import Deps
from vcm.tasks.facts import extraction as fact_extraction
from vcm.tasks.fence import fenced, incarnation_of, note_fenced, read_fenced
from vcm.tasks.spool import backfill_vectors
from vcm.tasks.summary import drift
from vcm.tasks.summary.memo import JobVectors
from vcm.tasks.summary.request import Draft, Params, Request, Turn
from vcm.tasks.summary.units import Scan
from vcm.types import Message

log = logging.getLogger(__name__)

ACTOR = audit.worker("evict_batch")
Outcome = Literal["committed", "replayed", "absent", "deferred", "dead_lettered", "fenced"]


@dataclass(frozen=True)
class EvictOutcome:
    outcome: Outcome
    agent_id: str
    batch_id: int
    next_batch: int | None = None  # dispatched after finishing
    waiting_for: int | None = None  # the older batch a deferred one waits for
    drift: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def evict_batch(deps: Deps, agent_id: str, batch_id: int) -> EvictOutcome:
    try:
        read = read_fenced(deps.hot, agent_id, lambda: deps.hot.read_batch(agent_id, batch_id))
    except NotFound:
        return EvictOutcome("absent", agent_id, batch_id)
    if read is None:  # re-created while the batch was read: the new agent's own job handles it
        note_fenced("evict", agent_id, f"batch {batch_id}")
        return EvictOutcome("fenced", agent_id, batch_id)
    incarnation, messages = read
    # Every store write of the job checks the incarnation in its own transaction.
    deps = dataclasses.replace(deps, store=fenced(deps.store, incarnation))
    try:
        return _evict(deps, agent_id, batch_id, messages)
    except AgentFenced:  # deleted (or re-created) meanwhile: nothing of this job lands
        note_fenced("evict", agent_id, f"batch {batch_id}")
        return EvictOutcome("fenced", agent_id, batch_id)


def _evict(deps: Deps, agent_id: str, batch_id: int, messages: list[Message]) -> EvictOutcome:
    hot, store, faults = deps.hot, deps.store, deps.faults
    pending = hot.pending_batches(agent_id)
    if pending and pending[0] < batch_id:
        return EvictOutcome("deferred", agent_id, batch_id, waiting_for=pending[0])
    with faults.scope(agent_id):
        previous = store.get_summary(agent_id)
        if previous is not None and previous.batch_id >= batch_id:
            return _finish(deps, agent_id, batch_id, previous.text, "replayed")
        if messages and hot.summary_skipped(agent_id, batch_id, messages[0].id):  # evict_fifo(summarize=false)
            deps = dataclasses.replace(deps, summarizer=keep_summary)
        faults.point("evict.before_summarize")
        # One scanner for the job: the summary and the fact extraction scan the same sentences.
        scan = _scanner(deps.settings.poisoning)
        facts = _BatchFacts(deps, agent_id, messages, scan) if deps.settings.facts.extract_on_eviction else None
        try:
            check = summarize(deps, agent_id, previous.text if previous is not None else "", messages, scan=scan)
            draft = check.draft
            faults.point("evict.after_summarize")
            _record_drift(deps, agent_id, batch_id, check)
        finally:
            if facts is not None:
                facts.join()  # never left writing facts into the retry of a job that failed
        if facts is not None:
            facts.result()  # its failure (a fenced agent, the store) fails the job, before the commit
        # Keyed messages the spool has not reached yet leave Redis with this batch: their
        # records go to the store first (a record without its message is the lesser fault: a
        # retry replays rather than duplicates, and the batch commits on its own retries).
        store.put_idempotency(append_records(hot, agent_id, messages))
        result = store.commit_eviction(
            EvictionCommit(
                agent_id=agent_id,
                batch_id=batch_id,
                messages=[stored_message(agent_id, m, ttl_s=deps.settings.maintenance.recall_ttl_s) for m in messages],
                summary_text=draft.text,
                summary_tokens=draft.tokens,
                expected_summary_rev=previous.rev if previous is not None else None,
                event={
                    "summary_tokens": draft.tokens,
                    "summary_lines": draft.lines,
                    "method": draft.method,
                    "drift": round(draft.score, 4),
                    "retention": round(draft.retention, 4),
                    "lost_units": draft.salient - draft.retained,
                    "flagged_sentences": draft.flagged,
                    "resummarized": check.retried,
                    "footprint": footprint.eviction_committed(
                        [m.tokens for m in messages],
                        summary_rev_before=previous.rev if previous is not None else None,
                        summary_tokens_after=draft.tokens,
                        summary_chars=len(draft.text),
                    ),
                },
                actor=ACTOR,
                # Messages the spool has not stored yet get their append rows here (same ids), and
                # the batch its flush row if whoever began it died before writing it (same id).
                events=[
                    *(append_event(agent_id, m) for m in messages),
                    audit.flush_event(
                        agent_id,
                        batch_id,
                        messages=len(messages),
                        tokens=sum(m.tokens for m in messages),
                        total_after=None,
                        actor=ACTOR,
                        created_at=deps.clock(),
                    ),
                ],
            )
        )
        text = draft.text
        if result.replayed:  # a concurrent delivery committed it first: finish with its summary
            stored = store.get_summary(agent_id)
            text = stored.text if stored is not None else text
        else:  # counted with the commit, so a retried or replayed delivery adds nothing
            metrics.eviction_committed(len(messages))
            metrics.drift(check.first_score, check.retry_score)
        faults.point("evict.after_commit")
        outcome = _finish(deps, agent_id, batch_id, text, "replayed" if result.replayed else "committed", draft.score)
        hot.summary_done(agent_id, batch_id)
    _backfill(deps, agent_id, messages)
    return outcome


class _BatchFacts:
    """The batch's shadow facts, extracted and remembered in a thread of the job's own while the
    job summarises (see :meth:`_run`), started in the job's context (its fault scope)."""

    def __init__(self, deps: Deps, agent_id: str, messages: Sequence[Message], scan: Scan) -> None:
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        args = (deps, agent_id, list(messages), scan)
        self._thread = threading.Thread(
            target=context.run, args=(self._run, *args), name="vcm-batch-facts", daemon=True
        )
        self._thread.start()

    def _run(self, deps: Deps, agent_id: str, messages: Sequence[Message], scan: Scan) -> None:
        """Candidates from the batch, their vectors in one model call per :data:`QUERY_VECTORS`,
        then each written through the façade (guard, dedup: a retried batch matches what its
        first attempt stored); a refused or invalid candidate is logged: facts are an index of
        the batch, the batch itself goes to recall regardless.

        Why a thread: extraction and the writes were on the job's path, before and after the
        summary; beside it they fill the summary's waits on the model (whose runs release the
        GIL). bench_evict, alternated with the job before: p50 286-293 -> 268 ms at a 2k window,
        497-505 -> 446-464 ms at 8k; at 128k no change (1 059-1 113 against 1 057-1 065 ms),
        where both threads' Python is most of the job and they take turns at the GIL."""
        try:
            service = MemoryService(deps.hot, deps.store, deps.dispatcher, embed=deps.embed, clock=deps.clock)
            extract = deps.extractor or fact_extraction.extract
            candidates = list(extract(messages, scan))
            for i, c in enumerate(candidates):
                if i % QUERY_VECTORS == 0:
                    _embed_ahead(service, candidates[i : i + QUERY_VECTORS])
                try:
                    service.remember(
                        agent_id,
                        c.value,
                        type=c.type,
                        key=c.key,
                        tags=c.aliases,
                        importance=c.importance,
                        confidence=0.5,
                        evidence=c.evidence(),
                        status="shadow",
                        actor=ACTOR,
                    )
                except AgentFenced:
                    raise
                except VcmError as exc:  # a refused or invalid candidate: the others still count
                    log.info("fact candidate of %s not kept: %s", agent_id, exc.code)
        except BaseException as exc:  # the job raises it (result)
            self._error = exc

    def join(self) -> None:
        self._thread.join()

    def result(self) -> None:
        """After :meth:`join`: the thread's failure raised here, in the job's thread."""
        if self._error is not None:
            raise self._error


def _embed_ahead(service: MemoryService, candidates: Sequence[fact_extraction.Candidate]) -> None:
    """The vectors ``remember`` will ask for, one model call for the lot: a batch's ~40 facts
    embedded one call each cost an 8k eviction job ~50 ms more (bench_evict). An entity is not
    embedded (its key dedups it). A failure is left to ``remember``, which meets it again and
    writes the fact without a vector, as it does."""
    if service.core.embed is None:
        return
    texts = [c.value.strip() for c in candidates if c.type != "entity" and c.value.strip()]
    try:
        service.core.vectors_of(texts)
    except Exception as exc:  # see above
        log.debug("fact vectors not embedded ahead: %r", exc)


def _backfill(deps: Deps, agent_id: str, messages: Sequence[Message]) -> None:
    """Vectors for batch messages the spool did not embed, after the finish so the summary lands
    first. Vectors are an index: a failure here is logged, never fails a committed eviction (text
    recall still finds the messages)."""
    if deps.vectorizer is None:
        return
    try:
        filled = backfill_vectors(deps.hot, deps.store, agent_id, messages, deps.vectorizer)
    except Exception:  # any failure of the model or the store: the eviction itself is done
        log.warning("could not embed batch messages of %s for vector recall", agent_id, exc_info=True)
        return
    if filled:
        log.info("embedded %d batch messages of %s the spool had not reached", filled, agent_id)


def summarize(
    deps: Deps, agent_id: str, previous: str, messages: Sequence[Message], *, scan: Scan | None = None
) -> drift.DriftCheck[Draft]:
    """``messages`` folded into the summary ``previous`` within the agent's summary cap,
    re-summarised once if it drifted (evictions; a forget's replay, :mod:`vcm.workers.summaries`)."""
    settings = deps.settings
    cap = Budget.for_window(deps.hot.agent(agent_id).window, settings.budget).summary_cap
    request = Request(
        previous=previous,
        turns=[t for t in (Turn.of(m, settings.context.user_name or None) for m in messages) if t is not None],
        cap=cap,
        count=lambda text: deps.hot.summary_tokens(agent_id, text),
        embed=JobVectors(deps.embed, deps.recent_vectors),
        scan=scan or _scanner(settings.poisoning),
    )
    params = Params.of(settings.summarizer)
    return drift.check(
        lambda: deps.summarizer(request, params),
        lambda: deps.summarizer(request, params.stronger(settings.drift)),
        settings.drift.threshold,
        params.retention_threshold,
    )


def keep_summary(request: Request, params: Params) -> Draft:
    """The summarizer of a batch begun with ``summarize=false``: the summary as it stands, nothing
    folded in (so nothing drifts); the batch still goes to recall whole."""
    text = request.previous
    return Draft(text, request.count(text) if text else 0, 1.0, "skipped", len(text.splitlines()))


def _scanner(settings: poisoning.PoisoningSettings) -> Scan:
    """The agent's poisoning patterns over summary inputs: the names of those a text matches,
    each text scanned once (a job scans ~15 000 sentences and clauses at a 128k window, and the
    summary and the fact extraction see the same sentences)."""
    taint = poisoning.Filter.of(settings)
    seen: dict[str, tuple[str, ...]] = {}

    def scan(text: str) -> tuple[str, ...]:
        found = seen.get(text)
        if found is None:
            found = seen[text] = taint.scan(text).reasons
        return found

    return scan


def _record_drift(deps: Deps, agent_id: str, batch_id: int, check: drift.DriftCheck[Draft]) -> None:
    """Logged before the commit with ids derived from the batch, so a retry adds no second row.
    Besides the cosine, the loss score: how many of the batch's salient units the kept draft
    retained and lost (counts, never their text), and how many sentences the filter flagged."""
    if not check.retried:
        return
    kept = check.draft
    payload = {
        "batch_id": batch_id,
        "first_score": round(check.first_score, 4),
        "retry_score": round(check.retry_score or 0.0, 4),
        "kept_score": round(kept.score, 4),
        "threshold": deps.settings.drift.threshold,
        "first_retention": round(check.first_retention, 4),
        "retry_retention": round(check.retry_retention if check.retry_retention is not None else 1.0, 4),
        "kept_retention": round(kept.retention, 4),
        "retention_threshold": Params.of(deps.settings.summarizer).retention_threshold,
        "salient_units": kept.salient,
        "retained_units": kept.retained,
        "lost_units": kept.salient - kept.retained,
        "flagged_sentences": kept.flagged,
    }
    deps.store.append_event(
        MemoryEvent(
            agent_id, EventKind.SUMMARIZE, payload, event_id=audit_id(agent_id, "summarize", batch_id), actor=ACTOR
        )
    )
    if check.alarm:
        log.warning("summary drift stays below threshold for %s batch %s: %s", agent_id, batch_id, payload)
        deps.store.append_event(
            MemoryEvent(
                agent_id,
                EventKind.DRIFT_ALARM,
                payload,
                event_id=audit_id(agent_id, "drift_alarm", batch_id),
                actor=ACTOR,
            )
        )


def _finish(
    deps: Deps, agent_id: str, batch_id: int, text: str, outcome: Outcome, score: float | None = None
) -> EvictOutcome:
    try:
        finished = deps.hot.finish_eviction(agent_id, batch_id, text, incarnation=incarnation_of(deps.store))
    except NotFound:  # the agent (or the batch) is gone from Redis: nothing left to install
        return EvictOutcome("absent", agent_id, batch_id)
    if finished.pressure_message_id:  # the new summary crossed warning: that notice is recall too
        deps.dispatcher.spool(agent_id, [finished.pressure_message_id])
    if not finished.replayed:
        if finished.pressure_message_id:
            metrics.warning()
        if finished.batch is not None:
            metrics.flush("threshold")
    if finished.batch is not None:  # the new summary pushed past flush and began the next batch
        deps.store.append_event(
            audit.flush_event(
                agent_id,
                finished.batch.id,
                messages=finished.batch.count,
                tokens=finished.batch.tokens,
                total_after=finished.total,
                actor=ACTOR,
                created_at=deps.clock(),
            )
        )
    # The head of the pending batches, if any, was deferred while this one ran (or was just begun
    # by the new summary pushing past flush): it is its turn now.
    pending = deps.hot.pending_batches(agent_id)
    following = pending[0] if pending else None
    if following is not None:
        deps.dispatcher.evict(agent_id, following)
    return EvictOutcome(outcome, agent_id, batch_id, next_batch=following, drift=score)


def dead_letter(deps: Deps, agent_id: str, batch_id: int, *, reason: str, attempts: int, delivery: str) -> EvictOutcome:
    """Give up on this delivery: record why. The batch stays in Redis for the sweeper/operator."""
    deps.store.append_event(
        MemoryEvent(
            agent_id,
            EventKind.DEAD_LETTER,
            {"task": "evict_batch", "batch_id": batch_id, "reason": reason[:2000], "attempts": attempts},
            event_id=audit_id(agent_id, "dead_letter", batch_id, delivery),
            actor=ACTOR,
        )
    )
    log.error("eviction batch %s of %s dead-lettered after %s attempts: %s", batch_id, agent_id, attempts, reason)
    return EvictOutcome("dead_lettered", agent_id, batch_id)
