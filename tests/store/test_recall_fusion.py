"""Pure pieces of hybrid recall: reciprocal-rank fusion, vector checks, exact cosine top-k, and
the generated AQL of the ArangoDB vector-recall queries."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vcm.errors import ValidationError
from vcm.store.arango.aql import messages as aql_messages
from vcm.store.arango.aql import recall_vectors as aql_recall_vectors
from vcm.store.fusion import (
    check_mode,
    convex,
    cosine_top,
    hybrid,
    minmax,
    rrf,
    spread_to_neighbours,
    unit_vector,
    unit_vectors,
)


def test_rrf_sums_reciprocal_ranks() -> None:
    fused = dict(rrf([["a", "b", "c"], ["c", "a"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert [i for i, _ in rrf([["a", "b", "c"], ["c", "a"]])] == ["a", "c", "b"]


def test_rrf_ties_keep_first_appearance_and_duplicates_count_once() -> None:
    assert [i for i, _ in rrf([["x", "y"], ["y", "x"]])] == ["x", "y"]
    assert dict(rrf([["a", "a", "b"]]))["a"] == pytest.approx(1 / 61)
    assert rrf([[], []]) == []


def test_rrf_weights_and_bad_arguments() -> None:
    assert [i for i, _ in rrf([["a"], ["b"]], weights=[1.0, 2.0])] == ["b", "a"]
    with pytest.raises(ValueError):
        rrf([["a"]], weights=[1.0, 2.0])
    with pytest.raises(ValueError):
        rrf([["a"]], k=-1)
    with pytest.raises(ValueError):
        check_mode("bm25")
    assert check_mode("hybrid") == "hybrid"


def test_unit_vectors_normalise_and_keep_the_first_of_an_id() -> None:
    pairs, dim = unit_vectors([("m1", [3.0, 4.0]), ("m2", [0.0, 2.0]), ("m1", [1.0, 0.0])], "v1")
    assert dim == 2 and [m for m, _ in pairs] == ["m1", "m2"]
    assert pairs[0][1].tolist() == pytest.approx([0.6, 0.8])
    assert unit_vectors([], "v1") == ([], 0)
    for bad in ([("m1", [1.0, 0.0]), ("m2", [1.0])], [("m1",)], "m1", [("", [1.0])]):
        with pytest.raises(ValidationError):
            unit_vectors(bad, "v1")
    with pytest.raises(ValidationError):
        unit_vectors([("m1", [1.0, 0.0])], "v1", dimension=3)
    with pytest.raises(ValidationError):
        unit_vectors([("m1", [1.0])], None)
    with pytest.raises(ValidationError):
        unit_vector([0.0, 0.0])
    with pytest.raises(ValidationError):
        unit_vector([float("inf")])


def test_cosine_top_is_exact_with_stable_ties() -> None:
    matrix = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8]], dtype=np.float32)
    q = np.array([1, 0], dtype=np.float32)
    top = cosine_top(q, ["a", "b", "c", "d"], matrix, 3)
    assert [i for i, _ in top] == ["a", "c", "d"]
    assert [s for _, s in top] == pytest.approx([1.0, 1.0, 0.6])
    assert cosine_top(q, [], matrix[:0], 3) == []
    assert cosine_top(q, ["a"], matrix[:1], 0) == []


def _between_for_and_limit(text: str) -> str:
    inner = re.search(r"LET cand = \(\n(.*?)\n\)", text, re.S)
    assert inner is not None
    return inner.group(1)


def test_recall_vector_ann_keeps_no_filter_inside_the_approx_near_subquery() -> None:
    q = aql_recall_vectors.recall_vector_ann(
        A := "agent-a", [0.6, 0.8], version="v1", fetch=200, wanted=20, n_probe=8, since=1.0
    )
    inner = _between_for_and_limit(q.text)
    lines = [line.strip() for line in inner.splitlines()]
    assert lines[0].startswith("FOR d IN messages") and lines[1].startswith("LET score = APPROX_NEAR_COSINE(")
    assert lines[2:] == ["SORT score DESC", "LIMIT @fetch", "RETURN d"]
    assert "FILTER" not in inner
    outer = q.text.split("LET hits = (", 1)[1]
    assert "FILTER c.agent_id == @agent_id AND c.recall_emb_version == @version" in outer
    assert "FILTER c.created_at >= @since" in outer and "@until" not in q.text
    assert "COSINE_SIMILARITY(c.recall_emb, @vector)" in outer
    assert q.bind_vars == {
        "agent_id": A,
        "version": "v1",
        "vector": [0.6, 0.8],
        "fetch": 200,
        "wanted": 20,
        "n_probe": 8,
        "since": 1.0,
    }


def test_recall_vector_exact_and_put_and_versions() -> None:
    q = aql_recall_vectors.recall_vector_exact("agent-a", [1, 0], version="v1", fetch=50, until=9.0)
    assert "COSINE_SIMILARITY(d.recall_emb, @vector)" in q.text
    assert "SORT score DESC, d.created_at ASC, d._key ASC" in q.text and "FILTER d.created_at < @until" in q.text
    assert q.bind_vars["vector"] == [1.0, 0.0] and q.bind_vars["fetch"] == 50
    with pytest.raises(ValidationError):
        aql_recall_vectors.recall_vector_exact("agent-a", [1.0], version="v1", fetch=0)
    with pytest.raises(ValidationError):
        aql_recall_vectors.recall_vector_ann("agent-a", [1.0], version="v1", fetch=10, wanted=0, n_probe=1)
    put = aql_recall_vectors.put_message_vectors("agent-a", [("k1", [1, 0])], "v1")
    # a missing vector, or one of another version (a model change), is written; the same version stays
    assert "(d.recall_emb == null OR d.recall_emb_version != @version)" in put.text and "UPDATE d WITH" in put.text
    assert put.bind_vars["items"] == [{"key": "k1", "vector": [1.0, 0.0]}]
    versions = aql_recall_vectors.recall_vector_versions("agent-a")
    assert "COLLECT version = d.recall_emb_version" in versions.text and "SORT n DESC" in versions.text


def test_minmax_maps_each_list_onto_zero_one() -> None:
    assert minmax([("a", 4.0), ("b", 2.0), ("c", 1.0), ("a", 0.0)]) == pytest.approx({"a": 1.0, "b": 1 / 3, "c": 0.0})
    assert minmax([("a", 0.3), ("b", 0.3)]) == {"a": 1.0, "b": 1.0}
    assert minmax([]) == {}
    assert minmax([("a", 4.0), ("b", 1.0), ("c", -1.0)], floor=0.0) == {"a": 1.0, "b": 0.25, "c": 0.0}


def test_convex_weighs_normalised_scores_and_missing_items_get_zero() -> None:
    text = [("a", 10.0), ("b", 5.0), ("c", 2.5)]
    vector = [("c", 0.9), ("b", 0.5), ("d", 0.1)]
    fused = convex(text, vector, text_weight=0.25)
    # BM25 over its best score (floor 0), cosine min-max over its list.
    assert fused == pytest.approx({"a": 0.25, "b": 0.25 * 0.5 + 0.75 * 0.5, "c": 0.25 * 0.25 + 0.75, "d": 0.0})
    assert list(fused) == ["a", "b", "c", "d"]  # first appearance, text first
    with pytest.raises(ValueError):
        convex(text, vector, text_weight=1.5)


def test_spread_adds_a_share_of_the_better_adjacent_score() -> None:
    scores = {"a": 1.0, "b": 0.0, "c": 0.4, "far": 0.8, "loose": 0.5}
    seq = {"a": 10, "b": 11, "c": 12, "far": 20, "gone": 21}
    spread = spread_to_neighbours(scores, seq, weight=0.5, reach=1)
    # b sits between a and c and takes half of a's score; a and c each see only b; "far" has
    # no scored neighbour (21 is not scored); "loose" has no position and keeps its score.
    assert spread == pytest.approx({"a": 1.0, "b": 0.5, "c": 0.4, "far": 0.8, "loose": 0.5})
    # Two turns away, the weight counts squared: a and c now see each other.
    two = spread_to_neighbours(scores, seq, weight=0.5, reach=2)
    assert two == pytest.approx({"a": 1.1, "b": 0.5, "c": 0.65, "far": 0.8, "loose": 0.5})
    assert spread_to_neighbours(scores, seq, weight=0.0) == scores
    assert spread_to_neighbours(scores, seq, reach=0) == scores
    with pytest.raises(ValueError):
        spread_to_neighbours(scores, seq, weight=-1.0)
    with pytest.raises(ValueError):
        spread_to_neighbours(scores, seq, reach=-1)


def test_hybrid_lifts_the_turn_next_to_a_strong_match_above_weak_ones() -> None:
    # "answer" matches nothing itself, but follows the best keyword match.
    text = [("question", 8.0), ("other", 2.0), ("noise", 1.0)]
    vector = [("question", 0.6), ("noise", 0.5), ("answer", 0.45), ("other", 0.1)]
    seq = {"question": 1, "answer": 2, "other": 7, "noise": 12}
    ranked = [i for i, _ in hybrid(text, vector, seq)]
    assert ranked[0] == "question"
    assert ranked.index("answer") < ranked.index("other")
    flat = [i for i, _ in hybrid(text, vector, seq, neighbour_weight=0.0)]
    assert flat.index("answer") > flat.index("noise")


def test_list_messages_pages_by_seq_on_the_agent_seq_index() -> None:
    q = aql_messages.list_messages("agent-a", 41, 100)
    assert "FILTER d.agent_id == @agent_id AND d.seq > @after_seq" in q.text
    assert q.text.index("FILTER") < q.text.index("SORT d.seq ASC\n") < q.text.index("LIMIT @limit")
    assert q.bind_vars == {"agent_id": "agent-a", "after_seq": 41, "limit": 100}
