"""``vcm report``: the Conveyance figure per agent and overall, from what the tiers hold now.

Reads only: the hot state (gauges, counters, pending batches), store counts and the agents'
``memory_events``; the arithmetic is :mod:`vcm.eval.conveyance`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from vcm.eval import conveyance
from vcm.eval.conveyance import Conveyance, Signals
from vcm.hotpath.budget import Budget
from vcm.hotpath.context import assemble
from vcm.service import MemoryService
from vcm.store.audit_names import EventKind
from vcm.store.types import MemoryEvent

NAIVE_CHUNKING_EVENT = EventKind.COMPLIANCE_VIOLATION
EVENT_KINDS = (
    EventKind.FLUSH,
    EventKind.EVICT,
    EventKind.HEARTBEAT_END,
    EventKind.TARGET_UNREACHABLE,
    NAIVE_CHUNKING_EVENT,
)
_PAGE = 1000


@dataclass(frozen=True)
class AgentReport:
    agent_id: str
    signals: Signals
    conveyance: Conveyance
    message_vectors: int = 0


@dataclass(frozen=True)
class Report:
    agents: list[AgentReport]
    overall: Conveyance
    overall_signals: Signals
    # Tier name -> why it could not be read (empty when every tier answered).
    unreachable: dict[str, str] = field(default_factory=dict)
    generated_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "generated_at": self.generated_at,
            "alpha": self.overall.alpha,
            "overall": _figure(self.overall, self.overall_signals),
            "unreachable": dict(self.unreachable),
            "agents": {
                a.agent_id: {**_figure(a.conveyance, a.signals), "message_vectors": a.message_vectors}
                for a in self.agents
            },
        }


def _figure(c: Conveyance, s: Signals) -> dict[str, Any]:
    f = c.factors
    return {
        "conveyance": round(c.value, 6),
        "zeroed_by": list(c.zeroed_by),
        "factors": {
            "W": round(f.w, 4),
            "R": round(f.r, 4),
            "H": round(f.h, 4),
            "T": round(f.t, 4),
            "Ctx": round(f.ctx, 4),
            "L": round(f.l, 4),
            "I": round(f.i, 4),
            "A": round(f.a, 4),
            "G": round(f.g, 4),
        },
        "signals": {
            "agents": s.agents,
            "appended": s.appended,
            "spooled": s.spooled,
            "evicted": s.evicted,
            "evictions_committed": len(s.drift_scores),
            "flushes": s.flushes,
            "heartbeat_chains": s.chains,
        },
    }


def _events(service: MemoryService, agent_id: str, since: float | None) -> Iterator[MemoryEvent]:
    cursor: str | None = None
    while True:
        page = service.store.query_events(agent_id, list(EVENT_KINDS), since=since, limit=_PAGE, cursor=cursor)
        yield from page.items
        cursor = page.next_cursor
        if not cursor or not page.items:
            return


def agent_signals(
    service: MemoryService, agent_id: str, *, now: float, since: float | None = None
) -> tuple[Signals, int]:
    """One agent's signals and its count of messages with a recall vector (reported, not a factor)."""
    service.hot.agent(agent_id)  # NotFound for an unknown agent, rather than a report of zeros
    snap = service.hot.snapshot(agent_id)
    gauges = assemble(snap).gauges
    budget = Budget.for_window(gauges.window, service.settings.budget)
    stats = service.store.stats(agent_id)

    flushed_at: dict[int, float] = {}
    committed_at: dict[int, float] = {}
    drift: list[float] = []
    chains = yielded = unreachable = 0
    naive = False
    for e in _events(service, agent_id, since):
        batch = e.payload.get("batch_id")
        if e.kind == EventKind.FLUSH and isinstance(batch, int):
            flushed_at[batch] = e.created_at
        elif e.kind == EventKind.EVICT and isinstance(batch, int):
            committed_at[batch] = e.created_at
            score = e.payload.get("drift")
            if isinstance(score, int | float):
                drift.append(float(score))
        elif e.kind == EventKind.HEARTBEAT_END:
            chains += 1
            yielded += e.payload.get("reason") in conveyance.AGENT_ENDINGS
        elif e.kind == EventKind.TARGET_UNREACHABLE:
            unreachable += 1
        elif e.kind == NAIVE_CHUNKING_EVENT:
            naive = True
    pending = set(service.hot.pending_batches(agent_id))
    lags: list[float] = []
    ages: list[float] = []
    for batch, start in flushed_at.items():
        if batch in committed_at:
            lags.append(max(0.0, committed_at[batch] - start))
        elif batch in pending:  # still waiting (or dead-lettered): its age so far
            ages.append(max(0.0, now - start))

    signals = Signals(
        appended=snap.counter("appended"),
        spooled=int(stats.get("messages", 0)),
        evicted=snap.counter("evicted"),
        provenance_edges=int(stats.get("recall_log_edges", 0)),
        drift_scores=tuple(drift),
        lags_s=tuple(lags),
        pending_ages_s=tuple(ages),
        chains=chains,
        chains_yielded=yielded,
        flushes=len(flushed_at),
        flushes_unreachable=unreachable,
        fifo_tokens=gauges.fifo,
        summary_tokens=gauges.summary,
        placeholder_tokens=gauges.placeholders,
        pinned_tokens=gauges.pinned,
        pinned_cap_tokens=budget.pinned_cap,
        free_tokens=max(0, gauges.max_tokens - gauges.total),
        headroom_tokens=max(0, gauges.max_tokens - budget.target),
        naive_chunks=naive,
    )
    return signals, int(stats.get("message_vectors", 0))


def unreachable_tiers(service: MemoryService) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        service.hot.redis.ping()
    except Exception as exc:  # any failure to answer means the tier is out
        out["hot state (Redis)"] = f"{type(exc).__name__}: {exc}"
    try:
        health = service.store.health()
        if not health.ok:
            out[f"store ({health.backend})"] = str(dict(health.details))
    except Exception as exc:
        out["store"] = f"{type(exc).__name__}: {exc}"
    return out


def build_report(
    service: MemoryService,
    agent_ids: Sequence[str] | None = None,
    *,
    since: float | None = None,
    now: float | None = None,
) -> Report:
    now = time.time() if now is None else now
    naive_configured = service.settings.ingest.mode == "naive"
    down = unreachable_tiers(service)
    agents: list[AgentReport] = []
    if not down:
        for agent_id in agent_ids if agent_ids is not None else service.agents():
            signals, vectors = agent_signals(service, agent_id, now=now, since=since)
            figure = conveyance.conveyance(signals, naive_configured=naive_configured)
            agents.append(AgentReport(agent_id, signals, figure, vectors))
    pooled = conveyance.overall([a.signals for a in agents])
    total = conveyance.conveyance(pooled, tiers_unreachable=tuple(down), naive_configured=naive_configured)
    return Report(agents, total, pooled, down, now)


def render(report: Report) -> str:
    """A fixed-width table: one row per agent, then the overall row."""
    head = f"{'agent':<24} {'C':>8} {'W':>6} {'R':>6} {'H':>6} {'T':>6} {'Ctx':>6} {'L':>5} {'I':>5} {'A':>5} {'G':>5}"
    lines = [f"Conveyance C = (W*R*H/T) * Ctx^{report.overall.alpha}   (see docs/operations.md)", head]

    def row(name: str, c: Conveyance) -> str:
        f = c.factors
        return (
            f"{name[:24]:<24} {c.value:>8.4f} {f.w:>6.3f} {f.r:>6.3f} {f.h:>6.3f} {f.t:>6.2f} {f.ctx:>6.3f}"
            f" {f.l:>5.2f} {f.i:>5.2f} {f.a:>5.2f} {f.g:>5.2f}"
        )

    lines += [row(a.agent_id, a.conveyance) for a in report.agents]
    lines.append(row(f"overall ({len(report.agents)} agents)", report.overall))
    for tier, why in report.unreachable.items():
        lines.append(f"unreachable: {tier}: {why}")
    reasons = {r for a in report.agents for r in a.conveyance.zeroed_by} | set(report.overall.zeroed_by)
    lines += [f"zeroed by: {r}" for r in sorted(reasons)]
    return "\n".join(lines)
