"""Contract of users and domains (issue 37) against every adapter: principal records, an agent's
principals, shared facts keyed by a holder id and read beside the agent's own, and a principal's
delete with its fence."""

from __future__ import annotations

import pytest

from vcm.errors import AgentFenced, NotFound, ValidationError
from vcm.store.port import MemoryStore
from vcm.store.principals import Principal, holder_id
from vcm.store.types import Fact, FactQuery


def fact(holder: str, fact_id: str, value: str, scope: str = "agent") -> Fact:
    return Fact(agent_id=holder, fact_id=fact_id, scope=scope, type="learned", value=value, updated_at=1.0)


def test_principal_records_are_created_once_listed_and_kept_apart_from_agents(store: MemoryStore) -> None:
    first = store.put_principal(Principal("user", "alice", "inc1"))
    again = store.put_principal(Principal("user", "alice", "inc2"))
    assert (again.incarnation, again.created_at) == ("inc1", first.created_at)  # an existing one is kept
    store.put_principal(Principal("domain", "support", "inc3"))
    assert [p.name for p in store.list_principals("user")] == ["alice"]
    assert store.get_principal("domain", "support").holder == "domain:support"
    assert store.list_agents() == []
    with pytest.raises(NotFound):
        store.get_principal("domain", "alice")
    with pytest.raises(ValidationError):
        store.list_principals("team")


def test_an_agents_principals_name_existing_ones(store: MemoryStore) -> None:
    store.put_agent("a1", {"model": "m"})
    store.put_principal(Principal("user", "alice", "i"))
    with pytest.raises(NotFound):
        store.set_agent_principals("a1", user_id="bob", domain=None)
    with pytest.raises(NotFound):
        store.set_agent_principals("ghost", user_id="alice", domain=None)
    record = store.set_agent_principals("a1", user_id="alice", domain=None)
    assert (record.user_id, record.domain) == ("alice", None)
    assert store.get_agent("a1").user_id == "alice"
    assert store.put_agent("a1", {"model": "n"}).user_id == "alice"  # a config write keeps them


def test_shared_facts_are_read_beside_the_agents_own_only_when_named(store: MemoryStore) -> None:
    store.put_agent("a1", {"model": "m"})
    store.put_principal(Principal("user", "alice", "i"))
    store.put_principal(Principal("user", "bob", "j"))
    alice, bob = holder_id("user", "alice"), holder_id("user", "bob")
    store.put_fact(fact("a1", "f1", "own fact about tea"), None)
    store.put_fact(fact(alice, "f2", "alice likes tea", "user"), None)
    store.put_fact(fact(bob, "f3", "bob likes tea", "user"), None)
    assert [f.fact_id for f in store.query_facts("a1", FactQuery())] == ["f1"]
    both = store.query_facts("a1", FactQuery(holders=(alice,)))
    assert sorted((f.fact_id, f.agent_id, f.scope) for f in both) == [("f1", "a1", "agent"), ("f2", alice, "user")]
    hits = store.search_facts("a1", "tea", None, FactQuery(holders=(alice,)))
    assert sorted(h.fact.fact_id for h in hits) == ["f1", "f2"]
    assert [f.fact_id for f in store.query_facts("a1", FactQuery(holders=(alice,), scope="user"))] == ["f2"]
    assert store.get_fact(alice, "f2").value == "alice likes tea"
    with pytest.raises(NotFound):
        store.get_fact("a1", "f2")


def test_deleting_a_principal_removes_its_memory_and_fences_later_writes(store: MemoryStore) -> None:
    store.put_agent("a1", {"model": "m"})
    store.put_principal(Principal("domain", "support", "i1"))
    store.set_agent_principals("a1", user_id=None, domain="support")
    support = holder_id("domain", "support")
    store.put_fact(fact(support, "f1", "refunds need a manager", "domain"), None)
    store.put_fact(fact(support, "f2", "tickets close in a day", "domain"), None, incarnation="i1")
    with pytest.raises(AgentFenced):  # another incarnation's write
        store.put_fact(fact(support, "f3", "late", "domain"), None, incarnation="old")
    assert store.delete_principal("domain", "support") == 2
    assert store.query_facts("a1", FactQuery(holders=(support,), statuses=None)) == []
    assert store.get_agent("a1").domain is None
    with pytest.raises(AgentFenced):
        store.put_fact(fact(support, "f4", "after the delete", "domain"), None)
    with pytest.raises(AgentFenced):  # never created
        store.put_fact(fact(holder_id("user", "nobody"), "f5", "x", "user"), None)
    assert store.delete_principal("domain", "support") == 0
