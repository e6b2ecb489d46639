"""The Conveyance figure of a memory: how well what an agent was told can reach it again.

Efficiency view of the Conveyance Framework: ``C = (W * R * H / T) * Ctx ** alpha`` with
alpha = 1.7 (context amplifies, it does not add). Every factor comes from signals vcm measures
anyway (hot-state counters, store counts, ``memory_events``), so the figure is reproducible from
the data and moves when the signals move. The factors, each in [0, 1] except T >= 1:

* **W (what)**: fidelity of what was condensed: the mean drift score of committed evictions
  (similarity of the summary kept to the turns it replaced; 1.0 before any eviction).
* **R (where)**: reachability: the share of appended messages that the recall tier holds (spooled),
  so ``search_recall`` can page them back in.
* **H (who)**: the agent's own control of its memory access: the share of heartbeat chains that
  ended because the agent yielded rather than by a guard (depth, duration, tokens, rate); 1.0
  without chains.
* **T (time)**: how long the memory takes to converge, normalised to the eviction target:
  ``max(1, lag / target)`` where lag is the larger of the median flush -> committed-eviction time
  and the age of the oldest batch still pending (a dead-lettered batch stays pending, so a stuck
  memory shows at once instead of hiding behind a good median). T = 1 at or under target; it only
  ever divides.
* **Ctx**: context quality, the mean of four parts:
  L (local coherence) = verbatim FIFO share of the conversational part (FIFO + summary +
  placeholders); I (instruction fit) = pinned tokens within the pinned cap times the share of
  flushes that reached the target; A (actionability) = free tokens over the headroom at target
  occupancy, capped at 1; G (grounding) = share of evicted messages linked to the summary by
  ``recall_log`` edges (provenance of what the summary says).

**Zero propagation**: any factor at 0 makes C = 0, and so do two conditions outright: a memory
tier (hot state or store) unreachable, and naive chunking in use (configured, or chunks of this
agent ingested naive), since either silently cuts what can be conveyed.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

ALPHA = 1.7
#: Seconds from flush to committed eviction that count as converged (the eviction target).
TARGET_LAG_S = 1.0
#: Heartbeat chain endings that are the agent's own choice; any other reason is a guard stopping it.
AGENT_ENDINGS = frozenset({"explicit_yield"})


@dataclass(frozen=True)
class Signals:
    """Measured counts for one agent or many; additive, so overall figures pool every agent."""

    appended: int = 0
    spooled: int = 0
    evicted: int = 0
    provenance_edges: int = 0
    drift_scores: tuple[float, ...] = ()
    lags_s: tuple[float, ...] = ()  # flush -> commit, per committed batch
    pending_ages_s: tuple[float, ...] = ()  # flush -> now, per batch not committed yet
    chains: int = 0
    chains_yielded: int = 0
    flushes: int = 0
    flushes_unreachable: int = 0
    fifo_tokens: int = 0
    summary_tokens: int = 0
    placeholder_tokens: int = 0
    pinned_tokens: int = 0
    pinned_cap_tokens: int = 0
    free_tokens: int = 0
    headroom_tokens: int = 0  # free tokens at target occupancy: max * (1 - target)
    naive_chunks: bool = False
    agents: int = 1

    def __add__(self, other: Signals) -> Signals:
        # Counts and tuples add up; a flag holds if it holds for either side.
        pooled: dict[str, Any] = {}
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            pooled[f.name] = (mine or theirs) if isinstance(mine, bool) else mine + theirs
        return Signals(**pooled)


@dataclass(frozen=True)
class Factors:
    w: float
    r: float
    h: float
    t: float
    l: float  # noqa: E741 - the framework's name for local coherence
    i: float
    a: float
    g: float

    @property
    def ctx(self) -> float:
        return (self.l + self.i + self.a + self.g) / 4.0


@dataclass(frozen=True)
class Conveyance:
    value: float
    factors: Factors
    alpha: float
    # Why the figure is 0 when a condition (not a factor) forced it; empty otherwise.
    zeroed_by: tuple[str, ...] = field(default=())


def _share(part: float, whole: float, *, empty: float = 1.0) -> float:
    """part / whole clamped to [0, 1]; ``empty`` when there is nothing to measure."""
    if whole <= 0:
        return empty
    return min(1.0, max(0.0, part / whole))


def factors(s: Signals, *, target_lag_s: float = TARGET_LAG_S) -> Factors:
    conversational = s.fifo_tokens + s.summary_tokens + s.placeholder_tokens
    pinned_fit = 1.0 if s.pinned_tokens <= s.pinned_cap_tokens else _share(s.pinned_cap_tokens, s.pinned_tokens)
    lag = max(statistics.median(s.lags_s) if s.lags_s else 0.0, max(s.pending_ages_s, default=0.0))
    return Factors(
        w=min(1.0, max(0.0, statistics.fmean(s.drift_scores))) if s.drift_scores else 1.0,
        r=_share(s.spooled, s.appended),
        h=_share(s.chains_yielded, s.chains),
        t=max(1.0, lag / target_lag_s),
        l=_share(s.fifo_tokens, conversational),
        i=pinned_fit * _share(s.flushes - s.flushes_unreachable, s.flushes),
        a=_share(s.free_tokens, s.headroom_tokens, empty=0.0),
        g=_share(s.provenance_edges, s.evicted),
    )


def conveyance(
    s: Signals,
    *,
    alpha: float = ALPHA,
    tiers_unreachable: Sequence[str] = (),
    naive_configured: bool = False,
    target_lag_s: float = TARGET_LAG_S,
) -> Conveyance:
    """C = (W R H / T) Ctx^alpha, zeroed by an unreachable tier or naive chunking."""
    f = factors(s, target_lag_s=target_lag_s)
    zeroed = tuple(f"{tier} unreachable" for tier in tiers_unreachable)
    if s.agents == 0:
        zeroed += ("no agents: nothing conveyed",)
    if naive_configured:
        zeroed += ("naive chunking configured ([ingest] mode)",)
    if s.naive_chunks:
        zeroed += ("naive-chunked archival documents ingested",)
    if zeroed:
        return Conveyance(0.0, f, alpha, zeroed)
    value = (f.w * f.r * f.h / f.t) * f.ctx**alpha
    return Conveyance(value, f, alpha)


def overall(per_agent: Sequence[Signals]) -> Signals:
    """Pooled signals of every agent (no agents: nothing measured)."""
    if not per_agent:
        return replace(Signals(), agents=0)
    total = per_agent[0]
    for s in per_agent[1:]:
        total = total + s
    return total
