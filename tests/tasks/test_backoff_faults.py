"""Retry delays and the fault-injection rules."""

from __future__ import annotations

import random
import time

import pytest

from vcm.errors import ConfigError, InjectedFailure
from vcm.tasks.backoff import delay_s
from vcm.tasks.faults import Faults, Rule


def test_backoff_grows_exponentially_under_its_cap_with_full_jitter() -> None:
    rand = random.Random(7)
    for attempt in range(12):
        steps = [delay_s(attempt, 0.5, 30.0, rand) for _ in range(200)]
        top = min(30.0, 0.5 * 2**attempt)
        assert all(0.0 <= s <= top for s in steps)
        assert max(steps) > top * 0.8  # the draw spans the whole range (full jitter)
    assert delay_s(10_000, 1.0, 60.0) <= 60.0  # no overflow for absurd attempt numbers


def test_rules_fire_per_agent_a_limited_number_of_times() -> None:
    faults = Faults([Rule("evict.before_summarize", agent_prefix="x-", times=2)])
    for _ in range(2):
        with pytest.raises(InjectedFailure):
            faults.point("evict.before_summarize", "x-1")
    faults.point("evict.before_summarize", "x-1")  # spent
    faults.point("evict.before_summarize", "y-1")  # other prefix
    faults.point("evict.after_commit", "x-2")  # other point
    with pytest.raises(InjectedFailure):
        faults.point("evict.before_summarize", "x-2")  # counted per agent
    assert faults.fired("evict.before_summarize", "x-1") == 2


def test_store_hook_uses_the_scoped_agent_and_sleep_rules_sleep() -> None:
    faults = Faults([Rule("commit_eviction.before_commit", agent_prefix="a"), Rule("p", "sleep", seconds=0.05)])
    faults.store_hook("commit_eviction.before_commit")  # no agent in scope: "" does not match "a"
    with faults.scope("a1"), pytest.raises(InjectedFailure):
        faults.store_hook("commit_eviction.before_commit")
    started = time.monotonic()
    faults.point("p", "any")
    assert time.monotonic() - started >= 0.04


def test_rules_from_the_environment() -> None:
    env = {"VCM_TEST_FAULTS": '[{"point": "evict.after_commit", "action": "sleep", "seconds": 0.1}]'}
    assert Faults.from_env(env).rules == (Rule("evict.after_commit", "sleep", seconds=0.1),)
    assert not Faults.from_env({})
    for bad in ("{", '{"point": 1}', '[{"nope": 1}]', '[{"point": "p", "action": "explode"}]'):
        with pytest.raises(ConfigError):
            Faults.from_env({"VCM_TEST_FAULTS": bad})
