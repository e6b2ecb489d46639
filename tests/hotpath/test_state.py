"""Hot state on the real Redis and on fakeredis (the `hot` fixture runs each test on both)."""

from __future__ import annotations

import pytest

from tests.hotstate import dump, recount
from vcm.errors import (
    Conflict,
    IdempotencyMismatch,
    NotFound,
    PinLimitExceeded,
    RevConflict,
    TokenBudgetExceeded,
    ValidationError,
)
from vcm.hotpath import render
from vcm.hotpath.context import assemble
from vcm.hotpath.state import HotState

MODEL = "vcm-demo-2k"  # 2048-token window: warning 1433, flush/max 1843, target 1024


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i % 7}" for i in range(n))


@pytest.fixture
def agent(hot: HotState) -> str:
    hot.create_agent("a1", model=MODEL, system_prompt="You are a careful assistant.")
    return "a1"


def fill_until(hot: HotState, agent: str, action: str, size: int = 60) -> list:
    results = []
    for i in range(200):
        r = hot.append(agent, "user", words(size, f"t{i}x"))
        results.append(r)
        if r.action == action:
            return results
    raise AssertionError(f"never saw {action}")


def test_append_counts_once_and_stores_the_count(hot: HotState, agent: str) -> None:
    r = hot.append(agent, "user", "hello there", name="alice")
    counter = hot.counter(MODEL)
    assert r.tokens == counter.message("hello there", name="alice")
    snap = hot.snapshot(agent)
    assert snap.fifo[0].tokens == r.tokens and snap.fifo[0].name == "alice"
    assert snap.counter("fifo") == r.tokens
    assert r.total == snap.counter("system") + r.tokens


def test_warning_injected_once_and_rearmed_after_flush(hot: HotState, agent: str) -> None:
    results = fill_until(hot, agent, "warning")
    warn = results[-1]
    assert warn.pressure_message_id is not None
    snap = hot.snapshot(agent)
    assert snap.fifo[-1].kind == "pressure" and snap.fifo[-1].content == render.PRESSURE_TEXT
    # Further growth below flush does not warn again.
    more = fill_until(hot, agent, "flush")
    assert all(r.action == "ok" for r in more[:-1])
    assert hot.snapshot(agent).counter("warned") == 0  # re-armed: flush went below warning
    again = fill_until(hot, agent, "warning")
    assert again[-1].pressure_message_id is not None


def test_flush_begins_a_batch_with_placeholder(hot: HotState, agent: str) -> None:
    before = hot.snapshot(agent)
    results = fill_until(hot, agent, "flush")
    flush = results[-1]
    assert flush.batch is not None and flush.batch.id == 1
    snap = hot.snapshot(agent)
    assert flush.total <= 1024  # target
    parts = recount(hot, agent)
    assert flush.total == parts["working"] + parts["summary"] + parts["ph"] + parts["fifo"] + snap.counter("system")
    # The batch holds the oldest messages, in order; the new message stays in the FIFO.
    appended = [r.message_id for r in results] + [r.pressure_message_id for r in results if r.pressure_message_id]
    batch_msgs = hot.read_batch(agent, 1)
    assert [m.id for m in batch_msgs] == list(flush.batch.message_ids)
    assert [m.seq for m in batch_msgs] == sorted(m.seq for m in batch_msgs)
    assert flush.message_id in [m.id for m in snap.fifo]
    assert set(m.id for m in snap.fifo) | set(flush.batch.message_ids) == set(appended)
    assert snap.placeholders == [(1, flush.batch.count, flush.batch.placeholder)]
    assert before.counter("batch_seq") == 0 and snap.counter("batch_seq") == 1
    ctx = assemble(snap)
    assert render.placeholder(flush.batch.count) in [m["content"] for m in ctx.messages]


def test_with_the_default_settings_the_flush_line_is_90_percent_of_the_window(hot: HotState, agent: str) -> None:
    # Seed 000's lines: warning 70 %, flush 90 %, target 50 % (no memory reserve moves them).
    flush_at, target = 1843, 1024
    assert hot.settings.budget.memory_reserve == 0.0
    total = hot.snapshot(agent).counter("system")
    for i in range(200):
        r = hot.append(agent, "user", words(60, f"t{i}x"))
        if r.action == "flush":
            assert total + r.tokens > flush_at >= total  # the first growth past 90 % flushes ...
            assert r.total <= target  # ... down to 50 %
            break
        assert r.total <= flush_at
        total = r.total
    else:
        raise AssertionError("never flushed")
    assert total > 0.8 * 2048  # the context grew past the old 80 % line without flushing
    snap = hot.snapshot(agent)
    assert (snap.counter("max"), snap.counter("flush")) == (flush_at, flush_at)


def test_finish_installs_summary_idempotently_and_in_order(hot: HotState, agent: str) -> None:
    fill_until(hot, agent, "flush")
    fill_until(hot, agent, "flush")
    assert hot.pending_batches(agent) == [1, 2]
    before = dump(hot.redis, agent)
    with pytest.raises(Conflict) as err:
        hot.finish_eviction(agent, 2, "too early")
    assert err.value.code == "CONFLICT" and err.value.details["waiting_for"] == 1
    assert dump(hot.redis, agent) == before
    r1 = hot.finish_eviction(agent, 1, "Alice and Bob talked about t0 to t12.")
    assert not r1.replayed and r1.summary_rev == 1
    snap = hot.snapshot(agent)
    assert snap.summary_text == "Alice and Bob talked about t0 to t12."
    assert snap.summary_tokens == hot.summary_tokens(agent, snap.summary_text)
    assert [p[0] for p in snap.placeholders] == [2]
    after = dump(hot.redis, agent)
    again = hot.finish_eviction(agent, 1, "a different text is ignored on replay")
    assert again.replayed and again.summary_rev == 1
    assert dump(hot.redis, agent) == after
    with pytest.raises(NotFound):
        hot.read_batch(agent, 1)
    hot.finish_eviction(agent, 2, "Summary of both batches.")
    assert hot.pending_batches(agent) == []
    assert hot.snapshot(agent).placeholders == []


def test_summary_above_cap_is_refused(hot: HotState, agent: str) -> None:
    fill_until(hot, agent, "flush")
    before = dump(hot.redis, agent)
    with pytest.raises(ValidationError):
        hot.finish_eviction(agent, 1, words(400))
    assert dump(hot.redis, agent) == before


def test_idempotent_append(hot: HotState, agent: str) -> None:
    first = hot.append(agent, "user", "remember the milk", idempotency_key="k1")
    state = dump(hot.redis, agent)
    again = hot.append(agent, "user", "remember the milk", idempotency_key="k1")
    assert again.replayed and again.message_id == first.message_id and again.total == first.total
    assert dump(hot.redis, agent) == state
    with pytest.raises(IdempotencyMismatch) as err:
        hot.append(agent, "user", "remember the eggs", idempotency_key="k1")
    assert err.value.code == "IDEMPOTENCY_MISMATCH"
    assert dump(hot.redis, agent) == state


def test_blocks_revisions_and_conflicts(hot: HotState, agent: str) -> None:
    created = hot.put_block(agent, "persona", "I like tea.", role="persona")
    assert created.rev is not None
    with pytest.raises(RevConflict) as err:
        hot.put_block(agent, "persona", "again")  # create over an existing block
    assert err.value.details["current_rev"] == created.rev
    edited = hot.put_block(agent, "persona", "I like coffee.", role="persona", expected_rev=created.rev)
    assert edited.rev != created.rev
    state = dump(hot.redis, agent)
    with pytest.raises(RevConflict):
        hot.put_block(agent, "persona", "stale write", expected_rev=created.rev)
    assert dump(hot.redis, agent) == state
    block = hot.get_block(agent, "persona")
    assert (block.content, block.rev) == ("I like coffee.", edited.rev)
    assert block.tokens == hot.counter(MODEL).message(render.block("persona", "persona", "I like coffee.", False))
    assert hot.snapshot(agent).counter("working") == block.tokens
    hot.delete_block(agent, "persona", edited.rev)
    assert hot.list_blocks(agent) == [] and hot.snapshot(agent).counter("working") == 0
    with pytest.raises(NotFound):
        hot.get_block(agent, "persona")


def test_pinned_cap(hot: HotState, agent: str) -> None:
    hot.put_block(agent, "facts", words(150), pinned=True)  # ~320 of a 512-token cap
    state = dump(hot.redis, agent)
    with pytest.raises(PinLimitExceeded) as err:
        hot.put_block(agent, "more", words(150), pinned=True)
    assert err.value.details["cap"] == 512
    with pytest.raises(PinLimitExceeded):
        hot.append(agent, "user", words(150), pinned=True)
    assert dump(hot.redis, agent) == state
    hot.put_block(agent, "more", words(150), pinned=False)  # unpinned is fine


def test_too_large_is_refused_with_headroom(hot: HotState, agent: str) -> None:
    state = dump(hot.redis, agent)
    with pytest.raises(TokenBudgetExceeded) as err:
        hot.append(agent, "user", words(2500))
    assert err.value.details["required_headroom"] > 0
    assert dump(hot.redis, agent) == state


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"role": "user", "content": ""}, "content"),
        ({"role": "user", "content": "   "}, "content"),
        ({"role": "wizard", "content": "hi"}, "role"),
        ({"role": "user", "content": b"\xff\xfe not utf-8"}, "content"),
        ({"role": "user", "content": "lone \ud800 surrogate"}, "content"),
        ({"role": "user", "content": "x" * 400_001}, "content"),
        ({"role": "user", "content": 42}, "content"),
        ({"role": "user", "content": "hi", "name": "bad name!"}, "name"),
        ({"role": "user", "content": "hi", "idempotency_key": ""}, "idempotency_key"),
        ({"role": "user", "content": "hi", "pinned": "yes"}, "pinned"),
        ({"role": "user", "content": "hi", "metadata": {"x": float("nan")}}, "metadata"),
    ],
)
def test_bad_input_is_coded_and_changes_nothing(hot: HotState, agent: str, kwargs: dict, field: str) -> None:
    state = dump(hot.redis, agent)
    with pytest.raises(ValidationError) as err:
        hot.append(agent, **kwargs)
    assert err.value.code == "VALIDATION_ERROR" and err.value.details["field"] == field
    assert dump(hot.redis, agent) == state


def test_unknown_agent(hot: HotState) -> None:
    with pytest.raises(NotFound):
        hot.append("ghost", "user", "hello")
    with pytest.raises(NotFound):
        hot.snapshot("ghost")
    with pytest.raises(ValidationError):
        hot.append("bad{agent}", "user", "hello")
    assert list(hot.redis.scan_iter("vcm:{ghost}*")) == []


def test_create_agent_is_idempotent_and_validated(hot: HotState, agent: str) -> None:
    again = hot.create_agent("a1", model=MODEL, system_prompt="You are a careful assistant.")
    assert again.window == 2048
    with pytest.raises(ValidationError):
        hot.create_agent("a2", model="no-such-model")
    with pytest.raises(TokenBudgetExceeded):
        hot.create_agent("a3", model=MODEL, system_prompt=words(1500))
    assert hot.agents() == ["a1"]


def test_context_assembly_matches_stored_parts(hot: HotState, agent: str) -> None:
    hot.put_block(agent, "persona", "I am a tea expert.", pinned=True)
    fill_until(hot, agent, "flush")
    hot.finish_eviction(agent, 1, "We discussed tea.")
    hot.append(agent, "assistant", "Sure.")
    snap = hot.snapshot(agent)
    ctx = assemble(snap)
    roles = [m["role"] for m in ctx.messages]
    assert roles[0] == "system"
    contents = [m["content"] for m in ctx.messages]
    assert contents[1].startswith('<working_block id="persona"') and contents[2].startswith(render.SUMMARY_HEADER)
    assert ctx.messages[-1] == {"role": "assistant", "content": "Sure."}
    counter = hot.counter(MODEL)
    # Recount the assembled messages from scratch: equals the stored parts and the gauges.
    recounted = counter.message(snap.system_prompt) + counter.tools(snap.tools) + counter.reply_priming
    recounted += sum(counter.message(m["content"], name=m.get("name")) for m in ctx.messages[1:])
    assert recounted == sum(ctx.message_tokens) == ctx.gauges.total
    g = ctx.gauges.as_dict()
    assert g["free"] == g["max"] - g["total"] and g["total"] <= g["max"]


def test_evict_oldest_on_request(hot: HotState, agent: str) -> None:
    pinned = hot.append(agent, "user", "keep me", pinned=True)
    # Notes long enough that three pay for the placeholder replacing them (shorter ones would
    # take more of the oldest: see test_requested_eviction).
    ids = [hot.append(agent, "user", f"note {i} on the quarterly budget review").message_id for i in range(5)]
    before_total = hot.snapshot(agent).counter("fifo")
    total, batch = hot.evict_oldest(agent, 3, idempotency_key="ev1")
    assert batch is not None and batch.message_ids == tuple(ids[:3])
    snap = hot.snapshot(agent)
    assert [m.id for m in snap.fifo] == [pinned.message_id, *ids[3:]]
    assert snap.counter("fifo") == before_total - batch.tokens
    parts = recount(hot, agent)
    assert total == parts["working"] + parts["summary"] + parts["ph"] + parts["fifo"] + snap.counter("system")
    state = dump(hot.redis, agent)
    _, again = hot.evict_oldest(agent, 3, idempotency_key="ev1")
    assert again is not None and again.id == batch.id and dump(hot.redis, agent) == state
    with pytest.raises(ValidationError):
        hot.evict_oldest(agent, 0)
    hot.finish_eviction(agent, batch.id, "three notes")
    assert hot.pending_batches(agent) == []


def test_fifo_near_reads_only_the_neighbourhood(hot: HotState, agent: str) -> None:
    ids = [hot.append(agent, "user", f"turn {i}").message_id for i in range(12)]
    near = hot.fifo_near(agent, [ids[6], ids[9]], before=2, after=1)
    assert [m.id for m in near] == [ids[4], ids[5], ids[6], ids[7], ids[8], ids[9], ids[10]]
    assert [m.content for m in near][:2] == ["turn 4", "turn 5"]
    assert [m.id for m in hot.fifo_near(agent, [], before=3, after=3, head=2)] == ids[:2]
    # edges clip; an id not in the FIFO anchors nothing
    assert [m.id for m in hot.fifo_near(agent, [ids[0], "nope"], before=5, after=0)] == ids[:1]
    assert [m.id for m in hot.fifo_near(agent, [ids[11]], before=0, after=4)] == ids[11:]
    # evicted messages leave the FIFO: the head is the oldest message still in it
    # (these turns are short: more than three leave, so that the eviction frees room)
    _, batch = hot.evict_oldest(agent, 3)
    assert batch is not None and batch.message_ids == tuple(ids[: batch.count])
    assert [m.id for m in hot.fifo_near(agent, [], before=0, after=0, head=1)] == [ids[batch.count]]


def test_fifo_near_validates_the_agent(hot: HotState) -> None:
    with pytest.raises(ValidationError):
        hot.fifo_near("bad agent id!", [], before=1, after=1)
