"""The ArangoDB adapter's users and domains over the in-memory fake (tests/store/fake_arango.py):
control flow only — which documents it writes, which collections a transaction declares, and that a
write to shared memory runs the principal's fence first and writes nothing when the fence answers
nothing. The AQL itself is checked as text (test_arango_aql_principals.py) and against a server by
the contract tests (test_contract_principals.py) when one is configured."""

from __future__ import annotations

from typing import Any

import pytest

from tests.store.factories import FaultSwitch
from tests.store.fake_arango import FakeDB
from vcm.errors import AgentFenced, NotFound
from vcm.store.arango import names
from vcm.store.arango.adapter import ArangoStore
from vcm.store.arango.base import fence_key
from vcm.store.principals import Principal, holder_id
from vcm.store.types import Fact

World = tuple[ArangoStore, FakeDB, FaultSwitch]


def shared_fact(fact_id: str = "f1") -> Fact:
    return Fact(agent_id=holder_id("user", "alice"), fact_id=fact_id, scope="user", type="sticky", value="tea")


def test_a_principal_is_a_core_memory_record_keyed_by_its_holder_id(world: World) -> None:
    store, rw, _ = world
    first = store.put_principal(Principal("user", "alice", "i1"))
    doc = rw.data[names.CORE][fence_key("user:alice")]
    assert (doc["kind"], doc["agent_id"], doc["principal_kind"], doc["name"]) == (
        "principal",
        "user:alice",
        "user",
        "alice",
    )
    assert store.put_principal(Principal("user", "alice", "i2")).incarnation == first.incarnation == "i1"
    assert store.get_principal("user", "alice").holder == "user:alice"
    with pytest.raises(NotFound):
        store.get_principal("domain", "alice")


def test_a_shared_fact_is_written_only_past_its_principals_fence(world: World) -> None:
    store, rw, _ = world
    answers: list[list[Any]] = [[]]
    rw.on_query = lambda q, b: answers[0] if "p.kind == @doc_kind" in q and "fenced_at" in q else None
    with pytest.raises(AgentFenced):
        store.put_fact(shared_fact(), None)
    assert not rw.data.get(names.FACTS)  # nothing written
    fence = next(b for q, b in rw.queries if "fenced_at" in q)
    assert fence["key"] == fence_key("user:alice") and fence["incarnation"] is None
    answers[0] = ["user:alice"]
    stored = store.put_fact(shared_fact(), None)
    assert stored.agent_id == "user:alice" and len(rw.data[names.FACTS]) == 1


def test_an_agents_principals_are_checked_and_replaced_in_its_record(world: World) -> None:
    store, _, _ = world
    store.put_agent("a1", {"model": "m"})
    with pytest.raises(NotFound):
        store.set_agent_principals("a1", user_id="alice", domain=None)
    store.put_principal(Principal("user", "alice", "i1"))
    record = store.set_agent_principals("a1", user_id="alice", domain=None)
    assert (record.user_id, record.domain) == ("alice", None)
    assert store.get_agent("a1").user_id == "alice"
    with pytest.raises(NotFound):
        store.set_agent_principals("ghost", user_id="alice", domain=None)


def test_deleting_a_principal_removes_its_record_first_then_its_memory(world: World) -> None:
    store, rw, _ = world
    store.put_principal(Principal("domain", "support", "i1"))
    rw.queries.clear()
    store.delete_principal("domain", "support")
    sent = [(q, b) for q, b in rw.queries]
    assert sent[0][1]["ids"] == [f"{names.CORE}/{fence_key('domain:support')}"]  # the fence's record first
    removed = [b["@collection"] for _, b in sent if b.get("agent_id") == "domain:support"]
    assert removed[0] == names.FACTS and names.STATE in removed
    assert any("a.domain == @name" in q and b["name"] == "support" for q, b in sent)  # agents detached
