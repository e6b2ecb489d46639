"""Heartbeat chains through the executor, with the governor's state in Redis (fakeredis and real).

Time is an injected clock moved by hand, so no test depends on how fast it runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.doubles.clock import Clock
from tests.doubles.harness import Harness
from vcm.hotpath.state import HotState
from vcm.settings import load_settings
from vcm.tools.chains import ChainState, HeartbeatGovernor, dump_state, load_state

MODEL = "vcm-small-8k"
SMALL = "vcm-demo-2k"


@pytest.fixture
def h(hot: HotState, tmp_path: Any) -> Iterator[Harness]:
    harness = Harness(hot, str(tmp_path / "vcm.db"), clock=Clock())
    harness.service.create_agent("a1", model=MODEL)
    yield harness
    harness.close()


def beat(h: Harness, requested: bool = True, agent: str = "a1", step: float = 0.5, **args: Any) -> Any:
    """One heartbeat tool call, then move the clock on."""
    result = h.call(agent, "record_heartbeat", heartbeat=requested, **args)
    h.clock.advance(step)
    return result.heartbeat


def ends(h: Harness, agent: str = "a1") -> list[dict[str, Any]]:
    return [dict(e.payload) for e in h.service.events(agent, ["heartbeat_end"]).items]


def test_state_codec_round_trips() -> None:
    state = ChainState("abc", 3, 10.5, 12.25, (10.5, 11.0, 11.5))
    assert load_state(dump_state(state)) == state
    assert load_state(None) == ChainState()


def test_a_chain_of_five_heartbeats_runs_then_yields(h: Harness) -> None:
    tools = [
        ("store_core", {"block_id": "b", "content": "x", "idempotency_key": "k1"}),
        ("fetch_core", {}),
        ("append_fifo", {"role": "assistant", "content": "thinking", "idempotency_key": "k2"}),
        ("search_recall", {"query": "thinking", "mode": "text"}),
        ("write_recall", {"content": "a note", "idempotency_key": "k3"}),
    ]
    outcomes = []
    for name, args in tools:
        outcomes.append(h.call("a1", name, heartbeat=True, **args).heartbeat)
        h.clock.advance(0.5)
    assert [(o.run, o.depth, o.ended) for o in outcomes] == [(True, d, None) for d in range(1, 6)]
    assert len({o.chain_id for o in outcomes}) == 1
    end = h.call("a1", "record_heartbeat", heartbeat=False, note="all done")
    assert not end.heartbeat.run and end.heartbeat.ended == "explicit_yield"
    assert end.payload["chain_end"] == {
        "chain_id": outcomes[0].chain_id,
        "depth": 5,
        "reason": "explicit_yield",
        "duration": 2.5,
        "retry_after_ms": 0,
    }
    assert ends(h) == [end.payload["chain_end"] | {"note": "all done"}]
    assert h.executor.governor.state("a1").chain_id == ""


def test_depth_stops_at_eight_then_cools_down(h: Harness) -> None:
    outcomes = [beat(h) for _ in range(9)]
    assert [o.run for o in outcomes] == [True] * 8 + [False]
    stop = outcomes[-1]
    assert (stop.ended, stop.depth, stop.retry_after_ms) == ("depth", 8, 750)
    h.clock.advance(-0.3)  # 0.2 s after the stop
    blocked = beat(h, step=1.0)
    assert not blocked.run and blocked.ended == "rate_limited" and 0 < blocked.retry_after_ms <= 750
    assert blocked.chain_id is None  # no chain started
    fresh = beat(h)
    assert fresh.run and fresh.depth == 1 and fresh.chain_id != stop.chain_id
    recorded = ends(h)
    assert [(e["reason"], e["depth"], e["chain_id"]) for e in recorded] == [
        ("depth", 8, stop.chain_id),
        ("rate_limited", 0, None),
    ]
    assert recorded[0]["duration"] == 4.0 and recorded[0]["retry_after_ms"] == 750


def test_duration_stop(h: Harness) -> None:
    runs = [beat(h, step=25.0) for _ in range(3)]  # at 0, 25, 50 s
    assert all(o.run for o in runs)
    h.clock.advance(-14.0)  # 61 s after the chain began
    late = beat(h)
    assert (late.run, late.ended, late.depth, late.retry_after_ms) == (False, "duration", 3, 750)
    assert ends(h)[0]["reason"] == "duration" and ends(h)[0]["duration"] == 61.0


def test_token_floor_stop(h: Harness) -> None:
    h.service.create_agent("small", model=SMALL)
    first = beat(h, agent="small")
    assert first.run
    i = 0
    while h.hot.gauges("small").free >= 330:  # the result itself takes about 70 more
        h.service.append("small", "user", f"message number {i} " + "words " * 40)
        i += 1
    assert h.hot.gauges("small").free > 0  # no flush happened: the room is really gone
    low = beat(h, agent="small")
    assert (low.run, low.ended, low.depth, low.retry_after_ms) == (False, "tokens", 1, 0)
    assert [e["reason"] for e in ends(h, "small")] == ["tokens"]


def test_rate_limit_three_per_second(h: Harness) -> None:
    runs = [beat(h, step=0.1) for _ in range(3)]
    assert all(o.run for o in runs)
    fourth = beat(h, step=0.1)
    assert (fourth.run, fourth.ended) == (False, "rate_limited") and fourth.retry_after_ms > 0
    assert [(e["reason"], e["depth"]) for e in ends(h)] == [("rate_limited", 3)]
    h.clock.advance(1.0)
    assert beat(h).run  # a second later a new chain may start (no cooldown after a rate stop)


def test_guard_numbers_come_from_settings(hot: HotState, tmp_path: Any) -> None:
    settings = load_settings({"heartbeat": {"max_depth": 2, "cooldown_ms": 0, "rate_per_s": 100}}, environ={})
    h = Harness(HotState(hot.redis, settings), str(tmp_path / "vcm.db"), clock=Clock())
    try:
        h.service.create_agent("a1", model=MODEL)
        outcomes = [beat(h, step=0.01) for _ in range(3)]
        assert [(o.run, o.ended) for o in outcomes] == [(True, None), (True, None), (False, "depth")]
        assert outcomes[-1].retry_after_ms == 0
    finally:
        h.close()


def test_concurrent_requests_cannot_both_pass_the_rate_limit(h: Harness) -> None:
    n = 8
    barrier = threading.Barrier(n)
    outcomes: list[Any] = []
    lock = threading.Lock()

    def request() -> None:
        barrier.wait()
        outcome, _ = h.executor.governor.decide("a1", requested=True, free_tokens=10_000)
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=request) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    runs = [o for o in outcomes if o.run]
    assert len(runs) == 3 and sorted(o.depth for o in runs) == [1, 2, 3]  # all at one instant: 3 per second
    assert all(o.ended == "rate_limited" for o in outcomes if not o.run)


class Interleaved(HeartbeatGovernor):
    """Lets another governor decide between this one's read and its write, once."""

    def __init__(self, *args: Any, other: HeartbeatGovernor, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.other = other
        self.reads = 0

    def _read(self, agent_id: str) -> tuple[ChainState, int]:
        got = super()._read(agent_id)
        self.reads += 1
        if self.reads == 1:
            self.other.decide(agent_id, requested=True, free_tokens=10_000)
        return got


def test_a_lost_race_is_decided_again_on_the_fresh_state(h: Harness) -> None:
    settings = h.service.settings.heartbeat
    other = HeartbeatGovernor(h.hot.heartbeats, settings, clock=h.clock)
    for _ in range(2):
        assert other.decide("a1", requested=True, free_tokens=10_000)[0].run
    racer = Interleaved(h.hot.heartbeats, settings, clock=h.clock, other=other)
    outcome, end = racer.decide("a1", requested=True, free_tokens=10_000)
    # On the state it first read this was the 3rd request in a second; the other call took that slot.
    assert racer.reads == 2
    assert (outcome.run, outcome.ended) == (False, "rate_limited") and end is not None and end.depth == 3


def test_a_step_of_several_calls_is_governed_once(h: Harness) -> None:
    results = [
        h.executor.execute("a1", "fetch_core", {"request_heartbeat": True}, govern=False),
        h.executor.execute("a1", "record_heartbeat", {"request_heartbeat": True}, govern=False),
    ]
    for r in results:
        assert r.heartbeat.requested and not r.heartbeat.governed and "heartbeat" not in r.payload
    assert results[1].payload == {
        "chain_id": None,
        "depth": 0,
        "recorded": False,
        "chain_depth": 0,
        "duration_ms": 0,
    } | {k: results[1].payload[k] for k in ("context_total", "context_free")}
    outcome = h.executor.govern("a1", any(r.heartbeat.requested for r in results))
    assert outcome.run and outcome.depth == 1
    assert h.executor.governor.state("a1").depth == 1
