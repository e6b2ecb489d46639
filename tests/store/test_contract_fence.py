"""Contract of the incarnation fence, against every adapter: a cold-path write names the agent's
incarnation and lands only while the agent record exists and holds it, checked in the write's own
transaction (AgentFenced, nothing written, otherwise)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from tests.store.factories import chunk, eviction, msg
from vcm.errors import AgentFenced, NotFound
from vcm.store.port import MemoryStore
from vcm.store.types import (
    Edge,
    Fact,
    FactQuery,
    IdempotencyRecord,
    MemoryEvent,
    message_node,
    summary_node,
)

A = "a1"
FAR = 4_000_000_000.0  # an expiry far ahead


def writes(store: MemoryStore, inc: str | None) -> dict[str, Callable[[], object]]:
    """Each fenced write of agent A, carrying ``inc``."""
    return {
        "spool_messages": lambda: store.spool_messages(
            [msg(A, 1)],
            events=[MemoryEvent(A, "append", {"n": 1}, event_id="ev-spool")],
            idempotency=[IdempotencyRecord(A, "k1", "fp", "{}", FAR)],
            incarnation=inc,
        ),
        "commit_eviction": lambda: store.commit_eviction(replace(eviction(A, 1, [msg(A, 2)], None), incarnation=inc)),
        "put_idempotency": lambda: store.put_idempotency(
            [IdempotencyRecord(A, "k2", "fp", "{}", FAR)], incarnation=inc
        ),
        "ingest_archival": lambda: store.ingest_archival([chunk(A, "doc", 0, [1.0, 0.0])], incarnation=inc),
        "put_fact": lambda: store.put_fact(Fact(A, "f1", "agent", "preference", "likes tea"), None, incarnation=inc),
        "append_event": lambda: store.append_event(MemoryEvent(A, "note", {}, event_id="ev-1"), incarnation=inc),
        "add_edge": lambda: store.add_edge(
            Edge("cites", summary_node(A), message_node(A, "m0001"), A), incarnation=inc
        ),
    }


def traces(store: MemoryStore) -> dict[str, object]:
    """What of agent A the store holds, write by write."""
    return {
        "messages": store.count_messages(A),
        "batches": store.committed_batches(A),
        "idempotency": [r.key for r in store.list_idempotency(A)],
        "archival": len(store.get_archival(A, "doc")),
        "facts": len(store.query_facts(A, FactQuery(statuses=None))),
        "events": sorted(e.event_id or "" for e in store.query_events(A, limit=100).items),
        "edges": store.traverse(summary_node(A), ["cites"]),
    }


EMPTY = {"messages": 0, "batches": [], "idempotency": [], "archival": 0, "facts": 0, "events": [], "edges": []}


def test_records_keep_the_incarnation_they_were_created_with(store: MemoryStore) -> None:
    assert store.put_agent(A, {"model": "m"}, incarnation="one").incarnation == "one"
    again = store.put_agent(A, {"model": "m2"}, incarnation="two")  # an update keeps it
    assert again.incarnation == "one" and store.get_agent(A).incarnation == "one"
    assert [r.incarnation for r in store.list_agents()] == ["one"]
    store.delete_agent(A)
    assert store.put_agent(A, {"model": "m"}, incarnation="two").incarnation == "two"  # a new agent
    assert store.put_agent("legacy", {}).incarnation == ""


NAMES = [
    "spool_messages",
    "commit_eviction",
    "put_idempotency",
    "ingest_archival",
    "put_fact",
    "append_event",
    "add_edge",
]


def test_every_fenced_write_is_named() -> None:
    assert set(NAMES) == set(writes(None, None))  # type: ignore[arg-type]  # nothing is called


@pytest.mark.parametrize("name", NAMES)
def test_a_write_for_another_incarnation_writes_nothing(store: MemoryStore, name: str) -> None:
    store.put_agent(A, {}, incarnation="now")
    with pytest.raises(AgentFenced) as caught:
        writes(store, "before")[name]()
    assert isinstance(caught.value, NotFound) and caught.value.details["agent_id"] == A
    assert traces(store) == EMPTY


@pytest.mark.parametrize("name", NAMES)
def test_a_write_for_a_deleted_agent_writes_nothing(store: MemoryStore, name: str) -> None:
    store.put_agent(A, {}, incarnation="now")
    store.delete_agent(A)
    with pytest.raises(AgentFenced):
        writes(store, "now")[name]()
    assert traces(store) == EMPTY


def test_writes_of_the_current_incarnation_land_and_unfenced_writes_are_unchanged(store: MemoryStore) -> None:
    store.put_agent(A, {}, incarnation="now")
    for write in writes(store, "now").values():
        write()
    landed = traces(store)
    assert landed["messages"] == 2 and landed["batches"] == [1] and landed["archival"] == 1
    assert landed["idempotency"] == ["k1", "k2"] and landed["facts"] == 1 and landed["edges"]
    # incarnation None checks nothing (callers outside the cold path), even without a record
    store.spool_messages([msg("nobody", 1)])
    assert store.count_messages("nobody") == 1


def test_a_record_made_before_incarnations_is_fenced_as_the_empty_incarnation(store: MemoryStore) -> None:
    store.put_agent(A, {})
    store.spool_messages([msg(A, 1)], incarnation="")
    with pytest.raises(AgentFenced):
        store.spool_messages([msg(A, 2)], incarnation="something")
    assert store.count_messages(A) == 1


def test_message_vectors_are_fenced_too(store: MemoryStore) -> None:
    store.put_agent(A, {}, incarnation="now")
    store.spool_messages([msg(A, 1)], incarnation="now")
    with pytest.raises(AgentFenced):
        store.put_message_vectors(A, [("m0001", [1.0, 0.0])], "v1", incarnation="before")
    assert store.message_vector_ids(A, ["m0001"], "v1") == set()
    assert store.put_message_vectors(A, [("m0001", [1.0, 0.0])], "v1", incarnation="now") == 1
    store.delete_agent(A)
    with pytest.raises(AgentFenced):
        store.put_message_vectors(A, [("m0001", [1.0, 0.0])], "v1", incarnation="now")
