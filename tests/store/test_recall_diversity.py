"""Spreading a hybrid ranking across the conversation (vcm.store.diversity), pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from vcm.store import open_store
from vcm.store.diversity import DEFAULT, OFF, Diversity, diversify
from vcm.store.fusion import hybrid


def test_a_strong_hits_neighbours_give_way_to_another_part_of_the_conversation() -> None:
    # One cluster around seq 10 (a hit and its neighbours) and a weaker hit far away at seq 50.
    ranked = [("a", 1.0), ("b", 0.9), ("c", 0.8), ("far", 0.6), ("d", 0.3)]
    seq = {"a": 10, "b": 11, "c": 9, "far": 50, "d": 200}
    out = diversify(ranked, seq, Diversity(penalty=0.5, reach=3))
    assert [k for k, _ in out] == ["a", "far", "b", "d", "c"]
    # b had one taken item near it (a): 0.9 * 0.5; c had two (a, b): 0.8 * 0.25.
    assert dict(out) == pytest.approx({"a": 1.0, "far": 0.6, "b": 0.45, "d": 0.3, "c": 0.2})
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True)


def test_a_neighbour_that_scores_well_on_its_own_keeps_its_place() -> None:
    ranked = [("a", 1.0), ("b", 0.95), ("far", 0.4)]
    out = diversify(ranked, {"a": 1, "b": 2, "far": 40}, Diversity(penalty=0.5, reach=3))
    assert [k for k, _ in out] == ["a", "b", "far"]  # 0.95 * 0.5 > 0.4


def test_reach_bounds_what_counts_as_near() -> None:
    ranked = [("a", 1.0), ("b", 0.9), ("c", 0.8)]
    seq = {"a": 0, "b": 4, "c": 20}
    assert [k for k, _ in diversify(ranked, seq, Diversity(penalty=0.5, reach=3))] == ["a", "b", "c"]
    assert [k for k, _ in diversify(ranked, seq, Diversity(penalty=0.5, reach=4))] == ["a", "c", "b"]


def test_off_and_unpositioned_items_leave_the_ranking_alone() -> None:
    ranked = [("a", 1.0), ("b", 0.9), ("c", 0.1)]
    seq = {"a": 0, "b": 1, "c": 99}
    assert diversify(ranked, seq, OFF) == ranked
    assert diversify(ranked, seq, Diversity(penalty=1.0, reach=5)) == ranked
    assert diversify(ranked, {"c": 99}, DEFAULT) == ranked  # without seq nothing is near anything
    assert diversify([], seq, DEFAULT) == []


def test_only_the_head_is_reranked_and_the_tail_follows_below_it() -> None:
    ranked = [("a", 1.0), ("b", 0.9), ("c", 0.5), ("d", 0.4)]
    seq = {"a": 0, "b": 1, "c": 50, "d": 2}
    out = diversify(ranked, seq, Diversity(penalty=0.1, reach=3, depth=2))
    assert [k for k, _ in out] == ["a", "b", "c", "d"]
    assert dict(out)["b"] == pytest.approx(0.09)
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True)


def test_ties_keep_the_input_order() -> None:
    ranked = [("x", 0.5), ("y", 0.5), ("z", 0.5)]
    assert [k for k, _ in diversify(ranked, {"x": 0, "y": 100, "z": 200}, DEFAULT)] == ["x", "y", "z"]


def test_settings_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError):
        Diversity(penalty=1.5)
    with pytest.raises(ValueError):
        Diversity(reach=-1)
    with pytest.raises(ValueError):
        Diversity(depth=0)


def test_hybrid_spreads_after_fusing_and_only_when_asked() -> None:
    text = [("m1", 3.0), ("m9", 1.0)]
    vector = [("m1", 0.9), ("m2", 0.8), ("m9", 0.5)]
    seq = {"m1": 1, "m2": 2, "m9": 9}
    plain = [k for k, _ in hybrid(text, vector, seq)]
    spread = [k for k, _ in hybrid(text, vector, seq, diversity=Diversity(penalty=0.1, reach=3))]
    assert plain == ["m1", "m2", "m9"]
    assert spread == ["m1", "m9", "m2"]


def test_settings_reach_the_store_opened_for_them(tmp_path: Path) -> None:
    from vcm.settings import load_settings
    from vcm.workers.runtime import open_configured_store

    settings = load_settings(
        environ={},
        overrides={
            "store_url": f"sqlite:///{tmp_path / 'vcm.db'}",
            "recall": {"diversity_penalty": 0.4, "diversity_reach": 5},
        },
    )
    store = open_configured_store(settings)
    try:
        assert store.recall_diversity == Diversity(penalty=0.4, reach=5)  # type: ignore[attr-defined]
    finally:
        store.close()
    default = open_store(str(tmp_path / "other.db"))
    try:
        assert default.recall_diversity == DEFAULT and DEFAULT.off  # type: ignore[attr-defined]
        assert load_settings(environ={}).recall.diversity_penalty == DEFAULT.penalty
        assert load_settings(environ={}).recall.diversity_reach == DEFAULT.reach
    finally:
        default.close()
