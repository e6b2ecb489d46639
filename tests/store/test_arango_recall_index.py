"""ArangoDB recall at one agent's scale (issue 16): the recall vector index over
``messages.recall_emb`` and how a plan becomes AQL (pure), then the adapter's wiring against the
in-memory fake of python-arango (control flow only: the fake runs no AQL; the contract suite
against a server is the proof, ``VCM_TEST_ARANGO_URL``)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from arango.exceptions import DocumentInsertError

from tests.store.factories import FaultSwitch
from tests.store.fake_arango import FakeDB, server_error
from vcm.errors import ValidationError, VcmError
from vcm.store.arango import names, recall_index
from vcm.store.arango.adapter import ArangoStore
from vcm.store.arango.aql import recall_vectors as aql_recall_vectors
from vcm.store.arango.schema import load_schema

SPEC = load_schema().vector


def test_index_name_and_dimension_round_trip() -> None:
    assert recall_index.index_name(384) == "recall_emb_cosine_384"
    assert recall_index.index_dimension({"name": "recall_emb_cosine_384", "type": "vector"}) == 384
    assert recall_index.index_dimension({"name": "recall_emb_cosine_384", "type": "persistent"}) is None
    assert recall_index.index_dimension({"name": "vec_cosine_384", "type": "vector"}) is None
    assert recall_index.index_dimension({"name": "recall_emb_cosine_x", "type": "vector"}) is None
    with pytest.raises(ValidationError):
        recall_index.index_name(0)


def test_index_definition_is_sparse_and_stores_the_filter_attributes_from_3_12_7() -> None:
    with pytest.raises(ValidationError):  # 3.12.4/5 cannot leave vector-less messages out
        recall_index.index_definition(SPEC, 384, 10**6, (3, 12, 5))
    d6 = recall_index.index_definition(SPEC, 384, 10**6, (3, 12, 6))
    assert d6["fields"] == ["recall_emb"] and d6["sparse"] is True and d6["type"] == "vector"
    assert d6["name"] == "recall_emb_cosine_384" and "storedValues" not in d6
    assert d6["params"]["metric"] == "cosine" and d6["params"]["dimension"] == 384
    assert d6["params"]["nLists"] == SPEC.n_lists(10**6) == 4000
    assert d6["params"]["defaultNProbe"] == SPEC.default_n_probe(4000)
    d7 = recall_index.index_definition(SPEC, 384, 10**6, (3, 12, 7))
    assert d7["storedValues"] == ["agent_id", "recall_emb_version"]
    assert recall_index.can_create((3, 12, 6)) and not recall_index.can_create((3, 12, 5))


def test_count_recall_vectors_binds_the_dimension() -> None:
    q = recall_index.count_recall_vectors(384)
    assert q.bind_vars == {"dimension": 384}
    assert "LENGTH(d.recall_emb) == @dimension" in q.text and "COLLECT WITH COUNT INTO n" in q.text


def test_recall_vector_dimensions_is_a_counted_scan_of_the_vector_attribute() -> None:
    q = aql_recall_vectors.recall_vector_dimensions()
    assert "FILTER d.recall_emb != null" in q.text and "COLLECT dimension = LENGTH(d.recall_emb)" in q.text
    assert "WITH COUNT INTO n" in q.text and q.bind_vars == {}


def test_vector_query_follows_the_plan() -> None:
    vec = [0.6, 0.8]
    exact = recall_index.vector_query(
        aql_recall_vectors.RecallVectorPlan("exact", 0, 0), "a", vec, version="v", wanted=50
    )
    assert "APPROX_NEAR" not in exact.text and exact.bind_vars["fetch"] == 50
    filtered = recall_index.vector_query(
        aql_recall_vectors.RecallVectorPlan("filtered", 50, 40), "a", vec, version="v", wanted=50
    )
    assert "FILTER d.agent_id == @agent_id" in filtered.text.split("SORT APPROX_NEAR_COSINE")[0]
    assert filtered.bind_vars["n_probe"] == 40 and filtered.bind_vars["fetch"] == 50
    over = recall_index.vector_query(
        aql_recall_vectors.RecallVectorPlan("overfetch", 5000, 90), "a", vec, version="v", wanted=50
    )
    inner = over.text.split("LIMIT @fetch")[0]
    assert "APPROX_NEAR_COSINE" in inner and "FILTER" not in inner  # no FILTER between FOR and LIMIT
    assert over.bind_vars["fetch"] == 5000 and over.bind_vars["wanted"] == 50 and over.bind_vars["n_probe"] == 90


def test_read_hits_reports_a_short_approximate_answer() -> None:
    rows = [{"key": f"k{i}", "score": 1.0 - i / 100} for i in range(30)]
    filtered = aql_recall_vectors.RecallVectorPlan("filtered", 50, 40)
    hits, complete = recall_index.read_hits(filtered, rows, wanted=50, agent_vectors=20_000)
    assert len(hits) == 30 and not complete  # the probed cells held too few of the agent's
    assert recall_index.read_hits(filtered, rows, wanted=30, agent_vectors=20_000)[1]
    assert recall_index.read_hits(filtered, rows, wanted=50, agent_vectors=30)[1]  # all it has
    over = aql_recall_vectors.RecallVectorPlan("overfetch", 5000, 90)
    hits, complete = recall_index.read_hits(over, [{"candidates": 5000, "hits": rows}], wanted=20, agent_vectors=10**5)
    assert complete and hits[0] == ("k0", 1.0) and len(hits) == 20
    assert recall_index.read_hits(over, [], wanted=20, agent_vectors=10**5) == ([], False)
    assert recall_index.read_hits(
        aql_recall_vectors.RecallVectorPlan("exact", 0, 0), [], wanted=20, agent_vectors=10**5
    )[1]


def test_plan_for_is_exact_for_a_time_window_and_else_the_versions_plan() -> None:
    args: dict[str, Any] = {
        "server": (3, 12, 6),
        "agent_vectors": 10**6,
        "total_vectors": 10**7,
        "wanted": 105,
        "n_lists": 4000,
        "default_n_probe": 400,
    }
    assert recall_index.plan_for(**args, windowed=True).form == "exact"
    assert recall_index.plan_for(**args, windowed=False) == aql_recall_vectors.recall_vector_plan(**args)
    assert recall_index.plan_for(**{**args, "agent_vectors": 0}, windowed=False).form == "exact"
    # an underestimated total never makes the over-fetch smaller than the agent's own share
    old = recall_index.plan_for(**{**args, "server": (3, 12, 5), "total_vectors": 10}, windowed=False)
    assert old.form == "overfetch" and old.fetch == 2 * 105


# --- the adapter, on the fake -----------------------------------------------------------------------
def _answers(store: ArangoStore, rw: FakeDB, agent_n: int, seen: list[str], *, ann_rows: Any = None) -> None:
    """Canned answers for the recall vector queries (the fake runs no AQL)."""

    def answer(query: str, bind: dict[str, Any]) -> list[Any] | None:
        if query.startswith(f"RETURN LENGTH({names.MESSAGES})"):
            return [agent_n * 4]
        if "LENGTH(d.recall_emb) == @dimension" in query:
            return [agent_n * 2]
        if "COLLECT dimension = LENGTH(d.recall_emb)" in query:
            return [{"dimension": 2, "n": agent_n * 2}]
        if "COLLECT version = d.recall_emb_version" in query:
            return [{"version": "v1", "dimension": 2, "n": agent_n}]
        if "APPROX_NEAR_COSINE" in query:
            seen.append("filtered" if "FILTER d.agent_id" in query.split("SORT APPROX")[0] else "overfetch")
            if ann_rows is None:
                raise server_error(DocumentInsertError, 400, 1554, "vector search not applied")
            if ann_rows == "broken":
                raise server_error(DocumentInsertError, 400, 1501, "syntax error")
            return list(ann_rows)
        if "COSINE_SIMILARITY" in query:
            seen.append("exact")
            return [{"key": "exact1", "score": 0.5}]
        return None

    rw.on_query = answer
    cast(FakeDB, store._ro).on_query = answer


def _with_version(store: ArangoStore, version: str) -> None:
    store._recall_server = aql_recall_vectors.server_version(version)


def test_recall_index_is_created_by_maintenance_on_3_12_6_and_used_filtered(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, _ = world
    store._vector_threshold = 100
    seen: list[str] = []
    rows = [{"key": f"k{i}", "score": 1.0 - i / 1000} for i in range(105)]
    _answers(store, rw, 50_000, seen, ann_rows=rows)
    store.put_message_vectors("a", [("m1", [1.0, 0.0])], "v1")
    # Neither the write nor a query creates the index: until maintenance does, queries rank exactly.
    assert not [i for i in rw.indexes.get(names.MESSAGES, []) if i.get("type") == "vector"]
    assert store._rank_vectors("a", _vec(), "v1", 105, None, None) == [("exact1", 0.5)] and seen == ["exact"]
    seen.clear()
    assert not [i for i in rw.indexes.get(names.MESSAGES, []) if i.get("type") == "vector"]
    assert store.maintain_indexes() == {"created": 1}
    store._recall_indexes_at = float("-inf")
    created = [i for i in rw.indexes[names.MESSAGES] if i.get("type") == "vector"]
    assert [i["name"] for i in created] == ["recall_emb_cosine_2"]
    assert created[0]["fields"] == ["recall_emb"] and created[0]["sparse"] is True
    assert store.ensure_recall_vector_index(2)  # exists now: nothing more to do
    assert len([i for i in rw.indexes[names.MESSAGES] if i.get("type") == "vector"]) == 1
    ranked = store._rank_vectors("a", _vec(), "v1", 105, None, None)
    assert seen == ["filtered"] and ranked == [(r["key"], r["score"]) for r in rows]
    # a time window is ranked exactly (a short answer could not be told from a narrow window)
    assert store._rank_vectors("a", _vec(), "v1", 105, 0.0, None) == [("exact1", 0.5)]
    assert seen[-1] == "exact"
    # vectors of another dimension would not fit the index over the same attribute
    with pytest.raises(ValidationError, match="recall_emb_cosine_2"):
        store.put_message_vectors("a", [("m2", [1.0, 0.0, 0.0])], "v2")


def _vec() -> Any:
    import numpy as np

    return np.array([1.0, 0.0], dtype=np.float32)


def test_short_or_failed_approximate_answers_fall_back_to_exact(world: tuple[ArangoStore, FakeDB, FaultSwitch]) -> None:
    store, rw, _ = world
    rw.indexes[names.MESSAGES] = [
        {"name": "recall_emb_cosine_2", "type": "vector", "params": {"nLists": 400, "defaultNProbe": 16}}
    ]
    seen: list[str] = []
    _answers(store, rw, 50_000, seen, ann_rows=[{"key": "k0", "score": 0.9}])  # 1 of 105: short
    assert store._rank_vectors("a", _vec(), "v1", 105, None, None) == [("exact1", 0.5)]
    assert seen == ["filtered", "exact"]
    seen.clear()
    _answers(store, rw, 50_000, seen, ann_rows=None)  # the server answers 1554
    store._recall_indexes_at = float("-inf")
    assert store._rank_vectors("a", _vec(), "v1", 105, None, None) == [("exact1", 0.5)]
    assert seen == ["filtered", "exact"]
    seen.clear()
    _answers(store, rw, 5_000, seen, ann_rows=[])  # a small agent: exact without asking the index
    assert store._rank_vectors("b", _vec(), "v1", 105, None, None) == [("exact1", 0.5)] and seen == ["exact"]
    seen.clear()
    _answers(store, rw, 50_000, seen, ann_rows="broken")  # any other failure is an error, not a scan
    with pytest.raises(VcmError):
        store._rank_vectors("a", _vec(), "v1", 105, None, None)
    assert seen == ["filtered"]


def test_before_3_12_6_no_index_is_created_and_an_existing_one_is_over_fetched(
    world: tuple[ArangoStore, FakeDB, FaultSwitch],
) -> None:
    store, rw, _ = world
    _with_version(store, "3.12.5")
    store._vector_threshold = 100
    seen: list[str] = []
    rows = [{"candidates": 10_000, "hits": [{"key": f"k{i}", "score": 0.9} for i in range(105)]}]
    _answers(store, rw, 50_000, seen, ann_rows=rows)
    store.put_message_vectors("a", [("m1", [1.0, 0.0])], "v1")
    assert store.maintain_indexes() == {"created": 0}
    assert not [i for i in rw.indexes.get(names.MESSAGES, []) if i.get("type") == "vector"]
    assert not store.ensure_recall_vector_index(2, force=True)
    # an index made by hand (every message embedded) is used through the bounded over-fetch
    rw.indexes[names.MESSAGES] = [
        {"name": "recall_emb_cosine_2", "type": "vector", "params": {"nLists": 400, "defaultNProbe": 16}}
    ]
    store._recall_indexes_at = float("-inf")
    assert len(store._rank_vectors("a", _vec(), "v1", 105, None, None)) == 105 and seen == ["overfetch"]
