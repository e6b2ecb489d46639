"""The Conveyance arithmetic: factors from signals, alpha amplification, zero propagation."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from vcm.eval.conveyance import ALPHA, Signals, conveyance, factors, overall

# One agent mid-conversation: everything spooled, two evictions, yielding chains, in budget.
HEALTHY = Signals(
    appended=100,
    spooled=100,
    evicted=40,
    provenance_edges=40,
    drift_scores=(0.9, 0.8),
    lags_s=(0.4, 0.6),
    chains=4,
    chains_yielded=4,
    flushes=2,
    flushes_unreachable=0,
    fifo_tokens=600,
    summary_tokens=200,
    placeholder_tokens=0,
    pinned_tokens=100,
    pinned_cap_tokens=500,
    free_tokens=700,
    headroom_tokens=1000,
)


def test_factors_of_a_healthy_agent() -> None:
    f = factors(HEALTHY)
    assert (f.w, f.r, f.h, f.t) == (pytest.approx(0.85), 1.0, 1.0, 1.0)
    assert (f.l, f.i, f.a, f.g) == (0.75, 1.0, 0.7, 1.0)
    assert f.ctx == pytest.approx((0.75 + 1.0 + 0.7 + 1.0) / 4)


def test_figure_is_w_r_h_over_t_times_ctx_to_alpha() -> None:
    c = conveyance(HEALTHY)
    f = c.factors
    assert ALPHA == 1.7 and c.alpha == 1.7
    assert c.value == pytest.approx(f.w * f.r * f.h / f.t * f.ctx**1.7)
    assert c.zeroed_by == ()


def test_context_amplifies_rather_than_adds() -> None:
    # Halving Ctx costs more than half of C (2^1.7 ≈ 3.25x), which an additive term would not.
    full = replace(HEALTHY, fifo_tokens=800, summary_tokens=0, free_tokens=1000)
    half = replace(full, provenance_edges=0, free_tokens=0)  # G and A drop to 0: Ctx 1.0 -> 0.5
    assert factors(full).ctx == 1.0 and factors(half).ctx == 0.5
    assert conveyance(full).value / conveyance(half).value == pytest.approx(2**1.7)


def test_slow_evictions_divide_the_figure() -> None:
    slow = replace(HEALTHY, lags_s=(3.0, 3.0, 5.0))
    assert factors(slow).t == 3.0
    assert conveyance(slow).value == pytest.approx(conveyance(HEALTHY).value / 3)


def test_a_stuck_batch_is_not_hidden_by_a_good_median() -> None:
    stuck = replace(HEALTHY, lags_s=(0.2,) * 50, pending_ages_s=(40.0, 2.0))
    assert factors(stuck).t == 40.0


@pytest.mark.parametrize(
    "change",
    [
        {"spooled": 0},  # R = 0: nothing reachable in recall
        {"drift_scores": (0.0,)},  # W = 0: the summary kept nothing of what it replaced
        {"chains_yielded": 0},  # H = 0: every chain was stopped by a guard
        {"fifo_tokens": 0, "pinned_tokens": 600, "pinned_cap_tokens": 0, "free_tokens": 0, "provenance_edges": 0},
    ],
    ids=["R", "W", "H", "Ctx"],
)
def test_any_factor_at_zero_makes_it_zero(change: dict[str, object]) -> None:
    assert conveyance(replace(HEALTHY, **change)).value == 0.0  # type: ignore[arg-type]


def test_conditions_zero_it_and_say_why() -> None:
    down = conveyance(HEALTHY, tiers_unreachable=["store (sqlite)"])
    assert down.value == 0.0 and down.zeroed_by == ("store (sqlite) unreachable",)
    assert conveyance(HEALTHY, naive_configured=True).value == 0.0
    naive = conveyance(replace(HEALTHY, naive_chunks=True))
    assert naive.value == 0.0 and "naive" in naive.zeroed_by[0]
    assert down.factors == conveyance(HEALTHY).factors  # factors still shown for diagnosis


def test_nothing_measured_yet_is_not_penalised() -> None:
    fresh = Signals(fifo_tokens=50, free_tokens=900, headroom_tokens=900, pinned_cap_tokens=250)
    f = factors(fresh)
    assert (f.w, f.r, f.h, f.t, f.l, f.i, f.a, f.g) == (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert conveyance(fresh).value == 1.0


def test_overall_pools_the_agents_counts() -> None:
    other = replace(HEALTHY, appended=100, spooled=50, drift_scores=(0.5,), lags_s=(10.0,))
    pooled = overall([HEALTHY, other])
    assert (pooled.agents, pooled.appended, pooled.spooled) == (2, 200, 150)
    assert factors(pooled).r == 0.75
    assert factors(pooled).w == pytest.approx((0.9 + 0.8 + 0.5) / 3)
    assert factors(pooled).t == 1.0  # median lag of (0.4, 0.6, 10.0) is 0.6 s
    assert overall([]).agents == 0
    assert conveyance(overall([])).zeroed_by == ("no agents: nothing conveyed",)


def test_values_stay_finite_and_bounded() -> None:
    odd = replace(HEALTHY, spooled=500, provenance_edges=999, drift_scores=(1.3,), free_tokens=5000)
    c = conveyance(odd)
    assert math.isfinite(c.value) and 0.0 <= c.value <= 1.0
