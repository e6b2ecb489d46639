"""The pure heartbeat governor."""

from __future__ import annotations

from vcm.settings.context import HeartbeatSettings
from vcm.tools.heartbeat import ChainState, decide

S = HeartbeatSettings()


def run_chain(n: int, *, step: float = 0.5, free: int = 10_000, start: float = 100.0):
    state, decisions, now = ChainState(), [], start
    for _ in range(n):
        d = decide(state, requested=True, now=now, free_tokens=free, settings=S)
        decisions.append(d)
        state = d.state
        now += step
    return state, decisions, now


def test_a_chain_of_five_runs_then_yields() -> None:
    state, decisions, now = run_chain(5)
    assert [d.run for d in decisions] == [True] * 5
    assert [d.depth for d in decisions] == [1, 2, 3, 4, 5]
    assert len({d.chain_id for d in decisions}) == 1
    end = decide(state, requested=False, now=now, free_tokens=10_000, settings=S)
    assert (end.run, end.ended, end.depth) == (False, "explicit_yield", 5)
    assert end.state.chain_id == "" and end.retry_after_ms == 0


def test_depth_stops_at_eight_with_cooldown() -> None:
    _state, decisions, now = run_chain(9)
    assert [d.run for d in decisions] == [True] * 8 + [False]
    stop = decisions[-1]
    assert (stop.ended, stop.depth, stop.retry_after_ms) == ("depth", 8, 750)
    # During the cooldown a new chain is refused; after it, one starts at depth 1.
    blocked = decide(stop.state, requested=True, now=now + 0.2, free_tokens=10_000, settings=S)
    assert not blocked.run and blocked.ended == "rate_limited" and 0 < blocked.retry_after_ms <= 750
    fresh = decide(stop.state, requested=True, now=now + 2.0, free_tokens=10_000, settings=S)
    assert fresh.run and fresh.depth == 1 and fresh.chain_id != stop.chain_id


def test_duration_stop() -> None:
    state, decisions, _now = run_chain(3, step=25.0)  # starts at 100, third request at 150
    assert all(d.run for d in decisions)
    late = decide(state, requested=True, now=161.0, free_tokens=10_000, settings=S)
    assert (late.run, late.ended) == (False, "duration") and late.retry_after_ms == 750


def test_token_floor_stop() -> None:
    state, _, now = run_chain(2)
    low = decide(state, requested=True, now=now, free_tokens=255, settings=S)
    assert (low.run, low.ended, low.depth) == (False, "tokens", 2)
    assert low.retry_after_ms == 0  # no cooldown after a token stop


def test_rate_limit_three_per_second() -> None:
    state, decisions, now = run_chain(3, step=0.1)
    assert all(d.run for d in decisions)
    fourth = decide(state, requested=True, now=now, free_tokens=10_000, settings=S)
    assert (fourth.run, fourth.ended) == (False, "rate_limited") and fourth.retry_after_ms > 0
    later = decide(fourth.state, requested=True, now=now + 1.0, free_tokens=10_000, settings=S)
    assert later.run


def test_settings_change_the_guards() -> None:
    tight = HeartbeatSettings(max_depth=2, cooldown_ms=0)
    state = ChainState()
    runs = []
    for i in range(3):
        d = decide(state, requested=True, now=10.0 + i, free_tokens=10_000, settings=tight)
        runs.append(d.run)
        state = d.state
    assert runs == [True, True, False]
