"""The pure modules both adapters share: paging rules and write rules."""

from __future__ import annotations

import pytest

from vcm.errors import IdempotencyMismatch, StoreUnavailable, ValidationError
from vcm.store import paging, semantics
from vcm.store.cursor import decode_cursor, encode_cursor, vector_digest
from vcm.store.types import CoreBlock, CoreBlockWrite, EvictionCommit, MemoryEvent, StoredMessage

SECRET = b"k" * 32


def test_snapshot_pages_cut_the_stored_list_and_chain_cursors() -> None:
    ranked = [(i, float(10 - i)) for i in range(5)]
    first = paging.cut(ranked, 0, 2, secret=SECRET, kind="recall", snapshot_id="s1", fingerprint="f")
    assert first.items == ranked[:2] and first.next_cursor is not None

    payload = decode_cursor(first.next_cursor, SECRET, kind="recall")
    paging.check_fingerprint(payload, "f")
    assert paging.snapshot_position(payload) == ("s1", 2)
    last = paging.cut(ranked, 4, 2, secret=SECRET, kind="recall", snapshot_id="s1", fingerprint="f")
    assert last.items == ranked[4:] and last.next_cursor is None

    with pytest.raises(ValidationError, match="other arguments"):
        paging.check_fingerprint(payload, "g")
    with pytest.raises(ValidationError, match="damaged"):
        paging.snapshot_position({"s": "s1", "o": -1})


def test_a_snapshot_serves_only_its_own_unexpired_search() -> None:
    stored = {"agent_id": "a", "kind": "recall", "expires_at": 100.0, "items": "[]"}
    assert paging.check_snapshot(stored, agent_id="a", kind="recall", now=50.0, ttl_s=60) is stored
    with pytest.raises(ValidationError, match="expired"):
        paging.check_snapshot(stored, agent_id="a", kind="recall", now=101.0, ttl_s=60)
    with pytest.raises(ValidationError, match="expired"):
        paging.check_snapshot(None, agent_id="a", kind="recall", now=0.0, ttl_s=60)
    with pytest.raises(ValidationError, match="another agent"):
        paging.check_snapshot(stored, agent_id="b", kind="recall", now=50.0, ttl_s=60)
    with pytest.raises(ValidationError, match="another agent"):
        paging.check_snapshot(stored, agent_id="a", kind="archival", now=50.0, ttl_s=60)


def test_event_keyset_cursors_round_trip_and_refuse_other_queries() -> None:
    cursor = paging.keyset_cursor(SECRET, "f", 12.5, "s", 7)
    assert paging.keyset_position(cursor, SECRET, "f", "s", int) == (12.5, 7)
    with pytest.raises(ValidationError, match="other arguments"):
        paging.keyset_position(cursor, SECRET, "g", "s", int)
    with pytest.raises(ValidationError, match="damaged"):
        paging.keyset_position(cursor, SECRET, "f", "s", str)
    with pytest.raises(ValidationError):
        paging.keyset_position(encode_cursor({"k": "recall"}, SECRET), SECRET, "f", "s", int)


def test_vector_digest_is_the_float32_view() -> None:
    assert vector_digest([0.1, 0.2]) == vector_digest([0.1000000001, 0.2])
    assert vector_digest([0.1, 0.2]) != vector_digest([0.2, 0.1])


def test_event_ids_are_given_derived_from_the_key_or_fresh() -> None:
    assert semantics.event_id(MemoryEvent("a", "append", {}, event_id="e1")) == "e1"
    keyed = MemoryEvent("a", "append", {}, idempotency_key="k")
    assert semantics.event_id(keyed) == semantics.event_id(keyed) and semantics.event_id(keyed).startswith("key-")
    anonymous = MemoryEvent("a", "append", {})
    assert semantics.event_id(anonymous) != semantics.event_id(anonymous)
    assert semantics.evict_event_id("a", 3) == "a:evict:3"


def test_evict_payload_and_distinct_batches() -> None:
    m = StoredMessage("a", "m1", 0, "user", "hi", 1, 1.0)
    batch = semantics.distinct([m, m, StoredMessage("a", "m2", 1, "user", "yo", 1, 2.0)])
    assert [x.message_id for x in batch] == ["m1", "m2"]
    commit = EvictionCommit("a", 4, batch, "sum", 1, None, event={"why": "full"})
    assert semantics.evict_event_payload(commit, batch, "r9") == {
        "why": "full",
        "batch_id": 4,
        "message_ids": ["m1", "m2"],
        "summary_rev": "r9",
    }


def test_core_write_replays_return_the_first_result_or_refuse_new_content() -> None:
    write = CoreBlockWrite("a", "persona", "system", "hello", 1)
    content = semantics.core_write_fingerprint(write)
    block = CoreBlock("a", "persona", "system", "hello", 1, False, "7", 3.0, {"x": 1})
    stored = semantics.core_block_to_json(block)
    assert semantics.replayed_core_write(content, stored, content, "key") == block
    other = semantics.core_write_fingerprint(CoreBlockWrite("a", "persona", "system", "bye", 1))
    with pytest.raises(IdempotencyMismatch):
        semantics.replayed_core_write(other, stored, content, "key")


def test_rev_conflicts_say_how_to_recover() -> None:
    assert "create it" in semantics.rev_conflict("x", "1", None).message
    assert "pass its rev" in semantics.rev_conflict("x", None, "1").message
    err = semantics.rev_conflict("x", "1", "2")
    assert "read it again" in err.message and err.details == {"expected_rev": "1", "current_rev": "2"}


def test_fault_hooks_abort_as_store_failures() -> None:
    semantics.fire_fault(None, "anywhere")

    def boom(point: str) -> None:
        raise RuntimeError(point)

    with pytest.raises(StoreUnavailable, match="aborted at here"):
        semantics.fire_fault(boom, "here")
