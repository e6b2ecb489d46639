"""The chaos run's counting rules (vcm.eval.chaos_cases), without processes: a message still in a
pending batch is pending, not lost; a loss inside the contract's window before a FLUSHDB or a
Redis crash is counted apart from a loss; retries of acknowledged keys replay or append once."""

from __future__ import annotations

import math

from vcm.eval.chaos_cases import (
    Classified,
    LossWindow,
    Retried,
    classify,
    cross_agent_rows,
    holds_old,
    old_content,
    retry_outcomes,
    twin_violations,
)
from vcm.eval.chaos_load import Ack

WINDOW = LossWindow(flushdb_s=2.5, redis_crash_s=1.5, in_flight_s=0.5)


def ack(n: int, acked_at: float, agent: str = "a") -> Ack:
    return Ack(agent, f"k{n}", f"text {n}", f"m{n}", n, 1, False, None, 0.01, acked_at=acked_at)


def test_kept_pending_and_lost_are_told_apart() -> None:
    acks = [ack(1, 10.0), ack(2, 11.0), ack(3, 12.0), ack(4, 13.0)]
    found = classify(
        acks,
        stored={"a": {"m1": "text 1"}},
        fifo={"a": {"m2": "text 2"}},
        pending={"a": {"m3": "text 3"}},  # in a batch the cold path had not committed
        faults=[],
        window=WINDOW,
    )
    assert found.kept == 2
    assert [a.key for a in found.pending] == ["k3"]
    assert [a.key for a in found.lost] == ["k4"] and found.lost_within_window == []


def test_the_same_id_with_other_content_is_not_kept() -> None:
    found = classify(
        [ack(1, 10.0)], stored={"a": {"m1": "another text"}}, fifo={}, pending={}, faults=[], window=WINDOW
    )
    assert [a.key for a in found.lost] == ["k1"]


def test_a_loss_inside_the_flushdb_window_is_within_the_contract() -> None:
    acks = [ack(1, 96.0), ack(2, 98.0), ack(3, 99.9), ack(4, 100.3), ack(5, 101.0)]
    found = classify(acks, stored={}, fifo={}, pending={}, faults=[(100.0, "flushdb")], window=WINDOW)
    # 96.0 is 4 s before the flush: outside its 2.5 s window; 100.3 was in flight (acknowledged
    # 0.3 s after it); 101.0 came after the flush and should have been kept.
    assert [a.key for a in found.lost_within_window] == ["k2", "k3", "k4"]
    assert [a.key for a in found.lost] == ["k1", "k5"]


def test_a_redis_crash_has_its_own_shorter_window_and_other_faults_none() -> None:
    acks = [ack(1, 98.0), ack(2, 99.0)]
    faults = [(100.0, "redis_crash"), (100.0, "worker_kill")]
    found = classify(acks, stored={}, fifo={}, pending={}, faults=faults, window=WINDOW)
    assert [a.key for a in found.lost_within_window] == ["k2"] and [a.key for a in found.lost] == ["k1"]


def test_an_unbounded_window_takes_everything_before_the_flush() -> None:
    window = LossWindow(flushdb_s=math.inf, redis_crash_s=1.5)
    found = classify([ack(1, 1.0)], stored={}, fifo={}, pending={}, faults=[(100.0, "flushdb")], window=window)
    assert len(found.lost_within_window) == 1 and found.lost == []


def test_retries_replay_kept_keys_and_append_lost_ones_once() -> None:
    kept, lost, dup, moved, failed = ack(1, 0), ack(2, 0), ack(3, 0), ack(4, 0), ack(5, 0)
    classified = Classified(kept=4, lost_within_window=[lost])
    outcomes = retry_outcomes(
        [
            Retried(kept, True, "m1"),
            Retried(lost, False, "m99"),  # appended again, under a new id
            Retried(dup, False, "m100"),  # a kept message appended a second time
            Retried(moved, True, "m7"),  # replayed, but naming another message
            Retried(failed, False, None),
        ],
        classified,
    )
    assert outcomes == {
        "sent": 5,
        "replayed": 1,
        "reappended": 1,
        "duplicated_by_retry": 1,
        "wrong_id": 1,
        "failed": 1,
    }


def test_cross_agent_rows_count_only_the_deleted_agents_texts() -> None:
    old = old_content("x", 3)
    assert holds_old(old) and not holds_old("[chaos x.new.1] Nadia booked the ferry to Bergen.")
    rows = cross_agent_rows(
        {
            "messages": [old, "[chaos x.new.1] Nadia booked the ferry."],
            "facts": ["Oldrik moved to Vetusta."],
            "summary": [],
        }
    )
    assert rows == {"messages": 1, "facts": 1, "summary": 0}


def test_a_twin_whose_first_message_was_lost_within_the_window_is_no_violation() -> None:
    classified = Classified(lost_within_window=[ack(7, 0.0)])
    within = {"agent": "a", "key": "k7", "ids": ["m7", "m1025"], "replayed": [False, False]}
    real = {"agent": "a", "key": "k8", "ids": ["m8", "m9"], "replayed": [False, False]}
    assert twin_violations([within, real], classified) == ([real], [within])
