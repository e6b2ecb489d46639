"""Contract of the hot path's idempotency records (put/get/list/expire, and the records that ride
with ``spool_messages``), against every adapter."""

from __future__ import annotations

import pytest

from tests.store.factories import FaultSwitch, msg, now
from vcm.errors import InjectedFailure, ValidationError
from vcm.store.port import MemoryStore
from vcm.store.types import CoreBlockWrite, IdempotencyRecord


def record(agent: str, key: str, result: str = '{"message_id":"m1"}', *, ttl: float = 3600.0) -> IdempotencyRecord:
    return IdempotencyRecord(agent, key, "fp-" + key, result, now() + ttl)


def test_records_are_kept_replaced_by_key_and_per_agent(store: MemoryStore) -> None:
    assert store.get_idempotency("a1", "k1") is None
    store.put_idempotency([record("a1", "k1"), record("a1", "k2"), record("a2", "k1", '{"x":2}')])
    got = store.get_idempotency("a1", "k1")
    assert got is not None and (got.fingerprint, got.result) == ("fp-k1", '{"message_id":"m1"}')
    other = store.get_idempotency("a2", "k1")
    assert other is not None and other.result == '{"x":2}'
    # A claim's settled result replaces its first one; the last of one call wins too.
    store.put_idempotency([record("a1", "k1", '{"pending":true}'), record("a1", "k1", '{"body":{"ok":1}}')])
    again = store.get_idempotency("a1", "k1")
    assert again is not None and again.result == '{"body":{"ok":1}}'
    store.put_idempotency([])  # nothing to do


def test_listing_pages_by_key_and_leaves_out_expired_records(store: MemoryStore) -> None:
    keys = [f"k{i:02d}" for i in range(7)]
    store.put_idempotency([record("a1", k) for k in keys] + [record("a1", "old", ttl=-5.0), record("a2", "z")])
    first = store.list_idempotency("a1", limit=4)
    assert [r.key for r in first] == keys[:4]
    rest = store.list_idempotency("a1", after=first[-1].key, limit=4)
    assert [r.key for r in rest] == keys[4:]
    assert all(r.agent_id == "a1" and r.expires_at > now() for r in first + rest)
    # An expired record reads as absent before any sweep, and the sweep deletes it.
    assert store.get_idempotency("a1", "old") is None
    assert store.expire_idempotency(now()) == 1
    assert store.expire_idempotency(now()) == 0
    assert len(store.list_idempotency("a1")) == 7


def test_keys_the_hot_path_accepts_are_kept_verbatim(store: MemoryStore) -> None:
    odd = ["a key with spaces", "ключ/✓:#?&", " ", "x" * 256]
    store.put_idempotency([record("a1", k) for k in odd])
    for k in odd:
        got = store.get_idempotency("a1", k)
        assert got is not None and got.key == k
    assert sorted(r.key for r in store.list_idempotency("a1")) == sorted(odd)


def test_bad_records_are_refused_and_write_nothing(store: MemoryStore) -> None:
    with pytest.raises(ValidationError):
        store.put_idempotency([record("a1", "k1"), IdempotencyRecord("a1", "", "fp", "{}", now() + 60)])
    with pytest.raises(ValidationError):
        store.put_idempotency([("a1", "k1", "fp", "{}", 1.0)])  # type: ignore[list-item]
    with pytest.raises(ValidationError):
        store.list_idempotency("a1", limit=0)
    assert store.get_idempotency("a1", "k1") is None


def test_spooled_messages_carry_their_records_in_one_write(store: MemoryStore, faults: FaultSwitch) -> None:
    store.put_agent("a1", {})
    faults.armed.add("spool_messages.before_commit")
    with pytest.raises(InjectedFailure):
        store.spool_messages([msg("a1", 1)], idempotency=[record("a1", "k1")])
    # Aborted together: neither the message nor its record.
    assert store.get_messages("a1", ["m0001"]) == [] and store.get_idempotency("a1", "k1") is None
    faults.armed.clear()
    assert store.spool_messages([msg("a1", 1)], idempotency=[record("a1", "k1")]) == 1
    assert store.get_messages("a1", ["m0001"]) and store.get_idempotency("a1", "k1") is not None
    # Records alone (the message stored already) are written too.
    assert store.spool_messages([msg("a1", 1)], idempotency=[record("a1", "k2")]) == 0
    assert store.get_idempotency("a1", "k2") is not None


def test_deleting_the_agent_removes_its_records_and_core_records_stay_apart(store: MemoryStore) -> None:
    store.put_agent("a1", {})
    store.put_idempotency([record("a1", "k1"), record("a2", "k1")])
    # put_core's own record under the same key is another scope: neither shadows the other.
    store.put_core(CoreBlockWrite("a1", "b1", "working", "text", 3), None, "k1")
    got = store.get_idempotency("a1", "k1")
    assert got is not None and got.fingerprint == "fp-k1"
    assert [r.key for r in store.list_idempotency("a1")] == ["k1"]
    store.delete_agent("a1")
    assert store.get_idempotency("a1", "k1") is None and store.list_idempotency("a1") == []
    assert store.get_idempotency("a2", "k1") is not None
