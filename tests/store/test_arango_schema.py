"""config/arango_schema.json: loads, agrees with store/arango/names.py, holds what vcm needs."""

from __future__ import annotations

import json

import pytest

from vcm.store.arango import names
from vcm.store.arango.errors import ArangoConfigError
from vcm.store.arango.schema import SCHEMA_PATH, graph_changes, load_schema, parse_schema, vector_state


@pytest.fixture(scope="module")
def raw() -> dict[str, object]:
    loaded: dict[str, object] = json.loads(SCHEMA_PATH.read_text())
    return loaded


def test_schema_loads_and_matches_the_names_module() -> None:
    schema = load_schema()
    assert set(schema.collection_names()) == set(names.ALL_COLLECTIONS)
    kinds = dict(schema.collections)
    assert {n for n, k in kinds.items() if k == "edge"} == set(names.EDGE_COLLECTIONS)
    assert [v["name"] for v in schema.views] == [names.VIEW]
    assert [g["name"] for g in schema.graphs] == [names.GRAPH]
    assert schema.vector.collection == names.ARCHIVAL


def test_every_graph_collection_exists() -> None:
    schema = load_schema()
    collections = dict(schema.collections)
    for graph in schema.graphs:
        for definition in graph["edge_definitions"]:
            assert collections[definition["edge_collection"]] == "edge"
            for vertex in definition["from_vertex_collections"] + definition["to_vertex_collections"]:
                assert collections[vertex] == "document", vertex
            # the port lets any edge kind join any two node collections
            assert set(definition["from_vertex_collections"]) == set(names.NODE_COLLECTIONS)
            assert set(definition["to_vertex_collections"]) == set(names.NODE_COLLECTIONS)


def test_required_indexes_are_declared() -> None:
    schema = load_schema()

    def fields(collection: str) -> list[list[str]]:
        return [i["fields"] for i in schema.indexes.get(collection, [])]

    assert ["_from", "created_at"] in fields(names.RECALL_LOG)
    assert ["agent_id", "created_at"] in fields(names.MESSAGES)
    assert ["agent_id", "seq"] in fields(names.MESSAGES)
    assert ["agent_id", "ingested_at"] in fields(names.MESSAGES)  # read-after-write recall
    assert ["agent_id", "created_at"] in fields(names.EVENTS)
    ttl = [i for i in schema.indexes[names.CURSORS] if i["type"] == "ttl"]
    assert ttl and ttl[0]["expireAfter"] == 0
    coll, retention = schema.optional_indexes["message_retention"]
    assert coll == names.MESSAGES and retention["type"] == "ttl" and retention["fields"] == ["expires_at"]
    for defs in schema.indexes.values():
        for index in defs:
            assert "comment" not in index  # comments are stripped before they reach the server
            assert index["name"]


def test_view_links_content_with_text_en_and_the_filter_fields() -> None:
    view = load_schema().views[0]
    props = view["properties"]
    link = props["links"][names.MESSAGES]
    assert view["type"] == "arangosearch"
    assert link["fields"]["content"]["analyzers"] == [names.TEXT_ANALYZER]
    assert link["fields"]["agent_id"]["analyzers"] == ["identity"]
    assert "created_at" in link["fields"]
    assert props["commitIntervalMsec"] == 1000
    analyzer = load_schema().analyzers[0]
    assert analyzer["name"] == names.TEXT_ANALYZER
    assert set(analyzer["features"]) == {"frequency", "norm", "position"}


def test_vector_index_spec() -> None:
    spec = load_schema().vector
    d = spec.definition("cosine", 384, 10_000)
    assert d["type"] == "vector" and d["fields"] == ["emb_cosine_384"] and d["sparse"] is True
    assert d["name"] == "vec_cosine_384"
    params = d["params"]
    assert params["metric"] == "cosine" and params["dimension"] == 384
    assert params["nLists"] == 256  # 4*sqrt(10000)=400, capped at 10000/39
    assert params["defaultNProbe"] == 26 and params["trainingIterations"] == 25
    assert spec.n_lists(1_000_000) == 4000
    assert spec.n_lists(100) == 2 and spec.n_lists(1) == 1
    assert spec.threshold() == 10_000
    for n in (1, 50, 10_000, 10**7):
        assert spec.n_lists(n) <= max(n, 1) and spec.default_n_probe(spec.n_lists(n)) <= spec.n_lists(n)


def test_vector_state_from_index_info() -> None:
    assert vector_state(None) == "exact"
    assert vector_state({"type": "vector"}) == "ivf"  # up to 3.12.8: listed means trained
    assert vector_state({"training_state": "ready"}) == "ivf"
    assert vector_state({"trainingState": "training"}) == "exact"
    assert vector_state({"training_state": "unusable"}) == "exact"


def test_malformed_schema_is_a_config_error(raw: dict[str, object]) -> None:
    broken = dict(raw)
    del broken["vector_index"]
    with pytest.raises(ArangoConfigError):
        parse_schema(broken)
    with pytest.raises(ArangoConfigError):
        load_schema("/nonexistent/schema.json")


def test_an_existing_graph_is_only_ever_widened() -> None:
    wanted = load_schema().graphs[0]["edge_definitions"]
    old_vertices = ["core_memory", "messages", "archival_docs", "memory_events"]
    earlier = [
        {"edge_collection": k, "from_vertex_collections": old_vertices, "to_vertex_collections": old_vertices}
        for k in ("recall_log", "cites", "derived_from")
    ]
    changes = graph_changes(earlier, wanted)
    assert [(op, d["edge_collection"]) for op, d in changes] == [
        ("replace", "recall_log"), ("replace", "cites"), ("replace", "derived_from"),
        ("create", "mentions"), ("create", "relates_to"),
    ]  # fmt: skip
    for _, d in changes:
        assert "agent_longterm_memory" in d["from_vertex_collections"]
        assert set(old_vertices) <= set(d["to_vertex_collections"])
    # A graph that already allows more keeps it, and an up-to-date graph needs nothing.
    wider = [{**d, "to_vertex_collections": [*d["to_vertex_collections"], "extra"]} for d in wanted]
    assert graph_changes(wider, wanted) == []
    assert graph_changes(wanted, wanted) == []
