"""LoCoMo evaluation helpers (vcm.tasks.recall.evaluation): pure metric and corpus construction."""

from __future__ import annotations

import numpy as np
import pytest

from vcm.tasks.ingest.chunking import ChunkSpan
from vcm.tasks.recall.evaluation import (
    aggregate,
    chunk_turns,
    conversation_turns,
    load_locomo,
    mean,
    recall_at_k,
    recall_of_ranked_ids,
    session_doc,
    top_k,
    turn_line,
)

TURNS = [
    {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bob!"},
    {"speaker": "Bob", "dia_id": "D1:2", "text": "Look at this.", "blip_caption": "a photo of a cat"},
    {"speaker": "Ann", "dia_id": "D1:3", "text": "Cute."},
]


def test_session_doc_knows_each_turns_characters() -> None:
    doc = session_doc("conv-x", 1, TURNS)
    assert doc.text == "Ann: Hi Bob!\nBob: Look at this. [shared a photo of a cat]\nAnn: Cute."
    assert [doc.text[t.char_start : t.char_end] for t in doc.turns] == [turn_line(t) for t in TURNS]
    assert doc.turn_starts == [doc.turns[1].char_start, doc.turns[2].char_start]


def test_chunk_turns_maps_chunks_to_the_turns_they_touch() -> None:
    doc = session_doc("conv-x", 1, TURNS)
    t1, t2, t3 = doc.turns
    chunks = [
        ChunkSpan(0, 0, 3, t1.char_start, t1.char_end),  # exactly turn 1
        ChunkSpan(1, 3, 9, t2.char_start + 5, t3.char_start + 3),  # end of turn 2 and start of 3
        ChunkSpan(2, 9, 10, t3.char_end - 1, t3.char_end),
    ]
    assert chunk_turns(doc, chunks) == [frozenset({"D1:1"}), frozenset({"D1:2", "D1:3"}), frozenset({"D1:3"})]


@pytest.mark.parametrize(
    ("evidence", "k", "expected"),
    [
        ([], 1, 1.0),  # no evidence: nothing to find
        (["D1:1"], 1, 1.0),
        (["D1:3"], 1, 0.0),
        (["D1:3"], 2, 1.0),
        (["D1:1", "D1:3"], 1, 0.5),
        (["D1:1", "D1:1"], 1, 1.0),  # duplicates count once
        (["D1:1", "D8:6; D9:17"], 3, 0.5),  # malformed id: a miss, kept in the denominator
        (["D99:1"], 10, 0.0),  # names no turn
        (["D1:2"], 0, 0.0),
    ],
)
def test_recall_at_k(evidence: list[str], k: int, expected: float) -> None:
    ranked = [frozenset({"D1:1"}), frozenset({"D1:2", "D1:3"}), frozenset({"D1:4"})]
    assert recall_at_k(evidence, ranked, k) == expected


def test_top_k_is_best_first_with_stable_ties() -> None:
    scores = np.array([0.1, 0.9, 0.5, 0.9, -1.0])
    assert top_k(scores, 3) == [1, 3, 2]
    assert top_k(scores, 10) == [1, 3, 2, 0, 4]


def test_load_locomo_keeps_data_as_is() -> None:
    sample = {
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_2_date_time": "later",
            "session_2": TURNS[2:],
            "session_1_date_time": "then",
            "session_1": TURNS[:2],
            "session_3": [],
        },
        "qa": [
            {"question": "Q1?", "answer": "a", "evidence": ["D1:1"], "category": 4},
            {"question": "Q2?", "adversarial_answer": "b", "evidence": [], "category": 5},
            {"question": "Q3?", "answer": "c", "category": 3},
        ],
    }
    [(name, (docs, questions))] = load_locomo([sample]).items()
    assert name == "conv-1"
    assert [d.session for d in docs] == [1, 2]
    assert [q.evidence for q in questions] == [("D1:1",), (), ()]
    assert [q.category for q in questions] == [4, 5, 3]


def test_mean() -> None:
    assert mean([1.0, 0.0, 0.5]) == 0.5
    assert np.isnan(mean([]))


def test_recall_of_ranked_ids_counts_malformed_and_missing_evidence_as_misses() -> None:
    ranked = ["D1:3", "D1:1", "D2:7", "D1:1"]
    assert recall_of_ranked_ids(["D1:1", "D2:7"], ranked, [1, 2, 3]) == {1: 0.0, 2: 0.5, 3: 1.0}
    assert recall_of_ranked_ids(["D1:1", "D:x", "D9:99"], ranked, [4]) == {4: pytest.approx(1 / 3)}
    assert recall_of_ranked_ids(["D1:3"], [], [5]) == {5: 0.0}
    assert recall_of_ranked_ids([], ["D1:3"], [5]) == {5: 1.0}


def test_aggregate_overall_and_per_category() -> None:
    rows = [(1, {5: 1.0, 10: 1.0}), (1, {5: 0.0, 10: 0.5}), (4, {5: 0.5, 10: 1.0})]
    table = aggregate(rows, [5, 10])
    assert table["all"] == {"n": 3, "R@5": 50.0, "R@10": 83.3}
    assert table["1"] == {"n": 2, "R@5": 50.0, "R@10": 75.0}
    assert table["4"] == {"n": 1, "R@5": 50.0, "R@10": 100.0}
    assert list(table) == ["all", "1", "4"]


def test_conversation_turns_in_session_order() -> None:
    sample = {
        "conversation": {
            "speaker_a": "Ann",
            "session_2": [{"dia_id": "D2:1"}],
            "session_1": [{"dia_id": "D1:1"}, {"dia_id": "D1:2"}],
            "session_1_date_time": "x",
            "session_3": [],
        }
    }
    assert [t["dia_id"] for t in conversation_turns(sample)] == ["D1:1", "D1:2", "D2:1"]
