"""The AQL the ArangoDB adapter sends, checked as text (no server needed).

These pin the rules that make the queries correct on every ArangoDB 3.12.x: no FILTER inside the
APPROX_NEAR loop, an explicit analyzer for full-text search, and user input only in bind vars.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from vcm.errors import ValidationError
from vcm.store.arango import names
from vcm.store.arango.aql import agents as aql_agents
from vcm.store.arango.aql import archival as aql_archival
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import events as aql_events
from vcm.store.arango.aql import graph as aql_graph
from vcm.store.arango.aql import maintenance as aql_maintenance
from vcm.store.arango.aql import messages as aql_messages
from vcm.store.arango.aql import recall_vectors as aql_recall_vectors

INJECTION = 'x" RETURN 1 //'
NASTY = [INJECTION, "a` REMOVE d IN messages", "'; DROP", "@@users RETURN 1", "}} LET x = 1"]


def ann(**overrides: Any) -> aql_common.AqlQuery:
    args: dict[str, Any] = {
        "metric": "cosine",
        "dimension": 3,
        "fetch": 40,
        "wanted": 10,
        "n_probe": 8,
        "filters": aql_common.parse_filters({"doc_id": "d1", "topic": "news", "lang": "en"}),
        "embedding_version": "v1",
        "now": 123.0,
    }
    args.update(overrides)
    return aql_archival.archival_ann("agent-1", [0.1, 0.2, 0.3], **args)


def inner_ann_loop(text: str) -> str:
    """From ``FOR d IN archival_docs`` to the first LIMIT after it."""
    match = re.search(r"FOR d IN archival_docs(.*?)\bLIMIT\b", text, re.S)
    assert match, text
    return match.group(1)


@pytest.mark.parametrize("metric", ["cosine", "l2"])
def test_ann_has_no_filter_between_for_and_limit(metric: str) -> None:
    q = ann(metric=metric)
    inner = inner_ann_loop(q.text)
    assert "FILTER" not in inner
    assert ("APPROX_NEAR_COSINE" if metric == "cosine" else "APPROX_NEAR_L2") in inner
    assert "{ nProbe: @n_probe }" in inner
    assert ("DESC" if metric == "cosine" else "ASC") in inner
    assert q.bind_vars["n_probe"] == 8 and q.bind_vars["fetch"] == 40


def test_ann_filters_only_in_the_outer_loop() -> None:
    q = ann()
    inner_end = q.text.index("RETURN d\n)")
    inner, outer = q.text[:inner_end], q.text[inner_end:]
    for needle in ("agent_id", "embedding_version", "doc_id", "metadata", "valid_until"):
        assert needle not in inner, needle
        assert needle in outer, needle
    assert outer.index("FOR c IN cand") < outer.index("FILTER c.agent_id == @agent_id")
    # survivors are re-scored exactly, so scores mean the same as in exact mode
    assert "COSINE_SIMILARITY(c.emb_cosine_3, @vector)" in outer


def test_metadata_filters_are_bind_vars_and_require_the_key() -> None:
    q = ann()
    assert "HAS(c.metadata, @mk0) AND c.metadata[@mk0] == @mv0" in q.text
    assert {q.bind_vars["mk0"], q.bind_vars["mk1"]} == {"lang", "topic"}
    assert q.bind_vars["fv0"] == "d1"
    assert "news" not in q.text and "topic" not in q.text


def test_ann_stale_chunks_kept_only_on_request() -> None:
    assert "valid_until" in ann().text
    q = ann(filters=aql_common.parse_filters({"include_stale": True}))
    assert "valid_until" not in q.text and "now" not in q.bind_vars


def test_exact_search_uses_the_exact_functions_and_may_filter() -> None:
    q = aql_archival.archival_exact(
        "a",
        [1.0, 0.0],
        metric="l2",
        dimension=2,
        wanted=5,
        filters=aql_common.parse_filters({"source": "s"}),
        embedding_version=None,
        now=1.0,
    )
    assert "L2_DISTANCE(d.emb_l2_2, @vector)" in q.text and "APPROX_NEAR" not in q.text
    assert "SORT score ASC, d._key ASC" in q.text
    assert "FILTER d.agent_id == @agent_id" in q.text and "FILTER d.source == @fv0" in q.text
    c = aql_archival.archival_exact(
        "a",
        [1.0],
        metric="cosine",
        dimension=1,
        wanted=5,
        filters=aql_common.ArchivalFilter(),
        embedding_version="v",
        now=1.0,
    )
    assert "COSINE_SIMILARITY" in c.text and "SORT score DESC" in c.text


def test_recall_search_names_its_analyzer_and_merges_the_unindexed_tail() -> None:
    q = aql_messages.recall_search("agent-1", "dark mode", fetch=11, since=5.0, until=9.0, lag_ms=2000)
    text = q.text
    assert 'SEARCH ANALYZER(d.content IN TOKENS(@q, "text_en"), "text_en")' in text
    assert "AND d.agent_id == @agent_id" in text
    assert "SORT score DESC" in text and "BM25(d, @k1, @b)" in text
    assert "d.created_at >= @since" in text and "d.created_at < @until" in text  # until exclusive
    # read-after-write: a scan of the collection over the ingestion window, merged by score
    assert f"FOR d IN {names.MESSAGES}" in text and "d.ingested_at >= fresh_since" in text
    assert "LET fresh_since = DATE_NOW() - @lag_ms" in text
    assert "UNION(indexed, fresh_scored)" in text and "LIMIT @fetch" in text
    assert q.bind_vars["q"] == "dark mode" and q.bind_vars["lag_ms"] == 2000
    assert "dark" not in text


def test_recall_positions_read_seq_of_the_agents_messages_by_id() -> None:
    q = aql_recall_vectors.recall_positions("a", ["k1", "k2"])
    assert q.bind_vars == {"agent_id": "a", "ids": [f"{names.MESSAGES}/k1", f"{names.MESSAGES}/k2"]}
    assert "DOCUMENT(id)" in q.text and "d.agent_id == @agent_id" in q.text
    assert "seq: d.seq" in q.text
    with_version = aql_recall_vectors.recall_positions("a", ["k1"], "v1")
    assert "embedded: d.recall_emb_version == @version" in with_version.text
    assert with_version.bind_vars["version"] == "v1"


def test_recall_without_time_window_binds_none() -> None:
    q = aql_messages.recall_search("a", "hello", fetch=3)
    assert "since" not in q.bind_vars and "until" not in q.bind_vars
    assert "@since" not in q.text and "@until" not in q.text


@pytest.mark.parametrize("evil", NASTY)
def test_user_strings_never_reach_query_text(evil: str) -> None:
    queries = [
        aql_messages.recall_search(evil, evil, fetch=5, since=1.0, until=2.0),
        ann(filters=aql_common.parse_filters({"doc_id": evil, "source": evil, "topic": evil}), embedding_version=evil),
        aql_archival.archival_document(evil, evil),
        aql_events.events_page(evil, [evil], since=1.0, after=(1.0, evil), limit=5, actor=evil, idempotency_key=evil),
        aql_graph.traverse(f"messages/{evil}", ["cites"], max_depth=2, direction="any"),
        aql_messages.count_messages(evil),
        aql_messages.list_core(evil),
        aql_messages.committed_batches(evil),
        aql_common.documents([f"messages/{evil}"], evil),
        aql_common.insert_ignore(names.MESSAGES, [{"_key": "k", "content": evil}]),
        aql_maintenance.stats(evil),
        aql_recall_vectors.recall_positions(evil, [evil]),
    ]
    for q in queries:
        assert evil not in q.text
        assert evil in repr(q.bind_vars)


def test_metadata_keys_must_be_identifiers() -> None:
    with pytest.raises(ValidationError):
        aql_common.parse_filters({INJECTION: 1})
    with pytest.raises(ValidationError):
        aql_common.parse_filters({"include_stale": "yes"})
    with pytest.raises(ValidationError):
        aql_common.parse_filters({"x": float("nan")})
    with pytest.raises(ValidationError):
        aql_common.parse_filters({"x": object()})
    f = aql_common.parse_filters({"doc_id": "d", "model_id": "m", "k-1": [1, {"a": None}]})
    assert dict(f.fields) == {"doc_id": "d", "model_id": "m"} and dict(f.metadata) == {"k-1": [1, {"a": None}]}


def test_collections_are_constants_or_collection_bind_vars() -> None:
    q = aql_common.insert_ignore(names.EVENTS, [{"_key": "e"}])
    assert "INTO @@collection" in q.text and q.bind_vars["@collection"] == names.EVENTS
    assert 'OPTIONS { overwriteMode: "ignore" }' in q.text and "RETURN NEW._key" in q.text
    with pytest.raises(ValidationError):
        aql_common.insert_ignore("users", [])
    stamped = aql_common.insert_ignore(names.MESSAGES, [{"_key": "m"}], stamp_ingested=True)
    assert "ingested_at: DATE_NOW()" in stamped.text
    with pytest.raises(ValidationError):
        aql_common.remove_edges_of(names.MESSAGES, [])


def test_vector_attribute_is_validated() -> None:
    assert aql_common.vector_attribute("cosine", 384) == "emb_cosine_384"
    for metric, dim in (("dot", 3), ("cosine", 0), ("l2", 10**6)):
        with pytest.raises(ValidationError):
            aql_common.vector_attribute(metric, dim)  # type: ignore[arg-type]


def test_traverse_uses_the_named_graph_breadth_first() -> None:
    q = aql_graph.traverse("core_memory/a", ["recall_log", "cites"], max_depth=3, direction="inbound")
    assert 'INBOUND @start GRAPH "g_mem"' in q.text
    assert 'order: "bfs", uniqueVertices: "global"' in q.text
    assert "edgeCollections: @edge_collections" in q.text
    assert q.bind_vars == {
        "start": "core_memory/a",
        "max_depth": 3,
        "edge_collections": ["recall_log", "cites"],
    }
    with pytest.raises(ValidationError):
        aql_graph.traverse("x/y", ["cites"], max_depth=1, direction="sideways")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        aql_graph.traverse("x/y", ["users"], max_depth=1, direction="any")


def test_events_page_is_keyset_ordered() -> None:
    q = aql_events.events_page("a", ["evict"], since=5.0, after=(7.0, "k"), limit=11)
    assert "SORT e.created_at ASC, e._key ASC" in q.text
    assert "e.created_at > @after_t OR (e.created_at == @after_t AND e._key > @after_k)" in q.text
    assert q.bind_vars["after_t"] == 7.0 and q.bind_vars["after_k"] == "k"


def test_events_page_filters_are_bound_not_spliced() -> None:
    q = aql_events.events_page(None, None, since=1.0, until=9.0, actor="cli", idempotency_key="k", after=None, limit=5)
    assert q.text == (
        "FOR e IN memory_events\n"
        "  FILTER e.created_at >= @since\n"
        "  FILTER e.created_at < @until\n"
        "  FILTER e.actor == @actor\n"
        "  FILTER e.idempotency_key == @idempotency_key\n"
        "  SORT e.created_at ASC, e._key ASC\n"
        "  LIMIT @limit\n"
        "  RETURN e"
    )
    assert q.bind_vars == {"limit": 5, "since": 1.0, "until": 9.0, "actor": "cli", "idempotency_key": "k"}
    bare = aql_events.events_page(None, None, since=None, after=None, limit=5)
    assert "@until" not in bare.text and "@actor" not in bare.text and "@idempotency_key" not in bare.text


def test_expire_is_strict_and_batched() -> None:
    q = aql_maintenance.expire_messages(50.0, 100)
    assert "d.expires_at != null AND d.expires_at < @now" in q.text
    assert "LIMIT @batch" in q.text and "RETURN OLD._id" in q.text


def test_stats_report_the_port_keys() -> None:
    for q in (aql_maintenance.stats(None), aql_maintenance.stats("a")):
        for key in (
            "messages",
            "archival_chunks",
            "events",
            "edges",
            "committed_batches",
            "core_blocks",
            "recall_log_edges",
            "message_vectors",
        ):
            assert f"{key}:" in q.text


def test_message_vector_keys_reads_one_version_of_one_agent() -> None:
    q = aql_recall_vectors.message_vector_keys("a", ["a:m1", "a:m2"], "v1")
    assert "FILTER d._key IN @keys AND d.agent_id == @agent_id AND d.recall_emb_version == @version" in q.text
    assert q.bind_vars == {"keys": ["a:m1", "a:m2"], "agent_id": "a", "version": "v1"}


# --- vector recall at scale (issue 16) ------------------------------------------------------
def test_filtered_recall_ann_has_one_filter_before_the_vector_sort() -> None:
    q = aql_recall_vectors.recall_vector_ann_filtered(
        "agent-1", [0.1, 0.2, 0.3], version="v1", fetch=1000, n_probe=40, since=1.0, until=2.0
    )
    head = q.text[: q.text.index("LIMIT @fetch")]
    assert head.count("FILTER") == 1
    near = "SORT APPROX_NEAR_COSINE(d.recall_emb, @vector, { nProbe: @n_probe }) DESC"
    assert head.index("FILTER") < head.index(near)
    for cond in ("d.agent_id == @agent_id", "d.recall_emb_version == @version", "@since", "@until"):
        assert cond in head
    assert "COSINE_SIMILARITY(d.recall_emb, @vector)" in q.text  # re-scored exactly
    assert q.bind_vars["fetch"] == 1000 and q.bind_vars["n_probe"] == 40 and q.bind_vars["agent_id"] == "agent-1"
    plain = aql_recall_vectors.recall_vector_ann_filtered("a", [1.0], version="v", fetch=5, n_probe=1)
    assert "since" not in plain.bind_vars and "@since" not in plain.text
    with pytest.raises(ValidationError):
        aql_recall_vectors.recall_vector_ann_filtered("a", [1.0], version="v", fetch=0, n_probe=1)


@pytest.mark.parametrize("evil", NASTY)
def test_filtered_recall_ann_binds_user_strings(evil: str) -> None:
    q = aql_recall_vectors.recall_vector_ann_filtered(evil, [1.0], version=evil, fetch=5, n_probe=1)
    assert evil not in q.text and evil in repr(q.bind_vars)


def test_server_version_parses_release_strings() -> None:
    assert aql_recall_vectors.server_version("3.12.5") == (3, 12, 5)
    assert aql_recall_vectors.server_version("3.12.6-1") == (3, 12, 6)
    assert aql_recall_vectors.server_version("3.13") == (3, 13, 0)
    with pytest.raises(ValidationError):
        aql_recall_vectors.server_version("devel")


def test_recall_vector_plan_picks_the_form_by_version_and_share() -> None:
    def plan(server: str, agent: int, total: int, n_lists: int | None = 3162) -> aql_recall_vectors.RecallVectorPlan:
        return aql_recall_vectors.recall_vector_plan(
            server=aql_recall_vectors.server_version(server),
            agent_vectors=agent,
            total_vectors=total,
            wanted=1000,
            n_lists=n_lists,
            default_n_probe=50,
        )

    # No trained index, or a small agent: exact.
    assert plan("3.12.6", 10**6, 10**7, n_lists=None).form == "exact"
    assert plan("3.12.6", 9_999, 10**7).form == "exact"
    # 3.12.6+: filtered lookup; nProbe raised until the cells hold the wanted depth of the agent.
    big = plan("3.12.6", 10**6, 10**7)
    assert big == aql_recall_vectors.RecallVectorPlan("filtered", 1000, 50)  # 2*1000*3162/1e6 = 7 < default
    small_share = plan("3.12.7", 20_000, 10**7)
    assert small_share.form == "filtered" and small_share.n_probe == 317  # ceil(2*1000*3162/20000)
    assert plan("3.12.10", 20_000, 10**7, n_lists=40).n_probe == 40  # never above nLists
    # 3.12.4/5: global over-fetch sized by the agent's share, bounded; beyond the bound exact.
    over = plan("3.12.5", 10**6, 10**7)
    assert over.form == "overfetch" and over.fetch == 20_000
    assert over.n_probe == max(50, -(-2 * 20_000 * 3162 // 10**7))
    assert plan("3.12.4", 10**5, 10**8).form == "exact"  # fetch would be 2e6 > RECALL_MAX_FETCH
    with pytest.raises(ValidationError):
        aql_recall_vectors.recall_vector_plan(
            server=(3, 12, 6), agent_vectors=5, total_vectors=4, wanted=1, n_lists=2, default_n_probe=1
        )


def test_uncommitted_messages_sorts_on_the_indexed_seq_and_probes_edges_by_to() -> None:
    q = aql_agents.uncommitted_messages("a1", "core_memory/a1_3aqueue_5fhead_5fsummary", 5, 100)
    text = q.text
    assert text.index("SORT m.seq ASC") < text.index("LIMIT @limit")
    assert "e._to == m._id AND e._from == @summary" in text
    assert q.bind_vars == {
        "agent_id": "a1",
        "after": 5,
        "summary": "core_memory/a1_3aqueue_5fhead_5fsummary",
        "limit": 100,
    }


def test_agent_owned_removals_only_touch_known_collections() -> None:
    for collection in names.AGENT_OWNED:
        q = aql_common.remove_of_agent(collection, "a1")
        assert q.bind_vars == {"@collection": collection, "agent_id": "a1"}
        assert "FILTER d.agent_id == @agent_id" in q.text
    with pytest.raises(ValidationError):
        aql_common.remove_of_agent("_users", "a1")


def test_advance_id_floor_never_lowers_and_list_snapshots_leaves_payloads_out() -> None:
    assert "MAX([a.id_floor, @floor])" in aql_agents.advance_id_floor("k", 3).text
    assert 'UNSET(s, "payload")' in aql_agents.list_snapshots("a1", 1.0).text
