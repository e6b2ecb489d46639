"""The incarnation fence of the ArangoDB adapter: its AQL (pure, unit-tested) and the control flow
of fenced writes over the in-memory fake (which executes no AQL: here it answers the fence query
from the agent records it holds). The contract suite (tests/store/test_contract_fence.py) runs the
same semantics against a server when ``VCM_TEST_ARANGO_URL`` is set."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from arango.exceptions import ArangoServerError

from tests.store.factories import FaultSwitch
from tests.store.fake_arango import FakeDB, server_error
from tests.store.test_arango_adapter_fake import commit, msg
from vcm.errors import AgentFenced, RevConflict
from vcm.store.arango import names
from vcm.store.arango.adapter import ArangoStore
from vcm.store.arango.agents import agent_key
from vcm.store.arango.aql import agents as aql_agents
from vcm.store.types import IdempotencyRecord

World = tuple[ArangoStore, FakeDB, FaultSwitch]


def test_the_fence_updates_the_records_that_hold_the_incarnation_and_binds_everything() -> None:
    q = aql_agents.fence(["a1:agent"], 'x" RETURN 1 //', 5.0)
    assert q.text.startswith(f"FOR a IN {names.CORE}\n")
    assert 'a._key IN @keys AND a.kind == "agent"' in q.text
    assert 'NOT_NULL(a.incarnation, "") == @incarnation' in q.text  # no incarnation reads ""
    # the write is what makes a concurrent delete of the record conflict with the commit
    assert f"UPDATE a WITH {{ fenced_at: @now }} IN {names.CORE}" in q.text
    assert q.text.rstrip().endswith("RETURN NEW.agent_id")
    assert q.bind_vars == {"keys": ["a1:agent"], "incarnation": 'x" RETURN 1 //', "now": 5.0}
    assert "RETURN 1 //" not in q.text


def answer_fence(rw: FakeDB) -> list[tuple[str, dict[str, Any]]]:
    """Answer the fence query as the server would, from the fake's agent records; the fence
    queries seen, in order."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def answers(query: str, bind: dict[str, Any]) -> list[Any] | None:
        if f"INTO {names.IDEMPOTENCY}" in query:
            return []  # the fake cannot run the records' upsert; its control flow is what counts
        if "fenced_at" not in query:
            return None
        seen.append((query, bind))
        records = rw.data.get(names.CORE, {})
        return [
            records[k]["agent_id"]
            for k in bind["keys"]
            if k in records and (records[k].get("incarnation") or "") == bind["incarnation"]
        ]

    rw.on_query = answers
    return seen


def test_a_fenced_commit_runs_the_fence_first_and_aborts_for_another_incarnation(world: World) -> None:
    store, rw, _ = world
    seen = answer_fence(rw)
    store.put_agent("a", {}, incarnation="now")
    rw.log.clear()
    with pytest.raises(AgentFenced):
        store.commit_eviction(replace(commit("a", 1, 3, None), incarnation="old"))
    assert rw.log == [f"begin {sorted(names.EVICTION_WRITE)}", "abort"]
    assert seen[0][1]["keys"] == [agent_key("a")] and not rw.data.get(names.MESSAGES)
    rw.log.clear()
    done = store.commit_eviction(replace(commit("a", 1, 3, None), incarnation="now"))
    assert not done.replayed and rw.log == [f"begin {sorted(names.EVICTION_WRITE)}", "commit"]


def test_fenced_single_writes_run_in_a_transaction_that_writes_the_agent_record(world: World) -> None:
    store, rw, _ = world
    answer_fence(rw)
    store.put_agent("a", {}, incarnation="now")
    record = IdempotencyRecord("a", "k", "fp", "{}", 4_000_000_000.0)
    rw.log.clear()
    store.put_idempotency([record])  # unfenced: one query, no transaction (as before)
    assert rw.log == []
    store.put_idempotency([record], incarnation="now")
    assert rw.log == [f"begin {sorted([names.CORE, names.IDEMPOTENCY])}", "commit"]
    rw.log.clear()
    with pytest.raises(AgentFenced):
        store.spool_messages([msg("a", 1)], incarnation="old")
    assert rw.log == [f"begin {sorted([names.MESSAGES, names.CORE])}", "abort"]
    del rw.data[names.CORE][agent_key("a")]  # deleted (the fake runs no REMOVE query)
    with pytest.raises(AgentFenced):
        store.put_idempotency([record], incarnation="now")


def test_a_delete_that_meets_a_fenced_write_in_flight_removes_the_record_once_it_ended(world: World) -> None:
    """The fence's update holds the record until the write's transaction ends: the delete's removal
    of the record meets a write-write conflict meanwhile, and tries again."""
    store, rw, _ = world
    store.put_agent("a", {}, incarnation="now")
    held = [2]  # the in-flight write ends after two tries of the delete
    removals: list[str] = []

    def answers(query: str, bind: dict[str, Any]) -> list[Any] | None:
        if query.startswith("FOR id IN @ids") and "REMOVE" in query and bind.get("@collection") == names.CORE:
            removals.append(query)
            if held[0]:
                held[0] -= 1
                raise server_error(ArangoServerError, 409, 1200, "write-write conflict")
            rw.data[names.CORE].pop(agent_key("a"), None)  # the fake runs no REMOVE query
            return [1]
        return None

    rw.on_query = answers
    assert store.delete_agent("a").counts.get("agents") == 1
    assert len(removals) == 3 and agent_key("a") not in rw.data[names.CORE]
    held[0] = 100  # a write that never ends: the delete gives up, saying so
    store.put_agent("a", {}, incarnation="again")
    with pytest.raises(RevConflict):
        store.delete_agent("a")
