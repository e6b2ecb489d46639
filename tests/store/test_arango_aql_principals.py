"""The AQL of users, domains and shared facts (issue 37), checked as text: names only in bind
variables, the fence's incarnation optional, and a shared read filtering on the owners it names."""

from __future__ import annotations

from vcm.store.arango import names
from vcm.store.arango.aql import facts as aql_facts
from vcm.store.arango.aql import principals as aql_principals

NASTY = 'x" RETURN 1 //'


def test_a_read_with_holders_filters_on_the_owner_list_and_one_without_on_the_agent() -> None:
    own = aql_facts.query_facts("a1", None, None, None, ["active"], None, None, (), 10, False)
    assert "f.agent_id == @agent_id" in own.text and "owners" not in own.bind_vars
    shared = aql_facts.query_facts(
        "a1", None, None, None, ["active"], None, None, (), 10, False, holders=["user:alice", NASTY, "a1"]
    )
    assert "f.agent_id IN @owners" in shared.text and NASTY not in shared.text
    assert shared.bind_vars["owners"] == ["a1", "user:alice", NASTY]  # the agent first, no repeats


def test_principal_queries_keep_names_in_bind_variables() -> None:
    listed = aql_principals.list_principals(NASTY)
    assert NASTY not in listed.text and listed.bind_vars["kind"] == NASTY
    fence = aql_principals.fence_holder(NASTY, None, 1.0)
    assert NASTY not in fence.text and fence.bind_vars["incarnation"] is None
    assert "@incarnation == null OR p.incarnation == @incarnation" in fence.text
    assert f"UPDATE p WITH {{ fenced_at: @now }} IN {names.CORE}" in fence.text  # the write lock
    for kind, attribute in (("user", "user_id"), ("domain", "domain")):
        detach = aql_principals.detach_agents(kind, NASTY)
        assert f"a.{attribute} == @name" in detach.text and NASTY not in detach.text
