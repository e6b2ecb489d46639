"""The AQL of the hot path's idempotency records, checked as text (no server needed): values only
in bind variables, the listing keyset-paged by key over unexpired records of one scope, and the
documents keyed so that a write replaces by (agent, key)."""

from __future__ import annotations

import pytest

from vcm.store.arango import names
from vcm.store.arango.aql import idempotency as aql_idem
from vcm.store.arango.aql import tombstones as aql_tombstones
from vcm.store.arango.idempotency import record_docs, record_key, record_of
from vcm.store.types import IdempotencyRecord

NASTY = ['x" RETURN 1 //', "a` REMOVE d IN messages", "@@users RETURN 1", "}} LET x = 1"]


@pytest.mark.parametrize("value", NASTY)
def test_user_values_travel_only_as_bind_variables(value: str) -> None:
    listing = aql_idem.list_records(value, value, 10.0, 5)
    assert value not in listing.text
    assert listing.bind_vars == {"agent_id": value, "scope": "hot", "after": value, "now": 10.0, "limit": 5}
    docs = record_docs([IdempotencyRecord("a1", value, "fp", value, 20.0)], 1.0)
    upsert = aql_idem.upsert_records(docs)
    assert value not in upsert.text and upsert.bind_vars["docs"] == docs


def test_the_listing_pages_by_key_and_skips_expired_records() -> None:
    text = aql_idem.list_records("a1", None, 10.0, 100).text
    assert f"FOR r IN {names.IDEMPOTENCY}" in text
    assert "r.key > @after" in text and "SORT r.key" in text and "LIMIT @limit" in text
    assert "r.expires_at >= @now" in text and "r.scope == @scope" in text
    assert aql_idem.list_records("a1", None, 10.0, 100).bind_vars["after"] == ""


def test_writes_replace_by_key_and_expiry_removes_only_records_with_an_expiry() -> None:
    assert 'overwriteMode: "replace"' in aql_idem.upsert_records([]).text
    expire = aql_idem.expire_records(5.0)
    assert "r.expires_at != null AND r.expires_at < @now" in expire.text and "REMOVE r IN" in expire.text
    assert expire.bind_vars == {"now": 5.0}


def test_documents_round_trip_and_keys_stay_apart_from_core_writes() -> None:
    rec = IdempotencyRecord("a1", "k 1/✓", "fp", '{"message_id":"m1"}', 99.0)
    (doc,) = record_docs([rec], 1.0)
    assert doc["_key"] == record_key("a1", "k 1/✓") and doc["scope"] == "hot"
    assert record_of(doc) == rec
    assert record_key("a1", "k") != record_key("a2", "k")


def test_tombstones_travel_as_bind_variables_and_a_repeat_keeps_the_first() -> None:
    put = aql_tombstones.put_tombstone("k", NASTY[0], "message", NASTY[1], 3.0)
    assert NASTY[0] not in put.text and NASTY[1] not in put.text
    assert 'overwriteMode: "ignore"' in put.text and f"INTO {names.TOMBSTONES}" in put.text
    doc = {"_key": "k", "agent_id": NASTY[0], "kind": "message", "item_id": NASTY[1], "forgotten_at": 3.0}
    assert put.bind_vars["doc"] == doc
    listing = aql_tombstones.list_tombstones(NASTY[2])
    assert NASTY[2] not in listing.text and listing.bind_vars == {"agent_id": NASTY[2]}


def test_the_spools_tombstone_check_travels_as_bind_variables() -> None:
    query = aql_tombstones.tombstoned_messages([NASTY[0]], [NASTY[1], NASTY[2]])
    assert all(n not in query.text for n in NASTY[:3])
    assert query.bind_vars == {"agent_ids": [NASTY[0]], "message_ids": [NASTY[1], NASTY[2]]}
    assert f"FOR t IN {names.TOMBSTONES}" in query.text and 't.kind == "message"' in query.text
