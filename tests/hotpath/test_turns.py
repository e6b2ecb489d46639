"""The per-agent turn lock (vcm.hotpath.turns) on fakeredis, the real Redis and the Redis Cluster:
one holder at a time, renewed while held, lapsing when its owner stops renewing, released once."""

from __future__ import annotations

import time

import pytest
import redis

from vcm.errors import Conflict
from vcm.hotpath.turns import TurnLocks


@pytest.fixture
def locks(redis_client: redis.Redis) -> TurnLocks:
    return TurnLocks(redis_client, hold_s=0.5, wait_s=0.0)


def test_one_turn_at_a_time_and_renewed_past_its_lifetime(locks: TurnLocks) -> None:
    turn = locks.acquire("ann")
    time.sleep(1.2)  # past the 0.5 s lifetime: the keep-alive renewed it
    with pytest.raises(Conflict) as refused:
        locks.acquire("ann")
    assert refused.value.details["reason"] == "turn_in_progress"
    other = locks.acquire("bob")  # other agents are not held up
    other.release()
    turn.release()
    turn.release()  # once only: the second is a no-op
    locks.acquire("ann").release()


def test_a_turn_whose_owner_died_lapses_after_its_lifetime(locks: TurnLocks) -> None:
    turn = locks.acquire("ann")
    turn._done.set()  # the owner is gone: nothing renews or releases it
    with pytest.raises(Conflict):
        locks.acquire("ann")
    time.sleep(0.7)
    locks.acquire("ann").release()


def test_a_waiting_turn_gets_the_lock_when_the_first_ends(redis_client: redis.Redis) -> None:
    import threading

    waiting = TurnLocks(redis_client, hold_s=5.0, wait_s=3.0)
    first = waiting.acquire("ann")
    threading.Timer(0.3, first.release).start()
    started = time.monotonic()
    second = waiting.acquire("ann")
    assert 0.2 < time.monotonic() - started < 3.0
    second.release()
