"""Snapshots hold the whole agent (issue 29): facts and state keys go back to the snapshot on a
restore, with their fact edges; the ``pre_restore`` snapshot keeps what came after; snapshots
taken before they held facts and state restore as before. And a rebuilt hot state resumes its
counters and change feed from the store.

Embedded store and fakeredis: a fresh fakeredis over the same SQLite file is a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from tests.store.factories import FaultSwitch, InjectedFailure
from vcm import snapshots as payloads
from vcm.dispatch import RecordingDispatcher
from vcm.eval.report import agent_signals
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store.embedded import EmbeddedStore
from vcm.store.port import MemoryStore
from vcm.store.types import FactQuery, SnapshotRecord, fact_node, message_node

MODEL = "vcm-demo-2k"
ALL = FactQuery(statuses=("active", "shadow", "archived", "expired"), limit=1000)


@pytest.fixture
def faults() -> FaultSwitch:
    return FaultSwitch()


@pytest.fixture
def store(tmp_path: Path, faults: FaultSwitch) -> Iterator[MemoryStore]:
    s = EmbeddedStore(str(tmp_path / "vcm.db"), fault_hook=faults)
    yield s
    s.close()


def service(store: MemoryStore) -> MemoryService:
    """A service over a new, empty fakeredis: each call is a restart of embedded mode."""
    cfg = load_settings(overrides={"durability": {"messages": "write_through"}}, environ={})
    return MemoryService(HotState(fakeredis.FakeRedis(decode_responses=True), cfg), store, RecordingDispatcher())


def facts_of(svc: MemoryService, agent: str) -> dict[str, tuple[Any, ...]]:
    """Every fact of the agent as what a restore must give back exactly."""
    return {
        f.fact_id: (f.value, f.status, tuple(tuple(sorted(e.items())) for e in f.evidence), f.key, f.type,
                    f.expires_at, f.lifetime_s, tuple(f.conflict_with), f.importance, f.confidence)
        for f in svc.list_facts(agent, ALL)
    }  # fmt: skip


def versions_of(svc: MemoryService, agent: str) -> dict[str, int]:
    return {f.fact_id: f.version for f in svc.list_facts(agent, ALL)}


def state_of(svc: MemoryService, agent: str) -> dict[str, tuple[Any, Any]]:
    return {e.key: (e.value, e.expires_at) for e in svc.list_state(agent)}


def graph_of(svc: MemoryService, agent: str) -> set[tuple[str, str, str]]:
    edges = svc.store.agent_memory(agent, svc.core.clock()).edges
    return {(e.kind, e.src.key, e.dst.key) for e in edges}


def populate(svc: MemoryService, agent: str) -> dict[str, str]:
    """An agent with messages, facts of several kinds and statuses (with evidence, so edges) and
    state keys; returns the ids the test changes later."""
    svc.create_agent(agent, model=MODEL)
    m1 = svc.append(agent, "user", "Alice works with Bob at Acme in Porto.").message_id
    m2 = svc.append(agent, "user", "Alice prefers green tea in the morning.").message_id
    ev1, ev2 = [{"kind": "message", "id": m1}], [{"kind": "message", "id": m2}]
    tea = svc.remember(agent, "Alice prefers green tea", type="preference", evidence=ev2, ttl_s=3600).fact
    rel = svc.remember(agent, "Alice works with Bob", type="relation", key="alice|works_with|bob", evidence=ev1)
    svc.settle_fact(agent, rel.fact.fact_id, "promote")  # written online: its edges come with promotion
    shadow = svc.remember(agent, "Alice may move to Lisbon", type="learned", status="shadow", evidence=ev1).fact
    old = svc.remember(agent, "The project is called Atlas", type="project", evidence=ev1).fact
    svc.set_state(agent, "plan", {"step": 1}, ttl_s=3600)
    svc.set_state(agent, "mood", "calm")
    return {"tea": tea.fact_id, "relation": rel.fact.fact_id, "shadow": shadow.fact_id, "old": old.fact_id, "m1": m1}


def change_everything(svc: MemoryService, agent: str, ids: dict[str, str]) -> None:
    """Facts and state written after the snapshot: new, changed, archived, forgotten, deleted."""
    m3 = svc.append(agent, "user", "Carol joined the Atlas project.").message_id
    carol = svc.remember(agent, "Carol works with Alice", type="relation", key="carol|works_with|alice",
                         evidence=[{"kind": "message", "id": m3}])  # fmt: skip
    svc.settle_fact(agent, carol.fact.fact_id, "promote")
    tea = svc.get_fact(agent, ids["tea"])
    svc.remember(agent, "Alice prefers green tea", type="preference", evidence=[{"kind": "message", "id": m3}])
    assert svc.get_fact(agent, ids["tea"]).version > tea.version  # MATCH: more evidence, new version
    svc.archive_facts(agent, types=["learned"])
    svc.forget_fact(agent, ids["old"])
    plan = svc.get_state(agent, "plan")
    svc.set_state(agent, "plan", {"step": 2}, expected_rev=plan.rev)
    svc.delete_state(agent, "mood")
    svc.set_state(agent, "later", True)


def test_a_restore_returns_facts_state_and_graph_to_the_snapshot_and_pre_restore_keeps_the_later_ones(
    store: MemoryStore,
) -> None:
    svc = service(store)
    ids = populate(svc, "ann")
    snap = svc.create_snapshot("ann", reason="before")
    facts, state, graph = facts_of(svc, "ann"), state_of(svc, "ann"), graph_of(svc, "ann")
    versions = versions_of(svc, "ann")
    assert any(k == "relates_to" for k, _, _ in graph) and any(k == "mentions" for k, _, _ in graph)
    change_everything(svc, "ann", ids)
    later_facts, later_state, later_graph = facts_of(svc, "ann"), state_of(svc, "ann"), graph_of(svc, "ann")
    later_versions = versions_of(svc, "ann")
    assert later_facts != facts and later_state != state and later_graph != graph
    seen = svc.changes("ann").next_after  # a follower, caught up
    later_plan_rev = svc.get_state("ann", "plan").rev

    out = svc.restore_snapshot("ann", snap.snapshot_id)

    assert facts_of(svc, "ann") == facts  # values, statuses, evidence, lifetimes, conflicts
    # Versions: as captured where nothing changed since; above both where the fact moved on, so
    # a version read between the snapshot and the restore never matches the restored contents.
    for fact_id, version in versions_of(svc, "ann").items():
        moved = later_versions.get(fact_id, versions[fact_id]) != versions[fact_id]
        assert version == (max(versions[fact_id], later_versions[fact_id]) + 1 if moved else versions[fact_id])
    assert state_of(svc, "ann") == state
    assert graph_of(svc, "ann") == graph  # Carol's relation and its edges went with it
    assert svc.get_state("ann", "plan").rev != later_plan_rev  # no rev of the later value matches
    assert svc.entity_graph("ann", "alice").neighbours[0].key == "bob"
    assert ids["m1"] in svc.entity_graph("ann", "alice").mentioned_in
    told = svc.changes("ann", after=seen)
    assert not told.gap and [(c.kind, c.op) for c in told.changes] == [("agent", "reset")]
    # The state it replaced was kept, and restoring it brings the later facts and state back.
    svc.restore_snapshot("ann", out["pre_restore_snapshot_id"])
    assert facts_of(svc, "ann") == later_facts
    assert state_of(svc, "ann") == later_state and graph_of(svc, "ann") == later_graph
    assert versions_of(svc, "ann")[ids["tea"]] > later_versions[ids["tea"]]


def test_a_snapshot_in_the_old_format_restores_as_before_and_leaves_facts_and_state(store: MemoryStore) -> None:
    svc = service(store)
    ids = populate(svc, "bea")
    svc.put_block("bea", "persona", "Bea is careful.")
    new = store.get_snapshot("bea", svc.create_snapshot("bea").snapshot_id)
    old_state = {k: v for k, v in payloads.decode(new.payload, new.sha256).items() if k not in ("format", "memory")}
    payload, sha, size = payloads.encode(old_state)
    store.put_snapshot(SnapshotRecord("bea", "old-format", "manual", "", payload, sha, size, 1.0, None))
    change_everything(svc, "bea", ids)
    svc.put_block("bea", "persona", "Bea changed.", expected_rev=svc.get_block("bea", "persona").rev)
    facts, state, graph = facts_of(svc, "bea"), state_of(svc, "bea"), graph_of(svc, "bea")

    svc.restore_snapshot("bea", "old-format")

    assert svc.get_block("bea", "persona").content == "Bea is careful."  # what it held comes back
    assert facts_of(svc, "bea") == facts and state_of(svc, "bea") == state and graph_of(svc, "bea") == graph


def test_a_restore_that_fails_in_its_transaction_changes_nothing(store: MemoryStore, faults: FaultSwitch) -> None:
    svc = service(store)
    ids = populate(svc, "cal")
    svc.put_block("cal", "persona", "Cal v1")
    snap = svc.create_snapshot("cal")
    change_everything(svc, "cal", ids)
    svc.put_block("cal", "persona", "Cal v2", expected_rev=svc.get_block("cal", "persona").rev)
    facts, state, graph = facts_of(svc, "cal"), state_of(svc, "cal"), graph_of(svc, "cal")
    config = store.get_agent("cal").config
    faults.armed.add("reset_context.before_commit")
    with pytest.raises(InjectedFailure):
        svc.restore_snapshot("cal", snap.snapshot_id)
    faults.armed.clear()
    assert facts_of(svc, "cal") == facts and state_of(svc, "cal") == state and graph_of(svc, "cal") == graph
    assert svc.get_block("cal", "persona").content == "Cal v2" and store.get_agent("cal").config == config
    # The store agrees: a restart finds the agent as it was too.
    again = service(store)
    assert again.get_block("cal", "persona").content == "Cal v2" and facts_of(again, "cal") == facts


def test_a_restart_resumes_the_appended_counter_and_the_change_feed_from_the_store(store: MemoryStore) -> None:
    first = service(store)
    first.create_agent("dan", model=MODEL)
    for i in range(30):
        first.append("dan", "user", f"message {i} about the Atlas project and its many open questions")
    first.write_recall("dan", "a note straight to recall", role="user", idempotency_key="note-1")
    first.set_state("dan", "plan", 1)
    before = first.changes("dan").next_after  # a follower's position in the feed before the restart
    appended = agent_signals(first, "dan", now=first.core.clock())[0].appended
    assert appended >= 30  # with any memory-pressure notice the hot path appended itself

    second = service(store)  # the restart: the same SQLite file, an empty Redis
    assert second.rebuild_missing() == ["dan"]  # as `vcm serve` does when it starts
    signals, _ = agent_signals(second, "dan", now=second.core.clock())
    held = store.count_messages("dan", id_prefix="m")
    assert signals.appended == held == appended  # the counter goes on from what the store holds
    assert signals.spooled == held + 1  # the recall note is stored, never appended
    second.append("dan", "user", "after the restart")
    assert agent_signals(second, "dan", now=second.core.clock())[0].appended == held + 1
    # A follower with a position from before the restart reads a gap (and drops its cache); one
    # reading the feed from its start meets the reset that began it again.
    resumed = second.changes("dan", after=before)
    assert resumed.gap and [(c.kind, c.op) for c in resumed.changes] == [("agent", "reset")]
    assert [(c.kind, c.op) for c in second.changes("dan", after="0").changes] == [("agent", "reset")]
    # A follower that caught up after the restart is not told of a gap again.
    assert not second.changes("dan", after=resumed.next_after).gap


def test_the_memory_section_round_trips_embeddings_and_refuses_garbage() -> None:
    from vcm.errors import SnapshotCorrupt
    from vcm.store.types import AgentMemory, Edge, Fact, StateEntry

    evidence = ({"kind": "message", "id": "m1"},)
    fact = Fact("a", "f1", "agent", "learned", "v", embedding=[0.25, -1.5, 3.0], evidence=evidence)
    edge = Edge("cites", fact_node("a", "f1"), message_node("a", "m1"), "a", 5.0)
    memory = AgentMemory((fact,), (StateEntry("a", "k", {"x": [1]}, "7", 2.0, None),), (edge,))
    payload, sha, _ = payloads.encode({"memory": payloads.memory_json(memory)})
    back = payloads.memory_of(payloads.decode(payload, sha), "a")
    assert back is not None and back.facts[0] == fact and back.edges == (edge,)
    assert back.state[0].value == {"x": [1]}
    with pytest.raises(SnapshotCorrupt):
        payloads.memory_of({"memory": {"facts": [{"fact_id": "f1"}], "state": [], "edges": []}}, "a")
    assert payloads.memory_of({}, "a") is None
