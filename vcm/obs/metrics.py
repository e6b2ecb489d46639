"""Every Prometheus family vcm records, defined once (prefix ``vcm_``; base units: seconds, tokens,
ratios 0..1; counters get ``_total`` from prometheus-client), and the helpers that record them.

Who records what (the table with meanings is in docs/operations.md):

* the hot path: token gauges and occupancy (:class:`~vcm.service.MemoryService` ``append`` /
  ``context``), memory-pressure warnings and flushes, heartbeat chains
  (:class:`~vcm.tools.chains.HeartbeatGovernor`), dispatch failures;
* the store wrapper :class:`~vcm.obs.metered_store.MeteredStore`: search latency, hits, archival
  page depth and post-filter drop ratio, store errors by operation and code;
* the cold path (``vcm.tasks.evict``): committed evictions, drift scores, re-summarisations; the worker
  signals (``vcm.workers.metrics``): dead letters, sweeper re-drives;
* at scrape time, :mod:`vcm.obs.metrics_state`: eviction batches pending and vector index state,
  read from Redis and the store, because they are shared state, not events of one process.

Recording does no I/O (prometheus-client keeps values in memory, or in mmapped files under
``PROMETHEUS_MULTIPROC_DIR``) and never raises into the caller: a metric must not fail the
operation it describes. Multi-process: with ``PROMETHEUS_MULTIPROC_DIR`` set before this module
is imported, every process writes its own file and :func:`registry` sums them; each gauge below
says which ``multiprocess_mode`` it needs and why.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import ParamSpec

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import multiprocess as prom_multiprocess
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from vcm.types import Gauges

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_RATIO_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
_SEARCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_HIT_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)

# --- main context (hot path) ---------------------------------------------------------------------
PARTS = ("system", "working", "summary", "placeholders", "fifo", "free")
# mostrecent: an agent's parts are state, last written by whichever process served its latest
# append or context read; summing processes would count one agent once per process.
FACT_DECISIONS = Counter(
    "vcm_fact_decisions_total",
    "Fact writes by dedup decision (MATCH, NEW, CONFLICT) and consolidation promotions (PROMOTED)",
    ["decision"],
)
GUARD_REFUSALS = Counter(
    "vcm_guard_refusals_total", "Memory writes the policy guard refused (secrets, PII, poisoning)", ["op"]
)
CONTEXT_TOKENS = Gauge(
    "vcm_context_tokens",
    "Tokens of one agent's main context by part (free = max minus the rest), as of its latest append or read",
    ["agent", "part"],
    multiprocess_mode="mostrecent",
)
OCCUPANCY = Histogram(
    "vcm_context_occupancy_ratio",
    "Occupancy (main context tokens / window) after each append, all agents",
    buckets=_RATIO_BUCKETS,
)
WARNINGS = Counter("vcm_memory_pressure_warnings", "Appends that crossed the warning threshold upward")
FLUSHES = Counter(
    "vcm_flushes",
    "Eviction batches begun: trigger=threshold (an append or block crossed flush), request (evict_fifo / API)",
    ["trigger"],
)

# --- eviction (cold path) ------------------------------------------------------------------------
APPENDED = Counter("vcm_appended_messages", "Messages appended to a main context (a replayed retry is not counted)")
EVICTED_MESSAGES = Counter("vcm_evicted_messages", "Messages moved to recall by committed eviction batches")
EVICTED_BATCHES = Counter("vcm_eviction_batches_committed", "Eviction batches committed to the store and finished")
DRIFT = Histogram(
    "vcm_summary_drift_score",
    "Cosine similarity of each summary draft to what it summarises (attempt=first|retry)",
    ["attempt"],
    buckets=(0.0, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0),
)
RESUMMARIZATIONS = Counter("vcm_resummarizations", "Summaries re-drafted because the first drifted below the threshold")

# --- worker outcomes (recorded by vcm.workers.metrics / vcm.workers.signals / vcm.workers.dispatch) ----------
DEAD_LETTERS = Counter(
    "vcm_dead_letters", "Task runs given up after their retries or delivery cap (batches stay in Redis)", ["task"]
)
REDRIVEN = Counter("vcm_sweeper_redriven_batches", "Eviction batches the sweeper dispatched again")
RESPOOLED = Counter("vcm_sweeper_respooled_messages", "Messages the sweeper spooled that the write-behind missed")
MAINTENANCE_RUNS = Counter(
    "vcm_maintenance_runs", "Runs of a periodic maintenance job (beat, or run now)", ["job", "trigger"]
)
EXPIRED = Counter(
    "vcm_expired",
    "Records the retention sweep removed (messages, snapshots, state) or marked expired (facts)",
    ["kind"],
)
DISPATCH_FAILURES = Counter(
    "vcm_dispatch_failures", "Hot-path dispatches the broker refused (the sweeper catches up)", ["kind"]
)
FENCED = Counter(
    "vcm_fenced_jobs",
    "Cold-path jobs that wrote nothing: their agent was deleted (or re-created) since they began",
    ["task"],
)
# Write-behind's loss window held by writing through (vcm.service.writebehind): reason size or age (an
# append found the agent's backlog past a bound) or idle (no append came; the API's own check).
WRITE_BEHIND_FORCED = Counter(
    "vcm_write_behind_forced",
    "Times the API wrote an agent's write-behind backlog to the store itself, past a bound",
    ["reason"],
)
WRITE_BEHIND_FORCED_MESSAGES = Counter(
    "vcm_write_behind_forced_messages", "Messages the API wrote to the store itself, past a write-behind bound"
)

# --- heartbeat chains ----------------------------------------------------------------------------
HEARTBEAT_DEPTH = Histogram(
    "vcm_heartbeat_chain_depth",
    "Heartbeats run by each chain that ended",
    buckets=(0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 32),
)
CHAIN_DURATION = Histogram(
    "vcm_heartbeat_chain_duration_seconds",
    "Duration of each chain that ended, from its first heartbeat",
    buckets=(0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0),
)
CHAIN_ENDS = Counter(
    "vcm_heartbeat_chain_ends",
    "Heartbeat chain ends and refusals by reason (depth, duration, tokens, explicit_yield, rate_limited)",
    ["reason"],
)
RATE_LIMITED = Counter("vcm_heartbeat_rate_limited", "Heartbeat requests refused by the rate limit or cooldown")

# --- searches and the store ----------------------------------------------------------------------
RECALL_SECONDS = Histogram(
    "vcm_recall_search_duration_seconds", "Recall search latency in the store", ["mode"], buckets=_SEARCH_BUCKETS
)
RECALL_HITS = Histogram("vcm_recall_search_hits", "Hits per recall search page", ["mode"], buckets=_HIT_BUCKETS)
ARCHIVAL_SECONDS = Histogram(
    "vcm_archival_search_duration_seconds", "Archival vector search latency in the store", buckets=_SEARCH_BUCKETS
)
ARCHIVAL_HITS = Histogram("vcm_archival_search_hits", "Hits per archival search page", buckets=_HIT_BUCKETS)
ARCHIVAL_PAGE = Histogram(
    "vcm_archival_search_page",
    "Page number of each archival search (1 = first page; deeper pages came through a cursor)",
    buckets=(1, 2, 3, 4, 5, 10, 20, 50, 100),
)
FILTER_DROP = Histogram(
    "vcm_archival_filter_drop_ratio",
    "Share of vector candidates the metadata post-filters dropped, per ranked archival search",
    buckets=(0.0, *_RATIO_BUCKETS),
)
# nProbe a caller chose (search_archival's nProbe); searches left on the index's default are counted
# apart, since the adapters pick that value per index.
ARCHIVAL_NPROBE = Histogram(
    "vcm_archival_search_nprobe",
    "nProbe asked of the vector index per archival search (those on the index default: _nprobe_default)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
)
ARCHIVAL_NPROBE_DEFAULT = Counter(
    "vcm_archival_search_nprobe_default", "Archival searches left on the vector index's default nProbe"
)
RECALL_SEARCHES = Counter(
    "vcm_recall_searches",
    "Recall search pages by mode and outcome (hit: at least one result, miss: none); hit rate = hit / all",
    ["mode", "outcome"],
)
RECALL_PARTIAL = Counter(
    "vcm_recall_partial_searches",
    "Recall searches whose vector half left out unindexed vectors past the tail bound (the message index "
    "was still being built or caught up off the query path)",
    ["mode"],
)
RECALL_UNINDEXED = Histogram(
    "vcm_recall_unindexed_vectors",
    "Unindexed message vectors a partial recall search left out (an upper bound)",
    buckets=(1e3, 1e4, 1e5, 1e6, 1e7),
)
COMPLIANCE = Counter(
    "vcm_compliance_violations",
    "Late-chunking violations of archival ingestion (the zero-propagation alarm) by rule and outcome "
    "(blocked; allowed: [ingest] allow_naive)",
    ["rule", "outcome"],
)
STORE_ERRORS = Counter(
    "vcm_store_errors", "Store calls that raised, by operation and error code", ["operation", "code"]
)

# --- client instances: change feed, syncs, conflicts (vcm.service.replicas) -------------------------
CHANGES_PUBLISHED = Counter(
    "vcm_changes_published", "Changes of blocks, state and facts published to agents' change feeds", ["kind"]
)
CHANGE_FEED_FAILURES = Counter(
    "vcm_change_feed_failures", "Changes that could not be published (Redis refused): caches learn at their next sync"
)
SYNCS = Counter(
    "vcm_syncs",
    "Syncs client instances reported (sync runs and write-through pushes), by outcome (ok, failed)",
    ["outcome"],
)
SYNC_CONFLICTS = Counter(
    "vcm_sync_conflicts",
    "Conflicts client instances found (a change based on a stale version), by strategy and resolution",
    ["strategy", "resolution"],
)
SYNC_SECONDS = Histogram(
    "vcm_sync_duration_seconds",
    "Duration of client instances' latest sync, observed once per status report that follows a sync",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
CLIENT_CACHE = Counter(
    "vcm_client_cache_lookups", "Lookups in client instances' local caches, as they report them (hit, miss)", ["result"]
)
SNAPSHOTS = Counter("vcm_snapshots", "Agent snapshots by outcome (taken, failed)", ["outcome"])

for _kind in ("evict", "spool"):
    DISPATCH_FAILURES.labels(kind=_kind)
for _task in ("evict", "spool", "ingest", "reembed"):
    FENCED.labels(task=_task)
for _reason in ("size", "age", "idle"):
    WRITE_BEHIND_FORCED.labels(reason=_reason)
for _trigger in ("threshold", "request"):
    FLUSHES.labels(trigger=_trigger)
for _mode in ("text", "vector", "hybrid"):
    RECALL_SECONDS.labels(mode=_mode)
    RECALL_HITS.labels(mode=_mode)
for _reason in ("depth", "duration", "tokens", "explicit_yield", "rate_limited"):
    CHAIN_ENDS.labels(reason=_reason)
for _attempt in ("first", "retry"):
    DRIFT.labels(attempt=_attempt)

for _outcome in ("ok", "failed"):
    SYNCS.labels(outcome=_outcome)
for _result in ("hit", "miss"):
    CLIENT_CACHE.labels(result=_result)
for _outcome in ("taken", "failed"):
    SNAPSHOTS.labels(outcome=_outcome)

P = ParamSpec("P")


def _never_raises(fn: Callable[P, None]) -> Callable[P, None]:
    @functools.wraps(fn)
    def record(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:  # a metric must never fail the operation it describes
            log.warning("could not record metric in %s", fn.__name__, exc_info=True)

    return record


# --- recording -----------------------------------------------------------------------------------
# An agent's six children of CONTEXT_TOKENS, least recently updated first. prometheus-client keeps
# every child until it is removed, so this is also what bounds the per-agent series.
_agent_children: OrderedDict[str, tuple[Gauge, ...]] = OrderedDict()
_agent_lock = threading.Lock()


@_never_raises
def context(agent_id: str, gauges: Gauges, *, per_agent: bool, max_agents: int = 1000) -> None:
    """An agent's main context as the hot path just saw it. Per-agent series exist for at most
    ``max_agents`` agents; the one updated longest ago gives its series up first."""
    if gauges.window > 0:
        OCCUPANCY.observe(gauges.occupancy)
    if not per_agent or max_agents <= 0:
        return
    with _agent_lock:
        children = _agent_children.get(agent_id)
        if children is None:  # labels() takes a lock and builds keys: once per agent, not per append
            children = _agent_children[agent_id] = tuple(CONTEXT_TOKENS.labels(agent=agent_id, part=p) for p in PARTS)
            while len(_agent_children) > max_agents:
                dropped, _ = _agent_children.popitem(last=False)
                for part in PARTS:
                    with contextlib.suppress(KeyError):
                        CONTEXT_TOKENS.remove(dropped, part)
        else:
            _agent_children.move_to_end(agent_id)
    values = (gauges.system, gauges.working, gauges.summary, gauges.placeholders, gauges.fifo, gauges.free)
    for child, value in zip(children, values, strict=True):
        child.set(value)


@_never_raises
def fact_decision(decision: str) -> None:
    FACT_DECISIONS.labels(decision=decision).inc()


@_never_raises
def guard_refused(op: str) -> None:
    GUARD_REFUSALS.labels(op=op).inc()


@_never_raises
def forget_agent(agent_id: str) -> None:
    """Drop a deleted agent's series (no metric label of it may remain)."""
    with _agent_lock:
        _agent_children.pop(agent_id, None)
        for part in PARTS:
            with contextlib.suppress(KeyError):
                CONTEXT_TOKENS.remove(agent_id, part)


@_never_raises
def warning() -> None:
    WARNINGS.inc()


@_never_raises
def flush(trigger: str) -> None:
    FLUSHES.labels(trigger=trigger).inc()


@_never_raises
def fenced(task: str) -> None:
    FENCED.labels(task=task).inc()


@_never_raises
def appended(messages: int) -> None:
    APPENDED.inc(messages)


@_never_raises
def eviction_committed(messages: int) -> None:
    EVICTED_BATCHES.inc()
    EVICTED_MESSAGES.inc(messages)


@_never_raises
def drift(first_score: float, retry_score: float | None) -> None:
    DRIFT.labels(attempt="first").observe(first_score)
    if retry_score is not None:
        DRIFT.labels(attempt="retry").observe(retry_score)
        RESUMMARIZATIONS.inc()


@_never_raises
def chain_end(reason: str, depth: int, duration_s: float, *, chain: bool) -> None:
    """A heartbeat chain ended (``chain``) or a request was refused before one started."""
    CHAIN_ENDS.labels(reason=reason).inc()
    if reason == "rate_limited":
        RATE_LIMITED.inc()
    if chain:
        HEARTBEAT_DEPTH.observe(depth)
        CHAIN_DURATION.observe(duration_s)


@_never_raises
def recall_search(mode: str, seconds: float, hits: int) -> None:
    RECALL_SECONDS.labels(mode=mode).observe(seconds)
    RECALL_HITS.labels(mode=mode).observe(hits)
    RECALL_SEARCHES.labels(mode=mode, outcome="hit" if hits > 0 else "miss").inc()


@_never_raises
def recall_partial(mode: str, unindexed: int) -> None:
    RECALL_PARTIAL.labels(mode=mode).inc()
    RECALL_UNINDEXED.observe(unindexed)


@_never_raises
def archival_search(seconds: float, hits: int, offset: int | None, judged: int, dropped: int, k: int) -> None:
    """``offset``: items on earlier pages (None: the adapter did not say); ``judged``/``dropped``:
    candidates the post-filters saw and dropped (0/0 when it ranked nothing, e.g. a snapshot page)."""
    ARCHIVAL_SECONDS.observe(seconds)
    ARCHIVAL_HITS.observe(hits)
    if offset is not None and k > 0:
        ARCHIVAL_PAGE.observe(offset // k + 1)
    if judged > 0:
        FILTER_DROP.observe(dropped / judged)


@_never_raises
def archival_n_probe(n_probe: int | None) -> None:
    """The nProbe one archival search asked for (None: the index's default)."""
    if n_probe is None:
        ARCHIVAL_NPROBE_DEFAULT.inc()
    else:
        ARCHIVAL_NPROBE.observe(n_probe)


@_never_raises
def compliance_violation(rule: str, outcome: str) -> None:
    """A late-chunking violation: ``blocked``, or ``allowed`` by ``[ingest] allow_naive``."""
    COMPLIANCE.labels(rule=rule, outcome=outcome).inc()


@_never_raises
def store_error(operation: str, code: str) -> None:
    STORE_ERRORS.labels(operation=operation, code=code).inc()


@_never_raises
def change_published(kind: str) -> None:
    CHANGES_PUBLISHED.labels(kind=kind).inc()


@_never_raises
def change_feed_failed() -> None:
    CHANGE_FEED_FAILURES.inc()


@_never_raises
def sync_conflict(strategy: str, resolution: str) -> None:
    SYNC_CONFLICTS.labels(strategy=strategy, resolution=resolution).inc()


@_never_raises
def sync_reported(*, ok: int, failed: int, latency_s: float | None, hits: int, misses: int) -> None:
    """What an instance's status report says happened since its previous one."""
    if ok:
        SYNCS.labels(outcome="ok").inc(ok)
    if failed:
        SYNCS.labels(outcome="failed").inc(failed)
    if latency_s is not None:
        SYNC_SECONDS.observe(latency_s)
    if hits:
        CLIENT_CACHE.labels(result="hit").inc(hits)
    if misses:
        CLIENT_CACHE.labels(result="miss").inc(misses)


@_never_raises
def snapshot(outcome: str) -> None:
    SNAPSHOTS.labels(outcome=outcome).inc()


# --- exposition ----------------------------------------------------------------------------------
def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


class _ProcessCollector:
    """This process's default registry as one collector, so that it can share a registry with others."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def registry(*extra: Collector) -> CollectorRegistry:
    """What an endpoint serves: every process's samples summed from ``PROMETHEUS_MULTIPROC_DIR`` when
    it is set, else this process's; plus ``extra`` collectors (scrape-time state)."""
    # auto_describe off: collectors are not asked for their names up front, which would run the
    # scrape-time ones (Redis and store reads) once more at registration.
    out = CollectorRegistry(auto_describe=False)
    if multiprocess():
        prom_multiprocess.MultiProcessCollector(out)  # type: ignore[no-untyped-call]
    else:
        out.register(_ProcessCollector())
    for collector in extra:
        out.register(collector)
    return out


@_never_raises
def write_behind_forced(reason: str, messages: int) -> None:
    WRITE_BEHIND_FORCED.labels(reason=reason).inc()
    WRITE_BEHIND_FORCED_MESSAGES.inc(messages)
