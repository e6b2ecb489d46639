"""Contract of facts and state, against every adapter."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.store.factories import FaultSwitch
from vcm.errors import InjectedFailure, NotFound, RevConflict, ValidationError
from vcm.store.port import MemoryStore
from vcm.store.types import AgentMemory, ContextReset, Edge, Fact, FactQuery, fact_node, message_node

NOW = 1_700_000_000.0


def fact(i: int, value: str, **over: object) -> Fact:
    base = Fact(
        agent_id="a1",
        fact_id=f"f{i}",
        scope="user",
        type="preference",
        value=value,
        key=None,
        tags=("food",),
        evidence=({"kind": "message", "id": f"m{i}"},),
        created_at=NOW + i,
        updated_at=NOW + i,
        embedding=[1.0, 0.0, 0.0],
    )
    return replace(base, **over)  # type: ignore[arg-type]


def test_put_get_versions_and_conflicts(store: MemoryStore) -> None:
    first = store.put_fact(fact(1, "Alice prefers green tea"), None)
    assert first.version == 1 and first.embedding is None
    with pytest.raises(RevConflict):
        store.put_fact(fact(1, "again"), None)  # exists already
    second = store.put_fact(replace(first, value="Alice prefers jasmine tea"), 1)
    assert second.version == 2 and store.get_fact("a1", "f1").value == "Alice prefers jasmine tea"
    with pytest.raises(RevConflict):
        store.put_fact(replace(first, value="stale"), 1)
    assert store.get_fact("a1", "f1").value == "Alice prefers jasmine tea"
    with pytest.raises(NotFound):
        store.get_fact("a1", "nope")
    with pytest.raises(ValidationError):
        store.put_fact(replace(first, fact_id="f9", importance=float("nan")), None)


def test_query_filters_and_order(store: MemoryStore) -> None:
    store.put_fact(fact(1, "likes tea", key="drink", importance=0.9, category="drinks"), None)
    store.put_fact(fact(2, "project Falcon due in May", type="project", tags=("work", "falcon")), None)
    store.put_fact(fact(3, "shadow guess", status="shadow", confidence=0.8), None)
    store.put_fact(fact(4, "old news", status="archived"), None)
    ids = lambda q: [f.fact_id for f in store.query_facts("a1", q)]  # noqa: E731
    assert ids(FactQuery()) == ["f2", "f1"]  # active only unless named, newest first
    assert ids(FactQuery(statuses=["active", "shadow"])) == ["f3", "f2", "f1"]
    assert ids(FactQuery(statuses=None)) == ["f4", "f3", "f2", "f1"]
    assert ids(FactQuery(types=["project"])) == ["f2"]
    assert ids(FactQuery(key="drink", scope="user")) == ["f1"]
    assert ids(FactQuery(tags=["work", "falcon"])) == ["f2"]
    assert ids(FactQuery(min_importance=0.8)) == ["f1"]
    assert ids(FactQuery(max_importance=0.8)) == ["f2"]
    assert ids(FactQuery(min_confidence=0.7, statuses=None)) == ["f3"]
    assert ids(FactQuery(statuses=["archived"])) == ["f4"]
    assert ids(FactQuery(since=NOW + 2, until=NOW + 3)) == ["f2"]
    assert ids(FactQuery(created_since=NOW + 1, created_until=NOW + 2, statuses=None)) == ["f1"]
    assert ids(FactQuery(category="drinks")) == ["f1"]
    assert ids(FactQuery(limit=1)) == ["f2"]
    # An UNSURE candidate keeps the fact it may duplicate, and is found by it.
    store.put_fact(fact(5, "likes green tea", status="shadow", duplicate_of="f1"), None)
    assert ids(FactQuery(unsure=True, statuses=None)) == ["f5"]
    assert store.get_fact("a1", "f5").duplicate_of == "f1" and store.get_fact("a1", "f1").duplicate_of is None


def test_search_is_hybrid_text_and_vector(store: MemoryStore) -> None:
    store.put_fact(fact(1, "Alice prefers green tea in the morning", embedding=[1.0, 0.0, 0.0]), None)
    store.put_fact(fact(2, "The Falcon launch moved to May", embedding=[0.0, 1.0, 0.0]), None)
    store.put_fact(fact(3, "Bob drinks coffee", embedding=[0.9, 0.1, 0.0]), None)
    hits = store.search_facts("a1", "green tea", None, FactQuery())
    assert [h.fact.fact_id for h in hits] == ["f1"]
    # No word in common: the vector finds it.
    by_meaning = store.search_facts("a1", "beverage habits", [1.0, 0.05, 0.0], FactQuery(limit=2))
    assert [h.fact.fact_id for h in by_meaning] == ["f1", "f3"]
    both = store.search_facts("a1", "launch", [0.0, 1.0, 0.0], FactQuery())
    assert both[0].fact.fact_id == "f2" and both[0].fact.embedding is None


def test_a_search_ranks_without_reading_and_reads_the_hits_a_caller_wants(store: MemoryStore) -> None:
    """search_fact_scores is search_facts' ranking alone; read_fact_hits reads some of its hits
    whole, in the order given, leaving out one deleted or filtered out since."""
    store.put_fact(fact(1, "Alice prefers green tea in the morning", embedding=[1.0, 0.0, 0.0]), None)
    store.put_fact(fact(2, "Bob drinks green tea at night", embedding=[0.9, 0.1, 0.0]), None)
    store.put_fact(fact(3, "The Falcon launch moved to May", embedding=[0.0, 1.0, 0.0]), None)
    query = FactQuery(limit=3)
    scores = store.search_fact_scores("a1", "green tea", [1.0, 0.0, 0.0], query)
    hits = store.search_facts("a1", "green tea", [1.0, 0.0, 0.0], query)
    assert [(s.agent_id, s.fact_id, s.score) for s in scores] == [("a1", h.fact.fact_id, h.score) for h in hits]
    assert {s.fact_id for s in scores[:2]} == {"f1", "f2"}
    first, second = scores[0], scores[1]
    read = store.read_fact_hits("a1", [second, first], query)
    assert [(h.fact.fact_id, h.score) for h in read] == [(second.fact_id, second.score), (first.fact_id, first.score)]
    assert {h.fact.value for h in read} == {"Alice prefers green tea in the morning", "Bob drinks green tea at night"}
    assert all(h.fact.embedding is None for h in read)
    store.delete_facts("a1", [second.fact_id])
    assert [h.fact.fact_id for h in store.read_fact_hits("a1", [first, second], query)] == [first.fact_id]
    store.put_fact(replace(store.get_fact("a1", first.fact_id), status="archived"), 1)
    assert store.read_fact_hits("a1", [first, second], query) == []  # no longer active: past the filters
    assert store.read_fact_hits("a1", [], query) == []


def test_a_listing_of_several_types_and_statuses_is_the_newest_of_them_all(store: MemoryStore) -> None:
    kinds = ["goal", "risk", "preference"]
    for i in range(12):
        status = "shadow" if i % 4 == 3 else "active"
        store.put_fact(fact(i, f"fact {i}", type=kinds[i % 3], status=status, updated_at=NOW + (i * 7) % 12), None)
    store.put_fact(fact(12, "tie", type="goal", updated_at=NOW + 10), None)  # the time of f10 (a risk): by id
    listed = store.query_facts("a1", FactQuery(types=["goal", "risk", "goal"], statuses=["active", "shadow"], limit=5))
    every = [
        f for f in store.query_facts("a1", FactQuery(statuses=None, limit=100))
        if f.type in ("goal", "risk") and f.status in ("active", "shadow")
    ]  # fmt: skip
    want = sorted(every, key=lambda f: (-f.updated_at, f.fact_id))[:5]
    assert [f.fact_id for f in listed] == [f.fact_id for f in want] and len(want) == 5
    assert [f.fact_id for f in listed] == ["f10", "f12", "f3", "f1", "f6"]
    actives = store.query_facts("a1", FactQuery(types=["goal", "risk"], statuses=["active"], limit=100))
    assert all(f.status == "active" and f.type in ("goal", "risk") for f in actives) and len(actives) == 7


def test_dedup_candidates_are_query_facts_light_with_their_cosines(store: MemoryStore) -> None:
    store.put_fact(fact(1, "likes tea", key="drink", embedding=[1.0, 0.0, 0.0]), None)
    store.put_fact(fact(2, "likes coffee", embedding=[-2.0, 0.0, 0.0]), None)
    store.put_fact(fact(3, "short vector", embedding=[1.0, 0.0]), None)
    store.put_fact(fact(4, "no vector", embedding=None, status="shadow", duplicate_of="f1"), None)
    store.put_fact(fact(5, "a project", type="project", embedding=[0.6, 0.8, 0.0]), None)
    store.put_fact(fact(6, "archived", status="archived", embedding=[1.0, 0.0, 0.0]), None)
    live = FactQuery(types=["preference"], statuses=["active", "shadow"])
    got = store.dedup_candidates("a1", live, [3.0, 0.0, 0.0])
    assert [c.fact_id for c in got] == [f.fact_id for f in store.query_facts("a1", live)] == ["f4", "f3", "f2", "f1"]
    by_id = {c.fact_id: c for c in got}
    assert by_id["f1"].cosine == pytest.approx(1.0) and by_id["f2"].cosine == pytest.approx(-1.0)
    assert by_id["f3"].cosine == 0.0 and by_id["f4"].cosine == 0.0  # another length; none
    assert (by_id["f1"].key, by_id["f1"].value, by_id["f1"].agent_id) == ("drink", "likes tea", "a1")
    assert by_id["f4"].duplicate_of == "f1" and by_id["f1"].duplicate_of is None
    assert [c.cosine for c in store.dedup_candidates("a1", live, None)] == [0.0] * 4
    assert [c.fact_id for c in store.dedup_candidates("a1", replace(live, limit=2), [1.0, 0.0, 0.0])] == ["f4", "f3"]
    project = store.dedup_candidates("a1", FactQuery(types=["project"]), [1.0, 0.0, 0.0])
    assert [(c.fact_id, round(c.cosine, 6)) for c in project] == [("f5", 0.6)]
    assert store.dedup_candidates("a1", FactQuery(tags=["nope"]), [1.0, 0.0, 0.0]) == []


def test_a_fact_put_back_without_its_embedding_keeps_it_while_its_value_holds(store: MemoryStore) -> None:
    """Reads leave embeddings out: a read-modify-write must not drop the vector search needs."""
    store.put_fact(fact(1, "likes tea", embedding=[1.0, 0.0, 0.0]), None)
    read = store.get_fact("a1", "f1")
    assert read.embedding is None
    store.put_fact(replace(read, importance=0.9), read.version)
    [kept] = store.dedup_candidates("a1", FactQuery(), [1.0, 0.0, 0.0])
    assert kept.cosine == pytest.approx(1.0) and store.get_fact("a1", "f1").importance == 0.9
    hits = store.search_facts("a1", "zzz", [1.0, 0.0, 0.0], FactQuery())
    assert [h.fact.fact_id for h in hits] == ["f1"]  # found by its vector alone
    changed = store.get_fact("a1", "f1")
    store.put_fact(replace(changed, value="likes coffee"), changed.version)  # another value: stale vector
    [gone] = store.dedup_candidates("a1", FactQuery(), [1.0, 0.0, 0.0])
    assert gone.cosine == 0.0 and gone.value == "likes coffee"


def test_delete_touch_and_expiry(store: MemoryStore) -> None:
    store.put_fact(fact(1, "keeps", expires_at=None), None)
    store.put_fact(fact(2, "expires", expires_at=NOW + 10), None)
    store.touch_facts("a1", ["f1"], NOW + 5)
    touched = store.get_fact("a1", "f1")
    assert (touched.access_count, touched.last_used, touched.version) == (1, NOW + 5, 1)
    store.expire(NOW + 20)
    assert store.get_fact("a1", "f2").status == "expired"
    assert [f.fact_id for f in store.query_facts("a1", FactQuery())] == ["f1"]
    assert store.delete_facts("a1", ["f1", "f2", "ghost"]) == 2
    assert store.query_facts("a1", FactQuery(statuses=None)) == []


def test_a_use_renews_a_lifetime_forward_only(store: MemoryStore) -> None:
    store.put_fact(fact(1, "renewable", expires_at=NOW + 10, lifetime_s=100.0), None)
    store.put_fact(fact(2, "fixed expiry", expires_at=NOW + 10), None)
    store.put_fact(fact(3, "long way off", expires_at=NOW + 1000, lifetime_s=100.0), None)
    store.put_fact(fact(4, "never expires", lifetime_s=100.0), None)
    store.touch_facts("a1", ["f1", "f2", "f3", "f4"], NOW + 5)
    got = {f: store.get_fact("a1", f) for f in ("f1", "f2", "f3", "f4")}
    assert got["f1"].expires_at == NOW + 105 and got["f1"].lifetime_s == 100.0
    assert got["f2"].expires_at == NOW + 10  # no lifetime: fixed
    assert got["f3"].expires_at == NOW + 1000  # never shortened
    assert got["f4"].expires_at is None  # never given an expiry
    store.touch_facts("a1", ["f1"], NOW + 500)  # already expired: not revived
    assert store.get_fact("a1", "f1").expires_at == NOW + 105


def test_fact_nodes_carry_edges_and_lose_them_with_the_fact(store: MemoryStore) -> None:
    store.put_fact(fact(1, "Priya", type="entity", key="priya"), None)
    store.put_fact(fact(2, "Maya", type="entity", key="maya"), None)
    priya, maya, m7 = fact_node("a1", "f1"), fact_node("a1", "f2"), message_node("a1", "m7")
    store.add_edge(Edge("relates_to", priya, maya, "a1", NOW, {"relation": "sister", "fact_id": "f3"}))
    store.add_edge(Edge("mentions", m7, maya, "a1", NOW))
    store.add_edge(Edge("cites", maya, m7, "a1", NOW))
    assert store.traverse(priya, ["relates_to"]) == [maya]
    assert store.traverse(maya, ["relates_to"], direction="inbound") == [priya]
    assert store.traverse(maya, ["mentions"], direction="inbound") == [m7]
    assert store.traverse(priya, ["relates_to", "mentions"], max_depth=2, direction="any") == [maya, m7]
    assert store.delete_facts("a1", ["f2"]) == 1
    assert store.traverse(priya, ["relates_to"], direction="any") == []
    assert store.traverse(m7, ["mentions", "cites"], direction="any") == []


def test_state_keys_revs_ttl_and_clear(store: MemoryStore) -> None:
    one = store.put_state("a1", "mood", {"level": 3}, expires_at=None, expected_rev=None)
    assert store.get_state("a1", "mood", NOW).value == {"level": 3}
    two = store.put_state("a1", "mood", "calm", expires_at=None, expected_rev=one.rev)
    assert two.rev != one.rev
    with pytest.raises(RevConflict):
        store.put_state("a1", "mood", "angry", expires_at=None, expected_rev=one.rev)
    assert store.get_state("a1", "mood", NOW).value == "calm"
    store.put_state("a1", "temp", [1, 2], expires_at=NOW + 5, expected_rev=None)
    assert [s.key for s in store.list_state("a1", NOW)] == ["mood", "temp"]
    assert [s.key for s in store.list_state("a1", NOW + 6)] == ["mood"]  # never returned once expired
    with pytest.raises(NotFound):
        store.get_state("a1", "temp", NOW + 6)
    store.expire(NOW + 6)
    with pytest.raises(ValidationError):
        store.put_state("a1", "bad", {1, 2}, expires_at=None, expected_rev=None)
    assert store.delete_state("a1", "mood", two.rev) == 1
    store.put_state("a1", "x", 1, expires_at=None, expected_rev=None)
    assert store.delete_state("a1", None) == 1 and store.list_state("a1", NOW) == []
    # "" creates only: of two instances creating one key, the second is told, and changes nothing.
    made = store.put_state("a1", "owner", "instance-1", expires_at=None, expected_rev="")
    with pytest.raises(RevConflict) as late:
        store.put_state("a1", "owner", "instance-2", expires_at=None, expected_rev="")
    assert "already exists" in late.value.message
    assert store.get_state("a1", "owner", NOW).value == "instance-1" and made.rev


def test_agent_memory_reads_everything_and_reset_context_puts_it_back_at_once(
    store: MemoryStore, faults: FaultSwitch
) -> None:
    """What a snapshot keeps (``agent_memory``) and what a restore puts back (``reset_context``
    with ``memory``): every fact with its embedding, the live state keys, the fact edges; and
    only those of the agent."""
    store.put_agent("a1", {"model": "m"})
    store.put_agent("b1", {"model": "m"})
    kept = store.put_fact(fact(1, "likes tea", status="archived", lifetime_s=60.0, expires_at=NOW + 60), None)
    moved = store.put_fact(fact(2, "likes coffee"), None)
    cites = Edge("cites", fact_node("a1", "f1"), message_node("a1", "m1"), "a1", NOW)
    store.add_edge(cites)
    store.put_state("a1", "plan", {"step": 1}, expires_at=None, expected_rev=None)
    store.put_state("a1", "gone", 1, expires_at=NOW - 1, expected_rev=None)
    store.put_state("b1", "other", 1, expires_at=None, expected_rev=None)
    store.put_fact(replace(fact(9, "b's own"), agent_id="b1"), None)
    snap = store.agent_memory("a1", NOW)
    assert [f.fact_id for f in snap.facts] == ["f1", "f2"] and snap.facts[0].embedding == [1.0, 0.0, 0.0]
    assert snap.facts[0].status == "archived" and snap.facts[0].lifetime_s == 60.0
    assert [s.key for s in snap.state] == ["plan"] and snap.edges == (cites,)

    # After the snapshot: one fact moves on, one comes, keys and edges change.
    store.put_fact(replace(moved, value="likes cocoa"), moved.version)
    store.put_fact(fact(3, "new"), None)
    store.add_edge(Edge("cites", fact_node("a1", "f3"), message_node("a1", "m3"), "a1", NOW))
    plan = store.put_state("a1", "plan", {"step": 2}, expires_at=None, expected_rev=None)
    store.put_state("a1", "later", True, expires_at=None, expected_rev=None)
    reset = ContextReset("a1", 500, "", 0, fifo_ids=[], memory=snap)

    # A failure inside the transaction changes nothing.
    faults.armed.add("reset_context.before_commit")
    with pytest.raises(InjectedFailure):
        store.reset_context(reset)
    faults.armed.clear()
    assert len(store.agent_memory("a1", NOW).facts) == 3

    store.reset_context(reset)
    back = store.agent_memory("a1", NOW)
    assert [(f.fact_id, f.value, f.status, f.expires_at) for f in back.facts] == [
        ("f1", "likes tea", "archived", NOW + 60),
        ("f2", "likes coffee", "active", None),
    ]
    # Versions: kept where the fact had not moved on, above both where it had.
    assert [f.version for f in back.facts] == [kept.version, moved.version + 2]
    assert [(s.key, s.value) for s in back.state] == [("plan", {"step": 1})] and back.state[0].rev != plan.rev
    assert back.edges == (cites,)
    assert store.traverse(fact_node("a1", "f3"), ["cites"]) == []
    # Another agent's memory is untouched.
    assert [f.fact_id for f in store.agent_memory("b1", NOW).facts] == ["f9"]
    assert [s.key for s in store.list_state("b1", NOW)] == ["other"]


def test_reset_context_refuses_memory_of_another_agent(store: MemoryStore) -> None:
    store.put_agent("a1", {})
    store.put_fact(fact(1, "mine"), None)
    stranger = AgentMemory(facts=(replace(fact(2, "theirs"), agent_id="b1"),))
    with pytest.raises(ValidationError):
        store.reset_context(ContextReset("a1", 7, "", 0, fifo_ids=[], memory=stranger))
    assert [f.fact_id for f in store.query_facts("a1", FactQuery())] == ["f1"]
