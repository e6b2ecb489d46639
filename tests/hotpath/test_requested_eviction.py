"""Requested evictions (``evict_fifo`` / ``POST /evictions``) and the one shared placeholder: an
agent asking for evictions can never push its context past ``max``. Each test runs on fakeredis
and on the real Redis (the ``hot`` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doubles.harness import Harness
from tests.hotstate import dump, recount
from vcm.errors import TokenBudgetExceeded
from vcm.hotpath import render
from vcm.hotpath.context import assemble
from vcm.hotpath.state import HotState

MODEL = "vcm-demo-2k"  # 2048-token window: max 1843


@pytest.fixture
def agent(hot: HotState) -> str:
    hot.create_agent("ev1", model=MODEL, system_prompt="Be brief.")
    return "ev1"


def memory(hot: HotState, agent: str) -> dict[str, object]:
    """The agent's keys but the heartbeat chain (a failed tool call asks for a heartbeat)."""
    return {k: v for k, v in dump(hot.redis, agent).items() if not k.endswith(":heartbeat")}


def placeholders_shown(hot: HotState, agent: str) -> list[str]:
    ctx = assemble(hot.snapshot(agent))
    return [c for m in ctx.messages if (c := m.get("content") or "").endswith("summary updating.")]


def test_150_single_evictions_never_push_a_2k_context_past_max(hot: HotState, agent: str) -> None:
    # The reported case: short messages (each cheaper than a placeholder) and 150 requests to
    # evict one, with no cold path finishing the batches (the report saw 3 279 tokens).
    for i in range(200):
        hot.append(agent, "user", f"ok {i}")
    max_tokens = hot.gauges(agent).max_tokens
    evicted = 0
    for call in range(150):
        before = hot.gauges(agent).total
        total, batch = hot.evict_oldest(agent, 1)
        gauges = hot.gauges(agent)
        assert gauges.total <= max_tokens, f"call {call + 1}: {gauges.total} > max {max_tokens}"
        assert total == gauges.total < before, f"call {call + 1} did not free room"
        assert batch is not None
        evicted += batch.count
    assert evicted >= 150
    pending = hot.pending_batches(agent)
    assert len(pending) > 1
    # All pending batches share one placeholder naming their messages, at the cost of one.
    snap = hot.snapshot(agent)
    assert placeholders_shown(hot, agent) == [render.placeholder(evicted)]
    assert snap.counter("ph") == render.placeholder_tokens(snap.counter("ph_base"), evicted)
    assert snap.counter("ph") == hot.counter(MODEL).message(render.placeholder(evicted))
    assert assemble(snap).gauges == hot.gauges(agent)


def test_a_single_short_message_takes_the_next_oldest_until_room_is_freed(hot: HotState, agent: str) -> None:
    ids = [hot.append(agent, "user", f"ok {i}").message_id for i in range(10)]
    start = hot.gauges(agent)
    total, batch = hot.evict_oldest(agent, 1)
    assert batch is not None
    base = hot.snapshot(agent).counter("ph_base")
    # The fewest oldest messages whose tokens pay for the placeholder, and no more.
    assert batch.count > 1
    assert batch.tokens > render.placeholder_tokens(base, batch.count) == batch.placeholder
    one_fewer = sum(m.tokens for m in hot.read_batch(agent, batch.id)[:-1])
    assert one_fewer <= render.placeholder_tokens(base, batch.count - 1)
    assert batch.message_ids == tuple(ids[: batch.count])
    assert total == start.total - batch.tokens + batch.placeholder < start.total
    # With a batch pending, one more message joins its placeholder for (almost) nothing.
    total2, batch2 = hot.evict_oldest(agent, 1)
    assert batch2 is not None and batch2.count == 1 and batch2.placeholder == 0
    assert total2 == total - batch2.tokens


def test_an_eviction_that_cannot_free_room_is_refused_and_changes_nothing(hot: HotState, agent: str) -> None:
    hot.append(agent, "user", "keep this", pinned=True)
    hot.append(agent, "user", "ok")
    before = dump(hot.redis, agent)
    with pytest.raises(TokenBudgetExceeded) as err:
        hot.evict_oldest(agent, 5)
    details = err.value.details
    assert details["freed_tokens"] == hot.snapshot(agent).fifo[1].tokens
    assert details["placeholder_tokens"] == render.placeholder_tokens(hot.snapshot(agent).counter("ph_base"), 1)
    assert details["required_headroom"] == details["placeholder_tokens"] - details["freed_tokens"] > 0
    assert dump(hot.redis, agent) == before


def test_finishing_a_batch_recomputes_the_shared_placeholder(hot: HotState, agent: str) -> None:
    for i in range(40):
        hot.append(agent, "user", f"turn {i} " + "word " * 20)
    batches = [hot.evict_oldest(agent, n)[1] for n in (3, 2, 4)]
    assert all(b is not None for b in batches)
    counts = [b.count for b in batches if b is not None]
    assert counts == [3, 2, 4]
    # Only the first batch paid for the placeholder; the others joined it.
    assert [b.placeholder for b in batches if b is not None][1:] == [0, 0]
    assert placeholders_shown(hot, agent) == [render.placeholder(9)]
    base = hot.snapshot(agent).counter("ph_base")
    for done, left in ((1, 6), (2, 4), (3, 0)):
        hot.finish_eviction(agent, done, f"summary after batch {done}")
        snap = hot.snapshot(agent)
        assert snap.counter("ph_count") == left
        assert snap.counter("ph") == (render.placeholder_tokens(base, left) if left else 0)
        assert placeholders_shown(hot, agent) == ([render.placeholder(left)] if left else [])
        assert recount(hot, agent)["ph"] == snap.counter("ph")
        assert assemble(snap).gauges == hot.gauges(agent)
        assert hot.gauges(agent).total <= hot.gauges(agent).max_tokens


def test_the_evict_fifo_tool_reports_a_refusal_and_the_service_audits_it(hot: HotState, tmp_path: Path) -> None:
    h = Harness(hot, str(tmp_path / "vcm.db"))
    try:
        h.service.create_agent("t1", model=MODEL, system_prompt="Be brief.")
        h.service.append("t1", "user", "ok")
        before = memory(hot, "t1")
        refused = h.call("t1", "evict_fifo", count=1, idempotency_key="e1")
        assert refused.error is not None and refused.error["code"] == "TOKEN_BUDGET_EXCEEDED"
        assert refused.error["placeholder_tokens"] > refused.error["freed_tokens"]
        assert memory(hot, "t1") == before and h.dispatcher.evictions == []
        rows = [e.payload for e in h.store.query_events("t1", ["error"], limit=10).items]
        assert [(r["code"], r["op"]) for r in rows] == [("TOKEN_BUDGET_EXCEEDED", "evict")]
        # Through the service as the API calls it: 150 single evictions of short messages.
        for i in range(200):
            h.service.append("t1", "user", f"ok {i}")
        for _ in range(150):
            total, batch = h.service.evict("t1", 1)
            assert batch is not None and total == h.service.gauges("t1").total <= h.service.gauges("t1").max_tokens
        assert len(h.dispatcher.evictions) == len(hot.pending_batches("t1")) > 1
    finally:
        h.close()
