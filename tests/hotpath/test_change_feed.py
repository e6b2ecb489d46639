"""The change feed (one Redis stream per agent) and the instance status board, on fakeredis, the
real Redis and the Redis Cluster: positions, resuming, gaps after trimming and after the feed
was dropped, and the board's pruning."""

from __future__ import annotations

import itertools

import pytest
import redis

from vcm.errors import ValidationError
from vcm.hotpath import keys
from vcm.hotpath.changes import ChangeFeed, position
from vcm.hotpath.instances import InstanceBoard
from vcm.service import MemoryService


@pytest.fixture
def feed(redis_client: redis.Redis) -> ChangeFeed:
    ticks = itertools.count(1000)
    return ChangeFeed(redis_client, maxlen=10, ttl_s=3600, clock=lambda: float(next(ticks)))


def test_a_reader_starting_now_then_reading_on_gets_each_change_once_in_order(feed: ChangeFeed) -> None:
    start = feed.read("a", None, 10)  # an empty feed gets a start entry: every position is real
    assert start.changes == () and start.next_after == start.head and not start.gap
    feed.publish("a", "state", "k", "1", "put")
    feed.publish("a", "block", "persona", None, "delete")
    feed.publish("b", "fact", "f1", "3", "put")  # another agent's feed
    page = feed.read("a", start.next_after, 1)
    assert [(c.kind, c.key, c.version, c.op) for c in page.changes] == [("state", "k", "1", "put")]
    rest = feed.read("a", page.next_after, 10)
    assert [(c.kind, c.key, c.version, c.op) for c in rest.changes] == [("block", "persona", None, "delete")]
    assert rest.next_after == rest.head == rest.changes[-1].id and not rest.gap
    assert feed.read("a", rest.next_after, 10).changes == ()
    assert [c.op for c in feed.read("a", "0", 10).changes] == ["start", "put", "delete"]  # from the oldest kept
    assert rest.changes[0].at > page.changes[0].at  # server time of each change


def test_a_reader_whose_position_was_trimmed_or_dropped_is_told_of_the_gap(
    feed: ChangeFeed, redis_client: redis.Redis
) -> None:
    start = feed.read("a", None, 10).next_after
    for i in range(300):  # MAXLEN ~ 10 trims whole nodes (100 entries), so go well past them
        feed.publish("a", "state", f"k{i}", str(i), "put")
    page = feed.read("a", start, 1000)
    assert page.gap and page.changes and page.changes[-1].key == "k299"
    assert position(page.changes[0].id) > position(start)
    assert not feed.read("a", page.next_after, 10).gap  # caught up: no gap any more
    # The feed dropped (a reset agent, an expired feed, a Redis that lost it): begun again, a gap.
    redis_client.delete(keys.key("a", keys.CHANGES))
    feed.publish("a", "agent", "*", None, "reset")
    again = feed.read("a", page.next_after, 10)
    assert again.gap and [c.op for c in again.changes] == ["reset"]


def test_positions_from_elsewhere_are_refused_and_the_feed_expires(feed: ChangeFeed, redis_client: redis.Redis) -> None:
    for bad in ("", "$", "1-2-3", "-1", "x-1", "1" * 30):
        with pytest.raises(ValidationError):
            feed.read("a", bad, 10)
    with pytest.raises(ValidationError):
        feed.read("a", None, 0)
    feed.publish("a", "state", "k", "1", "put")
    assert 0 < int(redis_client.ttl(keys.key("a", keys.CHANGES))) <= 3600
    with pytest.raises(ValueError):
        feed.publish("a", "message", "m1", "1", "put")  # not a kind the feed carries


def test_the_board_keeps_each_instances_latest_report_and_drops_the_silent(redis_client: redis.Redis) -> None:
    board = InstanceBoard(redis_client, ttl_s=100, max_instances=2)
    assert board.report("a", "i1", {"status": "synced", "syncs": 1}, now=1000.0) is None
    previous = board.report("a", "i1", {"status": "error", "syncs": 2}, now=1010.0)
    assert previous is not None and previous["syncs"] == 1
    board.report("a", "i2", {"status": "synced"}, now=1020.0)
    assert [(r["instance_id"], r["status"], r["reported_at"]) for r in board.records("a", 1030.0)] == [
        ("i1", "error", 1010.0),
        ("i2", "synced", 1020.0),
    ]
    board.report("a", "i3", {"status": "syncing"}, now=1040.0)  # a third: the longest silent goes
    assert [r["instance_id"] for r in board.records("a", 1040.0)] == ["i2", "i3"]
    assert [r["instance_id"] for r in board.records("a", 1125.0)] == ["i3"]  # i2 silent for > 100 s
    assert board.records("b", 1000.0) == []


def test_a_retried_block_write_publishes_its_change_again(svc: MemoryService) -> None:
    head = svc.changes("ann").next_after
    # The first attempt reached Redis, then its process died before publishing the change.
    svc.hot.put_block("ann", "plan", "Ship on Friday.", idempotency_key="k1")
    assert svc.changes("ann", after=head).changes == ()
    res = svc.put_block("ann", "plan", "Ship on Friday.", idempotency_key="k1")
    assert res.replayed
    page = svc.changes("ann", after=head)
    assert [(c.kind, c.key, c.version, c.op) for c in page.changes] == [("block", "plan", res.rev, "put")]
