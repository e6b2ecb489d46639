"""Users and domains through the façade (issue 37): shared memory reaches every agent of its user or
domain and no other, an agent's shared write waits in shadow for promotion, and a deleted principal
leaves nothing behind — on fakeredis and a real SQLite store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from vcm.errors import AgentFenced, Conflict, NotFound, Unauthorized, ValidationError
from vcm.service import MemoryService
from vcm.store import open_store
from vcm.store.audit_names import Actor
from vcm.store.principals import Principal, holder_id
from vcm.store.types import Fact, FactQuery

MODEL = "vcm-demo-2k"
ADMIN = Actor.API_ADMIN


def prompt(svc: MemoryService, agent_id: str, query: str = "") -> str:
    built = svc.build_context(agent_id, query=query, record_use=False)
    return "\n".join(str(m.get("content", "")) for m in built.messages)


@pytest.fixture
def team(svc: MemoryService) -> MemoryService:
    """ann and bob belong to user alice and domain support; cat to user carol and no domain."""
    for agent in ("bob", "cat"):
        svc.create_agent(agent, model=MODEL)
    svc.create_principal("user", "alice", actor=ADMIN)
    svc.create_principal("user", "carol", actor=ADMIN)
    svc.create_principal("domain", "support", actor=ADMIN)
    svc.set_agent_principals("ann", user_id="alice", domain="support", actor=ADMIN)
    svc.set_agent_principals("bob", user_id="alice", domain="support", actor=ADMIN)
    svc.set_agent_principals("cat", user_id="carol", domain=None, actor=ADMIN)
    return svc


def test_a_user_fact_reaches_both_agents_of_the_user_and_not_another_users(team: MemoryService) -> None:
    r = team.remember("ann", "Alice prefers replies in French", type="sticky", scope="user", actor=ADMIN)
    assert r.fact.agent_id == holder_id("user", "alice") and r.fact.status == "active"
    assert "Alice prefers replies in French" in prompt(team, "ann")
    assert f"[fact {r.fact.fact_id}, user]" in prompt(team, "bob")  # marked with its scope
    assert "French" not in prompt(team, "cat")
    assert [f.fact_id for f in team.list_facts("bob")] == [r.fact.fact_id]
    assert team.list_facts("cat") == []
    hits = team.search_facts("bob", "replies French")
    assert [(h.fact.fact_id, h.fact.scope) for h in hits] == [(r.fact.fact_id, "user")]
    assert team.search_facts("cat", "replies French") == []


def test_a_domain_fact_reaches_every_agent_of_the_domain_and_none_outside(team: MemoryService) -> None:
    r = team.remember("bob", "Refunds above 500 EUR need a manager", type="sticky", scope="domain", actor=ADMIN)
    assert r.fact.agent_id == holder_id("domain", "support")
    assert "Refunds above 500 EUR" in prompt(team, "ann") and "Refunds above 500 EUR" in prompt(team, "bob")
    assert "Refunds" not in prompt(team, "cat")
    ws = team.working_set("ann", "refunds manager")
    assert r.fact.fact_id in {i.fact.fact_id for items in ws.sections.values() for i in items}


def test_an_agents_shared_write_stays_shadow_until_consolidation_promotes_it(team: MemoryService) -> None:
    said = team.append("ann", "user", "Remember that my dog is called Biscuit").message_id
    r = team.remember(
        "ann", "Alice's dog is called Biscuit", type="learned", scope="user",
        evidence=[{"kind": "message", "id": said}], actor="api:agent",
    )  # fmt: skip
    assert r.fact.status == "shadow"  # an agent's word on shared memory: no silent promotion
    assert r.fact.evidence[0]["agent_id"] == "ann"
    assert "Biscuit" not in prompt(team, "bob", "dog called")
    assert team.search_facts("bob", "dog Biscuit") == []
    assert team.consolidate("bob")["promoted"] == 1  # the replay test reads ann's message
    assert team.get_fact("bob", r.fact.fact_id).status == "active"
    assert "Biscuit" in prompt(team, "bob", "dog called Biscuit")
    assert "Biscuit" not in prompt(team, "cat", "dog called Biscuit")


def test_another_principals_fact_is_missing_to_an_agent(team: MemoryService) -> None:
    mine = team.remember("cat", "Carol lives in Lyon", type="sticky", scope="user", actor=ADMIN).fact
    with pytest.raises(NotFound) as foreign:
        team.get_fact("ann", mine.fact_id)
    with pytest.raises(NotFound) as missing:
        team.get_fact("ann", "f" + "0" * 20)
    assert str(foreign.value).replace(mine.fact_id, "X") == str(missing.value).replace("f" + "0" * 20, "X")
    assert foreign.value.details == missing.value.details
    assert team.forget_fact("ann", mine.fact_id, actor=ADMIN) is False  # not ann's to reach
    assert team.get_fact("cat", mine.fact_id).value == "Carol lives in Lyon"


def test_only_the_operator_forgets_shared_memory(team: MemoryService) -> None:
    f = team.remember("ann", "Alice is vegetarian", type="sticky", scope="user", actor=ADMIN).fact
    with pytest.raises(Unauthorized):
        team.forget_fact("bob", f.fact_id, actor="api:agent")
    assert team.forget_fact("bob", f.fact_id, actor=ADMIN) is True
    assert team.list_facts("ann") == []


def test_dedup_and_conflicts_apply_within_a_scope(team: MemoryService) -> None:
    a = team.remember("ann", "Alice's city is Paris", type="learned", scope="user", key="city", actor=ADMIN)
    b = team.remember("bob", "Alice's city is Paris", type="learned", scope="user", key="city", actor=ADMIN)
    assert (a.decision, b.decision, b.fact.fact_id) == ("NEW", "MATCH", a.fact.fact_id)
    own = team.remember("ann", "Alice's city is Paris", type="learned", key="city", actor=ADMIN)
    assert own.decision == "NEW" and own.fact.agent_id == "ann"  # agent scope: its own memory
    c = team.remember("bob", "Alice's city is Rome", type="learned", scope="user", key="city", actor=ADMIN)
    assert c.decision == "CONFLICT" and [m.fact_id for m in c.conflicts] == [a.fact.fact_id]


def test_deleting_the_user_removes_its_facts_from_every_agents_view(team: MemoryService) -> None:
    f = team.remember("ann", "Alice's passport number is private", type="sticky", scope="user", actor=ADMIN).fact
    kept = team.remember("ann", "ann keeps this", type="sticky", actor=ADMIN).fact
    assert team.delete_principal("user", "alice", actor=ADMIN) == {"facts": 1}
    for agent in ("ann", "bob"):
        assert "passport" not in prompt(team, agent)
        assert team.agent_principals(agent) == {"user_id": None, "domain": "support"}
        with pytest.raises(NotFound):
            team.get_fact(agent, f.fact_id)
    assert [x.fact_id for x in team.list_facts("ann")] == [kept.fact_id]
    assert team.store.query_facts(holder_id("user", "alice"), FactQuery(statuses=None)) == []
    with pytest.raises(ValidationError):  # ann has no user now: a user fact has nowhere to live
        team.remember("ann", "x", type="sticky", scope="user", actor=ADMIN)
    # A write begun before the delete (it knew the holder) is fenced: nothing is left or written.
    late = Fact(agent_id=holder_id("user", "alice"), fact_id="flate", scope="user", type="sticky", value="late")
    with pytest.raises(AgentFenced):
        team.store.put_fact(late, None)
    assert team.list_principals("user") == [p for p in team.list_principals("user") if p.name == "carol"]
    assert team.delete_principal("user", "alice") == {}  # idempotent


def test_a_recreated_user_fences_writes_of_the_old_one(team: MemoryService) -> None:
    old = team.get_principal("user", "alice")
    team.delete_principal("user", "alice")
    team.create_principal("user", "alice")
    late = Fact(agent_id=old.holder, fact_id="flate", scope="user", type="sticky", value="late")
    with pytest.raises(AgentFenced):
        team.store.put_fact(late, None, incarnation=old.incarnation)


def test_bad_principal_input_is_refused_with_nothing_changed(team: MemoryService) -> None:
    with pytest.raises(Conflict):
        team.create_principal("user", "alice")
    for kind, name in (("team", "x"), ("user", "a:b"), ("user", ""), ("domain", "x" * 129)):
        with pytest.raises(ValidationError):
            team.create_principal(kind, name)
    with pytest.raises(NotFound):
        team.set_agent_principals("ann", user_id="nobody", domain=None)
    with pytest.raises(NotFound):
        team.set_agent_principals("nobody", user_id="alice", domain=None)
    assert team.agent_principals("ann") == {"user_id": "alice", "domain": "support"}
    assert [p.name for p in team.list_principals("user")] == ["alice", "carol"]
    with pytest.raises(ValidationError):  # scope names a principal the agent lacks
        team.remember("cat", "x", type="sticky", scope="domain", actor=ADMIN)
    carols = team.remember("cat", "Carol's secret", type="sticky", scope="user", actor=ADMIN).fact
    # A caller's holders are replaced by the agent's own: no way into another user's memory.
    assert carols.fact_id not in {f.fact_id for f in team.list_facts("ann", FactQuery(holders=("user:carol",)))}
    assert isinstance(team.get_principal("domain", "support"), Principal)


def test_the_agents_principals_change_is_audited(team: MemoryService) -> None:
    team.set_agent_principals("cat", user_id="alice", domain="support", actor=ADMIN)
    rows = [e for e in team.events("cat").items if e.kind == "agent_principals"]
    assert rows and rows[-1].payload["user_id"] == ["carol", "alice"] and rows[-1].actor == ADMIN


def test_a_version_1_database_is_upgraded_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
        "INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE agents (agent_id TEXT PRIMARY KEY, config TEXT NOT NULL, token_sha256 TEXT, "
        "id_floor INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, updated_at REAL NOT NULL, incarnation TEXT)"
        " WITHOUT ROWID;"
        "INSERT INTO agents (agent_id, config, created_at, updated_at) VALUES ('old', '{}', 1, 1);"
    )
    conn.commit()
    conn.close()
    store = open_store(f"sqlite:///{path}", text_index_lag_ok=False)
    try:
        assert store.get_agent("old").user_id is None
        store.put_principal(Principal("user", "u1", "i1"))
        assert store.set_agent_principals("old", user_id="u1", domain=None).user_id == "u1"
    finally:
        store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "2"
    conn.close()


def test_forgetting_a_message_takes_the_shared_facts_it_supports(team: MemoryService) -> None:
    said = team.append("ann", "user", "My flat is on Rue Cler").message_id
    other = team.append("bob", "user", "unrelated").message_id
    f = team.remember("ann", "Alice's flat is on Rue Cler", type="learned", scope="user",
                      evidence=[{"kind": "message", "id": said}], actor=ADMIN).fact  # fmt: skip
    kept = team.remember("bob", "Alice's flat is on Rue Cler, near the market", type="learned", scope="user",
                         key="flat", evidence=[{"kind": "message", "id": other}], actor=ADMIN).fact  # fmt: skip
    receipt = team.forget("ann", said)
    assert f.fact_id in receipt.facts_removed
    with pytest.raises(NotFound):
        team.get_fact("bob", f.fact_id)
    assert team.get_fact("bob", kept.fact_id).value.endswith("near the market")  # bob's pointer: not ann's
    assert team.check_forget("ann", receipt.receipt).clean


def test_snapshots_and_exports_hold_the_agents_own_memory_only(team: MemoryService) -> None:
    own = team.remember("ann", "ann's own note", type="sticky", actor=ADMIN).fact
    snap = team.create_snapshot("ann", ttl_s=10**10)  # the test clock is years behind the store's
    shared = team.remember("ann", "Alice's shared note", type="sticky", scope="user", actor=ADMIN).fact
    exported = "".join(team.export_agent("ann"))
    assert own.fact_id in exported and shared.fact_id not in exported and "shared note" not in exported
    team.restore_snapshot("ann", snap.snapshot_id)
    # The restore put back the agent's own memory and left its user's as it was.
    assert {f.fact_id for f in team.list_facts("ann")} == {own.fact_id, shared.fact_id}
    assert team.get_fact("bob", shared.fact_id).value == "Alice's shared note"


def test_a_cold_path_view_fences_the_agents_writes_and_leaves_shared_ones_to_their_principal(
    team: MemoryService,
) -> None:
    from vcm.tasks.fence import fenced

    store = fenced(team.store, "not-anns-incarnation")
    with pytest.raises(AgentFenced):
        store.put_fact(Fact(agent_id="ann", fact_id="fa", scope="agent", type="sticky", value="x"), None)
    shared = Fact(agent_id=holder_id("user", "alice"), fact_id="fs", scope="user", type="sticky", value="y")
    assert store.put_fact(shared, None).fact_id == "fs"  # alice exists: her fence passes


def test_a_users_state_keys_are_read_by_its_agents_and_written_by_the_operator_only(team: MemoryService) -> None:
    team.set_state("ann", "timezone", "Europe/Paris", scope="user", actor=ADMIN)
    assert team.get_state("bob", "timezone").value == "Europe/Paris"
    assert "timezone (user) = " in prompt(team, "bob")
    with pytest.raises(NotFound):
        team.get_state("cat", "timezone")
    with pytest.raises(Unauthorized):  # no shadow for a key to wait in: agents read, the operator writes
        team.set_state("ann", "timezone", "UTC", scope="user", actor="api:agent")
    with pytest.raises(Unauthorized):
        team.delete_state("ann", "timezone", scope="user", actor="api:agent")
    team.set_state("bob", "timezone", "Asia/Tokyo", actor="api:agent")  # bob's own key comes first
    assert team.get_state("bob", "timezone").value == "Asia/Tokyo"
    assert [(e.key, e.value) for e in team.list_state("bob")] == [("timezone", "Asia/Tokyo")]
    assert [(e.key, e.value) for e in team.list_state("ann")] == [("timezone", "Europe/Paris")]
    team.delete_principal("user", "alice")
    with pytest.raises(NotFound):
        team.get_state("ann", "timezone")
    with pytest.raises(AgentFenced):  # nothing is written for a principal that is gone
        team.store.put_state(holder_id("user", "alice"), "late", 1, expires_at=None, expected_rev=None)
