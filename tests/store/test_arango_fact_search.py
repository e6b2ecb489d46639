"""The ArangoDB adapter's fact search ranks light candidates whose cosine the database computes
(``aql.facts.fact_candidates``), then reads whole facts for the hits only. Pure parts: the
ranking of precomputed cosines equals the ranking of vectors; the generated AQL. Over the fake
(which executes no AQL), the two queries are answered as the server would, from its documents."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, cast

import numpy as np
import pytest

from tests.store.factories import FaultSwitch
from tests.store.fake_arango import FakeDB
from vcm.store import fact_rank
from vcm.store.arango import names
from vcm.store.arango.adapter import ArangoStore
from vcm.store.arango.aql import facts as aql_facts
from vcm.store.arango.facts import fact_key
from vcm.store.types import Fact, FactQuery


def _fact(i: int, value: str, embedding: list[float] | None, status: str = "active") -> Fact:
    return Fact(
        agent_id="a1", fact_id=f"f{i}", scope="agent", type="learned", key=None, value=value, category="",
        tags=(), importance=0.5, confidence=0.5, evidence=(), status=status, conflict_with=(), created_at=float(i),
        updated_at=float(i), last_used=0.0, access_count=0, expires_at=None, version=1, embedding=embedding,
    )  # fmt: skip


def _facts() -> list[Fact]:
    rng = np.random.default_rng(5)
    words = ["green tea", "black coffee", "launch date", "Lisbon trip", "piano lessons", "tea ceremony"]
    out = []
    for i in range(40):
        if i % 7 == 3:
            vector = None  # no embedding: its text part counts for both halves
        elif i % 11 == 5:
            vector = [0.5, 0.5]  # another model's length: embedded, no vector score
        elif i == 8:
            vector = [0.0, 0.0, 0.0, 0.0]  # a zero vector
        else:
            vector = [float(x) for x in rng.standard_normal(4)]
        out.append(_fact(i, f"{words[i % len(words)]} note {i}", vector))
    return out


def _cosine(a: list[float], b: list[float]) -> float | None:
    """COSINE_SIMILARITY as ArangoDB computes it (null for a zero vector)."""
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    return None if na == 0 or nb == 0 else sum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)


def _light(f: Fact, vector: list[float] | None) -> dict[str, Any]:
    """A row of fact_candidates as the server returns it."""
    embedded = bool(f.embedding)
    cosine = (
        _cosine(list(f.embedding or []), vector)
        if vector and embedded and len(f.embedding or []) == len(vector)
        else None
    )
    return {
        "agent_id": f.agent_id, "fact_id": f.fact_id, "value": f.value, "key": f.key, "tags": list(f.tags),
        "category": f.category, "updated_at": f.updated_at, "duplicate_of": f.duplicate_of, "embedded": embedded,
        "cosine": cosine,
    }  # fmt: skip


@pytest.mark.parametrize("query", ["green tea", "launch", "piano", "nothing matches this"])
@pytest.mark.parametrize("vector", [None, [0.9, -0.2, 0.1, 0.4], [1.0, 0.0, 0.0, 0.0]])
def test_ranking_precomputed_cosines_equals_ranking_vectors(query: str, vector: list[float] | None) -> None:
    facts = _facts()
    by_vectors = fact_rank.order(query, vector, [fact_rank.candidate(f) for f in facts], 10)
    light = [_light(f, vector) for f in facts]
    by_cosines = fact_rank.order(
        query, vector,
        [fact_rank.Candidate(d["fact_id"], fact_rank.document(d["value"], d["key"], d["tags"], d["category"]),
                             d["updated_at"], cosine=d["cosine"], embedded=d["embedded"]) for d in light],
        10,
    )  # fmt: skip
    assert [i for i, _ in by_cosines] == [i for i, _ in by_vectors]
    assert [s for _, s in by_cosines] == pytest.approx([s for _, s in by_vectors], abs=1e-6)


def test_the_candidates_query_returns_no_embedding_and_guards_the_cosine() -> None:
    q = aql_facts.fact_candidates(
        "a1", None, ["learned"], None, ["active", "shadow"], None, None, [("importance", ">=", 0.2)], 5000,
        [0.1, 0.2, 0.3], holders=["u:alice"],
    )  # fmt: skip
    text = q.text
    assert "FILTER f.agent_id IN @owners" in text and "FILTER f.status IN @statuses" in text
    assert "FILTER f.importance >= @range0" in text and "LIMIT @limit" in text
    returned = text[text.index("RETURN") :]
    assert "embedding" not in returned.replace("embedded", "")  # the cosine, never the vector
    assert "LENGTH(f.embedding) == @dimension ? COSINE_SIMILARITY(f.embedding, @vector) : null" in text
    assert q.bind_vars["vector"] == [0.1, 0.2, 0.3] and q.bind_vars["dimension"] == 3
    none = aql_facts.fact_candidates("a1", None, None, None, None, None, None, [], 10, None)
    assert none.bind_vars["vector"] is None and none.bind_vars["dimension"] == 0
    hits = aql_facts.query_facts("a1", None, None, None, ["active"], None, None, [], 2, False, keys=["k1", "k2"])
    assert "FILTER f._key IN @keys" in hits.text and hits.bind_vars["keys"] == ["k1", "k2"]
    assert "FILTER f.status IN @statuses" in hits.text  # the filters apply again to the hits


def test_search_facts_ranks_light_rows_and_reads_only_the_hits_whole(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, _, _ = world
    facts = _facts()
    docs = {fact_key(f.agent_id, f.fact_id): {**f.__dict__, "evidence": [], "tags": [], "conflict_with": []}
            for f in facts}  # fmt: skip
    docs[fact_key("a1", "f1")]["status"] = "archived"  # changed between the two reads: left out
    seen: list[tuple[str, dict[str, Any]]] = []

    def server(query: str, bind: dict[str, Any]) -> list[Any] | None:
        seen.append((query, bind))
        if "COSINE_SIMILARITY" in query:
            return [_light(f, bind["vector"]) for f in facts]
        if "FILTER f._key IN @keys" in query:
            found = [docs[k] for k in bind["keys"] if k in docs and docs[k]["status"] in bind["statuses"]]
            return [{k: v for k, v in d.items() if k != "embedding"} for d in found]
        return None

    cast(FakeDB, store._ro).on_query = server
    vector = [0.9, -0.2, 0.1, 0.4]
    hits = store.search_facts("a1", "green tea", vector, FactQuery(limit=5, statuses=["active"]))
    expected = [h for h in fact_rank.rank("green tea", vector, facts, 5) if h.fact.fact_id != "f1"]
    assert [h.fact.fact_id for h in hits] == [h.fact.fact_id for h in expected]
    assert [h.score for h in hits] == pytest.approx([h.score for h in expected], abs=1e-6)
    assert all(h.fact.embedding is None for h in hits)
    assert len(seen) == 2 and seen[1][1]["keys"] == [fact_key("a1", h.fact.fact_id) for h in
                                                      fact_rank.rank("green tea", vector, facts, 5)]  # fmt: skip
    assert names.FACTS in seen[0][0]


def test_dedup_candidates_are_the_light_rows_with_their_cosines(world: tuple[ArangoStore, FakeDB, FaultSwitch]) -> None:
    """Dedup reads the search's light candidates (with ``duplicate_of``), as query_facts filters,
    orders and limits them; a null cosine (no embedding, another length, a zero vector) is 0.0."""
    store, _, _ = world
    facts = _facts()
    facts[2] = replace(facts[2], status="shadow", duplicate_of="f0", key="k")
    seen: list[tuple[str, dict[str, Any]]] = []

    def server(query: str, bind: dict[str, Any]) -> list[Any] | None:
        seen.append((query, bind))
        if "COSINE_SIMILARITY" in query:
            return [_light(f, bind["vector"]) for f in facts[: bind["limit"]]]
        return None

    cast(FakeDB, store._ro).on_query = server
    vector = [0.9, -0.2, 0.1, 0.4]
    got = store.dedup_candidates("a1", FactQuery(types=["learned"], statuses=["active", "shadow"], limit=12), vector)
    assert [c.fact_id for c in got] == [f.fact_id for f in facts[:12]]
    for c, f in zip(got, facts, strict=False):
        want = _light(f, vector)["cosine"]
        assert c.cosine == pytest.approx(0.0 if want is None else want)
        assert (c.agent_id, c.value, c.key, c.duplicate_of) == (f.agent_id, f.value, f.key, f.duplicate_of)
    assert got[2].duplicate_of == "f0" and got[3].cosine == 0.0 and got[8].cosine == 0.0  # none; zero vector
    [(query, bind)] = seen
    assert bind["limit"] == 12 and bind["types"] == ["learned"] and "duplicate_of: f.duplicate_of" in query


def test_a_fact_put_back_without_its_embedding_keeps_it_while_its_value_holds(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, db, _ = world
    store.put_fact(_fact(1, "likes tea", [1.0, 0.0, 0.0, 0.0]), None)
    read = store.get_fact("a1", "f1")
    assert read.embedding is None
    store.put_fact(replace(read, importance=0.9), read.version)
    doc = db.collection(names.FACTS).get(fact_key("a1", "f1"))
    assert doc is not None and doc["embedding"] == [1.0, 0.0, 0.0, 0.0] and doc["importance"] == 0.9
    store.put_fact(replace(read, value="likes coffee", version=2), 2)  # another value: the vector is stale
    doc = db.collection(names.FACTS).get(fact_key("a1", "f1"))
    assert doc is not None and doc["embedding"] is None and doc["value"] == "likes coffee"
