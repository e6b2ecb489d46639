"""The pure budget policy."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from vcm.errors import PinLimitExceeded, TokenBudgetExceeded
from vcm.hotpath.budget import Budget, FifoEntry, Parts, decide_growth, decide_requested_eviction, plan_eviction
from vcm.hotpath.render import placeholder_tokens
from vcm.settings import load_settings
from vcm.settings.context import BudgetSettings

BUDGET = Budget.for_window(1000, BudgetSettings())
PH = 17


def parts(
    fifo: int,
    *,
    system: int = 50,
    working: int = 0,
    pinned_blocks: int = 0,
    summary: int = 0,
    pinned_fifo: int = 0,
    placeholders: int = 0,
) -> Parts:
    return Parts(
        system=system,
        working=working,
        pinned_blocks=pinned_blocks,
        pinned_fifo=pinned_fifo,
        summary=summary,
        placeholders=placeholders,
        fifo=fifo,
    )


def fifo_of(*tokens: int, pinned: set[int] | None = None) -> list[FifoEntry]:
    pinned = pinned or set()
    return [FifoEntry(f"m{i + 1}", t, i + 1 in pinned) for i, t in enumerate(tokens)]


def test_thresholds_in_tokens() -> None:
    assert (BUDGET.max_tokens, BUDGET.warning_at, BUDGET.flush_at, BUDGET.target) == (900, 700, 900, 500)
    assert (BUDGET.pinned_cap, BUDGET.summary_cap) == (250, 150)
    big_reserve = Budget.for_window(1000, BudgetSettings(output_reserve=0.2))
    assert big_reserve.flush_at == big_reserve.max_tokens == 800


def test_the_default_settings_keep_the_seed_lines() -> None:
    # warning 70 %, flush 90 %, target 50 %: the output reserve (10 %) alone sets max, which is the
    # flush line; the injected layers live in what the hot context leaves below it.
    defaults = load_settings(environ={}).budget
    for window in (2048, 4096, 128_000):
        budget = Budget.for_window(window, defaults)
        assert budget.flush_at == budget.max_tokens == math.floor(window * 0.9)
        assert (budget.warning_at, budget.target) == (math.floor(window * 0.7), math.floor(window * 0.5))
    # A memory reserve keeps a floor of room for the layers by moving max, and the flush line, down.
    reserved = Budget.for_window(1000, BudgetSettings(memory_reserve=0.1))
    assert reserved.flush_at == reserved.max_tokens == 800


def test_below_warning_is_ok() -> None:
    d = decide_growth(
        parts(500), fifo_of(100) * 5, BUDGET, added=100, warned=False, pressure_tokens=40, placeholder_base=PH
    )
    assert (d.action, d.total_after, d.warned_after) == ("ok", 650, False)


def test_warning_once_per_upward_crossing_then_rearm() -> None:
    d = decide_growth(parts(600), [], BUDGET, added=60, warned=False, pressure_tokens=40, placeholder_base=PH)
    assert (d.action, d.total_after, d.warned_after) == ("warning", 750, True)
    d2 = decide_growth(parts(700), [], BUDGET, added=10, warned=True, pressure_tokens=40, placeholder_base=PH)
    assert d2.action == "ok" and d2.warned_after
    # Falling below warning re-arms.
    d3 = decide_growth(parts(700), [], BUDGET, added=-300, warned=True, pressure_tokens=40, placeholder_base=PH)
    assert d3.action == "ok" and not d3.warned_after


def test_warning_that_would_cross_flush_flushes_instead() -> None:
    fifo = fifo_of(*[80] * 10)
    d = decide_growth(
        parts(800),
        fifo,
        BUDGET,
        added=80,
        warned=False,
        pressure_tokens=60,
        placeholder_base=PH,
        exclude="m10",
    )
    assert d.action == "flush"


def test_flush_evicts_oldest_unpinned_until_target() -> None:
    fifo = fifo_of(100, 100, 100, 100, 100, 100, 100, 100, 100, pinned={2})
    # total before = 50 system + 800 fifo; +100 new (m9 is the new one) -> 950 > 900
    d = decide_growth(
        parts(800, pinned_fifo=100),
        fifo,
        BUDGET,
        added=100,
        warned=True,
        pressure_tokens=40,
        placeholder_base=PH,
        exclude="m9",
    )
    assert d.action == "flush" and d.eviction is not None
    # Need 950 - evicted + ph <= 500: five messages (skipping the pinned m2) = 500 -> 450 + ph.
    assert d.eviction.message_ids == ("m1", "m3", "m4", "m5", "m6")
    assert d.total_after == 950 - 500 + placeholder_tokens(PH, 5)
    assert d.total_after <= BUDGET.target
    assert not d.warned_after


def test_plan_never_evicts_excluded_or_pinned_and_reports_unreachable() -> None:
    fifo = fifo_of(300, 300, 300, pinned={1})
    plan = plan_eviction(fifo, 950, 500, PH, exclude="m3")
    assert plan.message_ids == ("m2",)
    assert plan.target_unreachable
    assert plan.total_after == 950 - 300 + placeholder_tokens(PH, 1)


def test_refuses_what_cannot_fit_even_after_eviction() -> None:
    with pytest.raises(TokenBudgetExceeded) as err:
        decide_growth(
            parts(0),
            fifo_of(1000),
            BUDGET,
            added=1000,
            warned=False,
            pressure_tokens=40,
            placeholder_base=PH,
            exclude="m1",
        )
    assert err.value.details["required_headroom"] == 50 + 1000 - 900
    assert err.value.code == "TOKEN_BUDGET_EXCEEDED"


def test_unevictable_growth_keeps_summary_room() -> None:
    # system 50 + working 700 + summary room 150 + one placeholder > 900, though 750 alone fits
    with pytest.raises(TokenBudgetExceeded) as err:
        decide_growth(
            parts(0),
            [],
            BUDGET,
            added=700,
            added_unevictable=700,
            warned=True,
            pressure_tokens=40,
            placeholder_base=PH,
        )
    assert err.value.details["required_headroom"] == 50 + 700 + 150 + PH + 4 - 900
    fits = decide_growth(
        parts(0, summary=150),
        [],
        BUDGET,
        added=500,
        added_unevictable=500,
        warned=True,
        pressure_tokens=40,
        placeholder_base=PH,
    )
    assert fits.total_after == 700


def test_pin_cap() -> None:
    with pytest.raises(PinLimitExceeded) as err:
        decide_growth(
            parts(0, pinned_blocks=200),
            [],
            BUDGET,
            added=60,
            added_pinned=60,
            warned=False,
            pressure_tokens=40,
            placeholder_base=PH,
        )
    assert err.value.details == {"pinned": 200, "requested": 60, "cap": 250}
    ok = decide_growth(
        parts(0, pinned_blocks=200),
        [],
        BUDGET,
        added=50,
        added_pinned=50,
        warned=False,
        pressure_tokens=40,
        placeholder_base=PH,
    )
    assert ok.action == "ok"


def test_non_admitted_change_is_rebalanced_not_refused() -> None:
    fifo = fifo_of(*[100] * 8)
    d = decide_growth(
        parts(800),
        fifo,
        BUDGET,
        added=100,
        added_unevictable=10_000,
        warned=True,
        pressure_tokens=40,
        placeholder_base=PH,
        admit=False,
    )
    assert d.action == "flush" and d.total_after <= BUDGET.target


def test_a_flush_joins_the_pending_placeholder_instead_of_adding_one() -> None:
    # 12 messages already stand behind the placeholder; two more leave it at the same cost.
    ph = placeholder_tokens(PH, 12)
    plan = plan_eviction(fifo_of(300, 300, 300), 950, 500, PH, pending=12, placeholders=ph)
    assert plan.message_ids == ("m1", "m2")
    assert plan.placeholder == placeholder_tokens(PH, 14) - ph == 0
    assert plan.total_after == 950 - 600


def test_a_requested_eviction_takes_the_next_oldest_until_it_frees_room() -> None:
    short = fifo_of(6, 6, 6, 6, 6, pinned={2})
    d = decide_requested_eviction(parts(30, pinned_fifo=6), short, BUDGET, count=1, warned=False, placeholder_base=PH)
    # One 6-token message cannot pay for an 18-token placeholder: the fewest that can (4 unpinned).
    assert d.eviction is not None and d.eviction.message_ids == ("m1", "m3", "m4", "m5")
    assert d.eviction.tokens == 24 > d.eviction.placeholder == placeholder_tokens(PH, 4)
    assert d.total_after == 50 + 30 - 24 + placeholder_tokens(PH, 4) < 50 + 30
    # With a batch pending, one message joins its placeholder for free.
    pending = replace(parts(30, placeholders=placeholder_tokens(PH, 4)), placeholder_count=4)
    d2 = decide_requested_eviction(pending, fifo_of(6, 6), BUDGET, count=1, warned=False, placeholder_base=PH)
    assert d2.eviction is not None and d2.eviction.message_ids == ("m1",) and d2.eviction.placeholder == 0


def test_a_requested_eviction_that_cannot_free_room_is_refused() -> None:
    with pytest.raises(TokenBudgetExceeded) as err:
        decide_requested_eviction(parts(10), fifo_of(5, 5), BUDGET, count=1, warned=False, placeholder_base=PH)
    grown = placeholder_tokens(PH, 2)
    assert err.value.details == {
        "required_headroom": grown - 10,
        "max_tokens": BUDGET.max_tokens,
        "placeholder_tokens": grown,
        "freed_tokens": 10,
    }
    # Nothing unpinned: nothing to do, not an error.
    d = decide_requested_eviction(parts(5), fifo_of(5, pinned={1}), BUDGET, count=3, warned=False, placeholder_base=PH)
    assert d.eviction is None and d.total_after == 55
