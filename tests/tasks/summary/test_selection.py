"""Sentence splitting, salience and MMR selection, on small hand-made inputs."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vcm.tasks.summary import sentences
from vcm.tasks.summary.selection import centrality, centroid, lexical_centrality, mmr_select, stratified_pick, unit


def rows(*vectors: list[float]) -> np.ndarray:
    return np.array([unit(v) for v in vectors], dtype=np.float32)


def test_split_cuts_sentences_and_long_ones_at_word_boundaries() -> None:
    text = "We moved the launch. Is it May 3?\nYes! " + "word " * 30
    out = sentences.split(text, 40)
    assert out[:3] == ["We moved the launch.", "Is it May 3?", "Yes!"]
    assert all(len(s) <= 40 for s in out)
    assert " ".join(out[3:]).split() == ["word"] * 30


@given(st.text(alphabet=st.sampled_from("ab .!?\n"), max_size=300), st.integers(4, 60))
@settings(max_examples=200, deadline=None)
def test_split_keeps_every_word_and_respects_the_limit(text: str, limit: int) -> None:
    out = sentences.split(text, limit)
    assert all(0 < len(s) <= limit for s in out)
    assert "".join("".join(out).split()) == "".join(text.split())


def test_salience_rewards_names_numbers_and_identifiers() -> None:
    assert sentences.salience("the cat sat on the mat.") == 0.0
    assert sentences.salience("Then I said yes.") == 0.0  # grammar capitals are not names
    assert sentences.salience("we met Alice there.") > 0
    assert sentences.salience("it costs 40 dollars.") > 0
    assert sentences.salience("see ticket inv_2041 please.") > 0
    assert sentences.salience("Bob paid INV-2041 on May 3.") > sentences.salience("we met Alice there.")


def test_centrality_ranks_the_typical_row_first() -> None:
    v = rows([1, 0, 0], [0.9, 0.1, 0], [0, 0, 1])
    ref = centroid(v)
    c = centrality(v, ref)
    assert int(np.argmax(c)) in (0, 1) and int(np.argmin(c)) == 2


def test_mmr_prefers_relevance_then_avoids_near_duplicates() -> None:
    v = rows([1, 0, 0], [0.99, 0.01, 0], [0, 1, 0])
    relevance = np.array([1.0, 0.95, 0.6])
    costs = [1, 1, 1]
    # pure relevance: the near-duplicate comes second
    assert mmr_select(relevance, v, costs, 2, 1.0, candidates=[0, 1, 2]) == [0, 1]
    # with diversity, the distinct row beats the near-duplicate
    assert mmr_select(relevance, v, costs, 2, 0.5, candidates=[0, 1, 2]) == [0, 2]


def test_mmr_counts_chosen_rows_for_redundancy_only() -> None:
    v = rows([1, 0], [0.99, 0.01], [0, 1])
    relevance = np.array([1.0, 0.9, 0.5])
    picked = mmr_select(relevance, v, [5, 1, 1], 1, 0.5, candidates=[1, 2], chosen=[0])
    assert picked == [2]  # row 1 duplicates the chosen row 0; the budget ignores row 0's cost


def test_mmr_skips_what_does_not_fit_and_takes_what_does() -> None:
    v = rows([1, 0], [0, 1], [1, 1])
    relevance = np.array([1.0, 0.2, 0.1])
    assert mmr_select(relevance, v, [10, 2, 2], 4, 0.7, candidates=[0, 1, 2]) == [1, 2]
    assert mmr_select(relevance, v, [10, 2, 2], 1, 0.7, candidates=[0, 1, 2]) == []


@given(
    st.lists(
        st.tuples(st.floats(-1, 1), st.floats(-1, 1), st.floats(0, 1), st.integers(1, 9)), min_size=1, max_size=12
    ),
    st.integers(0, 40),
    st.floats(0, 1),
)
@settings(max_examples=200, deadline=None)
def test_mmr_never_exceeds_the_budget_nor_repeats(
    items: list[tuple[float, float, float, int]], budget: int, lam: float
) -> None:
    v = np.array([unit([x, y, 0.01]) for x, y, _, _ in items], dtype=np.float32)
    relevance = np.array([r for _, _, r, _ in items])
    costs = [c for _, _, _, c in items]
    picked = mmr_select(relevance, v, costs, budget, lam, candidates=range(len(items)))
    assert len(set(picked)) == len(picked)
    assert sum(costs[i] for i in picked) <= budget
    left = budget - sum(costs[i] for i in picked)
    assert all(costs[i] > left for i in range(len(items)) if i not in picked)  # greedy stops only when full


def test_lexical_centrality_without_a_model() -> None:
    texts = ["alice likes green tea", "alice likes green tea a lot", "the weather turned bad", ""]
    scores = lexical_centrality(texts)
    assert scores[0] > scores[2] and scores[1] > scores[2] and scores[3] == 0.0
    assert lexical_centrality([]).shape == (0,)


def test_stratified_pick_keeps_the_best_of_each_stretch() -> None:
    scores = [0.1, 0.9, 0.2, 0.3, 0.8, 0.1, 0.5, 0.4, 0.6]
    assert stratified_pick(scores, 3) == [1, 4, 8]
    assert stratified_pick(scores, 20) == list(range(9))
    assert stratified_pick(scores, 0) == []


@given(st.lists(st.floats(0, 1), max_size=60), st.integers(1, 70))
@settings(max_examples=100, deadline=None)
def test_stratified_pick_is_a_sorted_spread_of_at_most_limit(scores: list[float], limit: int) -> None:
    picks = stratified_pick(scores, limit)
    assert len(picks) == min(limit, len(scores)) and picks == sorted(set(picks))
    if scores and len(scores) > limit:
        width = -(-len(scores) // limit)  # no gap between picks is wider than two strata
        assert all(b - a < 2 * width for a, b in itertools.pairwise(picks))


def test_substance_tells_filler_from_content() -> None:
    assert sentences.substance("Wow, that's awesome!") < 0.2
    assert sentences.substance("Thanks so much, really glad!") < 0.2
    assert sentences.substance("I joined the Connected LGBTQ Activists group last Tuesday in Boston.") == 1.0
    assert sentences.salience("Wow, Caroline, well done!", frozenset({"caroline"})) == 0.0  # a speaker
    assert sentences.salience("Wow, Caroline, well done!") > 0
