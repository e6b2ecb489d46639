"""Entities and relations in the graph, and lifetimes refreshed by use — through the façade, on
fakeredis and a real SQLite store."""

from __future__ import annotations

import pytest

from tests.doubles.clock import Clock
from vcm.errors import Conflict, NotFound, ValidationError
from vcm.facts import entities
from vcm.service import MemoryService
from vcm.store.port import MemoryStore
from vcm.store.types import FactQuery, fact_node
from vcm.tasks.facts import extraction as fact_extraction
from vcm.types import Message

DAY = 86400.0


def msg(svc: MemoryService, text: str = "a message") -> list[dict[str, str]]:
    """A pointer to a message the agent really holds (evidence is checked)."""
    return [{"kind": "message", "id": svc.append("ann", "user", text).message_id}]


def related(svc: MemoryService, value: str, key: str, text: str = "a message") -> str:
    """A relation written online (it lands shadow) and promoted by a person; its fact id."""
    r = svc.remember("ann", value, type="relation", key=key, evidence=msg(svc, text))
    assert r.fact.status == "shadow"
    promoted = svc.settle_fact("ann", r.fact.fact_id, "promote")
    assert promoted is not None and promoted.status == "active"
    return r.fact.fact_id


def test_a_relation_creates_both_entities_and_joins_them(svc: MemoryService) -> None:
    fact_id = related(svc, "Maya is Priya's sister", "Priya|sister|Maya")
    assert svc.get_fact("ann", fact_id).key == "priya|sister|maya"
    names = {f.key: f.value for f in svc.list_facts("ann", FactQuery(types=["entity"]))}
    assert names == {"priya": "Priya", "maya": "Maya"}
    around = svc.entity_graph("ann", "PRIYA")
    assert around.entity.key == "priya"
    assert [f.key for f in around.neighbours] == ["maya"]
    assert [f.fact_id for f in around.relations] == [fact_id]
    # The relation fact cites its evidence; the entities are mentioned by it.
    assert svc.get_fact("ann", fact_id).evidence[0]["id"] in around.mentioned_in


def test_an_online_relation_adds_no_edge_until_promoted(svc: MemoryService, store: MemoryStore) -> None:
    r = svc.remember("ann", "Ivan manages Olga", type="relation", key="Ivan|manages|Olga", evidence=msg(svc))
    assert r.fact.status == "shadow"
    node = fact_node("ann", r.fact.fact_id)
    assert store.traverse(node, ["cites", "relates_to", "mentions"], direction="any") == []
    assert svc.list_facts("ann", FactQuery(types=["entity"], statuses=["active", "shadow"])) == []
    with pytest.raises(NotFound):
        svc.entity_graph("ann", "ivan")
    svc.settle_fact("ann", r.fact.fact_id, "promote")
    assert [f.key for f in svc.entity_graph("ann", "ivan").neighbours] == ["olga"]
    with pytest.raises(Conflict):  # settled once
        svc.settle_fact("ann", r.fact.fact_id, "reject")


def test_an_online_entity_lands_shadow_and_a_rejected_one_is_gone(svc: MemoryService) -> None:
    e = svc.remember("ann", "Maya", type="entity", evidence=msg(svc), actor="api:admin")
    assert e.fact.status == "shadow"  # structure, even the admin's, waits for promotion
    assert svc.settle_fact("ann", e.fact.fact_id, "reject") is None
    with pytest.raises(NotFound):
        svc.get_fact("ann", e.fact.fact_id)


def test_traversal_reaches_further_with_depth(svc: MemoryService) -> None:
    related(svc, "Maya is Priya's sister", "priya|sister|maya")
    related(svc, "Jo is Maya's friend", "maya|friend|jo")
    related(svc, "Unrelated", "sam|boss|lee")
    near = svc.entity_graph("ann", "priya", depth=1)
    far = svc.entity_graph("ann", "priya", depth=2)
    assert [f.key for f in near.neighbours] == ["maya"]
    assert [f.key for f in far.neighbours] == ["maya", "jo"]
    assert sorted(f.key or "" for f in far.relations) == ["maya|friend|jo", "priya|sister|maya"]
    # Inbound edges count too: from Jo, Priya is two hops back.
    assert [f.key for f in svc.entity_graph("ann", "jo", depth=2).neighbours] == ["maya", "priya"]


def test_an_entity_is_one_fact_per_name_whatever_its_description(svc: MemoryService) -> None:
    one, two = msg(svc), msg(svc)
    first = svc.remember("ann", "Maya", type="entity", evidence=one)
    again = svc.remember("ann", "Maya (Priya's sister)", type="entity", key="maya", tags=["May"], evidence=two)
    assert again.decision == "MATCH" and again.fact.fact_id == first.fact.fact_id
    ids = [one[0]["id"], two[0]["id"]]
    assert again.fact.tags == ("May",) and [e["id"] for e in again.fact.evidence] == ids
    svc.settle_fact("ann", first.fact.fact_id, "promote")
    assert set(svc.entity_graph("ann", "maya").mentioned_in) == set(ids)


def test_forgetting_an_entity_takes_its_edges(svc: MemoryService, store: MemoryStore) -> None:
    related(svc, "Maya is Priya's sister", "priya|sister|maya")
    maya = svc.recall_fact("ann", "maya", type="entity")[0]
    priya = svc.recall_fact("ann", "priya", type="entity")[0]
    assert store.traverse(fact_node("ann", priya.fact_id), ["relates_to"], direction="any")
    assert svc.forget_fact("ann", maya.fact_id)
    assert store.traverse(fact_node("ann", priya.fact_id), ["relates_to"], direction="any") == []
    assert svc.entity_graph("ann", "priya").neighbours == ()
    with pytest.raises(NotFound):
        svc.entity_graph("ann", "maya")


@pytest.mark.parametrize(
    ("type_", "key"),
    [("relation", None), ("relation", "priya|sister"), ("relation", "a||b"), ("entity", "a|b"), ("entity", "x" * 81)],
)
def test_malformed_entity_or_relation_keys_are_refused_and_write_nothing(
    svc: MemoryService, type_: str, key: str | None
) -> None:
    with pytest.raises(ValidationError):
        svc.remember("ann", "something", type=type_, key=key)
    assert svc.list_facts("ann") == []


def test_entity_graph_input_is_checked(svc: MemoryService) -> None:
    svc.settle_fact("ann", svc.remember("ann", "Maya", type="entity").fact.fact_id, "promote")
    for depth in (0, 4, True):
        with pytest.raises(ValidationError):
            svc.entity_graph("ann", "maya", depth=depth)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        svc.entity_graph("ann", "nobody")


def test_use_refreshes_a_lifetime_and_nothing_else_does(svc: MemoryService, clock: Clock) -> None:
    project = svc.remember("ann", "The launch is on Friday", type="project", key="launch").fact
    sticky = svc.remember("ann", "Ann is vegetarian", type="sticky").fact
    assert project.expires_at is not None and sticky.expires_at is None
    clock.now += 10 * DAY
    assert svc.get_fact("ann", project.fact_id).expires_at == project.expires_at  # reading is not use
    used = svc.recall_fact("ann", "launch")[0]
    refreshed = svc.get_fact("ann", project.fact_id)
    assert refreshed.expires_at is not None and refreshed.expires_at > project.expires_at
    assert refreshed.expires_at == pytest.approx(clock.now + 30 * DAY, abs=1.0)
    assert refreshed.access_count == used.access_count + 1
    svc.search_facts("ann", "vegetarian")
    assert svc.get_fact("ann", sticky.fact_id).expires_at is None  # never expires stays so


def test_a_fact_given_its_own_ttl_keeps_that_lifetime_and_is_not_revived(
    svc: MemoryService, store: MemoryStore, clock: Clock
) -> None:
    fact = svc.remember("ann", "Standup moved to 10:00", type="project", key="standup", ttl_s=60).fact
    assert fact.lifetime_s == pytest.approx(60)
    clock.now += 30
    svc.recall_fact("ann", "standup")
    renewed = svc.get_fact("ann", fact.fact_id).expires_at
    assert renewed == pytest.approx(clock.now + 60, abs=0.1)  # its own 60 s, not the type's 30 days
    clock.now += 120
    store.touch_facts("ann", [fact.fact_id], clock.now)  # expired: a use does not bring it back
    assert svc.get_fact("ann", fact.fact_id).expires_at == renewed


def test_stated_relations_are_found_offline() -> None:
    found = entities.stated("Priya", "My sister Maya moved to Porto, and Jo is my best friend.")
    assert {r.key for r in found} == {"priya|sister|maya", "priya|friend|jo"}
    # Speaker-independent: an unnamed speaker is the user.
    assert [r.key for r in entities.stated("", "My sister Maya lives in Berlin.")] == ["user|sister|maya"]
    assert [r.key for r in entities.stated("Eve", "my brother Tomas")] == ["eve|brother|tomas"]
    assert entities.stated("Priya", "I love my sister.") == []  # no name stated
    assert entities.stated("Priya", "Thanks, my friend!") == []  # an opener names nobody


def test_extraction_before_eviction_yields_entities_and_relations() -> None:
    messages = [
        Message("m1", 1, "user", "My sister Maya ran the Porto half marathon in 97 minutes.", 20, 1e9, name="Priya"),
        Message("m2", 2, "assistant", "That is a great time for Porto!", 10, 1e9, name="Coach"),
    ]
    found = fact_extraction.extract(messages)
    by_type = {(c.type, c.key, c.message_id) for c in found if c.type in ("entity", "relation")}
    assert ("relation", "priya|sister|maya", "m1") in by_type
    assert ("entity", "porto", "m1") in by_type and ("entity", "maya", "m1") in by_type
    assert not any(c.key == "priya" for c in found if c.type == "entity")  # speakers are not mentions


def test_extraction_relates_unnamed_speakers_and_leaves_calendar_words_out() -> None:
    messages = [
        Message("m1", 1, "user", "My sister Maya lives in Berlin since June.", 20, 1e9),
        Message("m2", 2, "user", "On Monday in March we met Tomas at the Porto marathon in November.", 20, 1e9),
    ]
    found = fact_extraction.extract(messages)
    relations = {(c.key, c.message_id, c.value) for c in found if c.type == "relation"}
    assert relations == {("user|sister|maya", "m1", "My sister Maya lives in Berlin since June.")}
    names = {c.key for c in found if c.type == "entity"}
    assert {"tomas", "porto"} <= names
    assert not names & {"june", "monday", "march", "november", "on"}, names
