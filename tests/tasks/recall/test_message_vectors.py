"""Planning of in-context message embeddings (vcm.tasks.recall.vectors), pure: no model."""

from __future__ import annotations

import pytest

from vcm.tasks.recall.vectors import (
    SEPARATOR,
    Turn,
    context_turns,
    later_turns,
    message_text,
    plan_in_context,
    ready_targets,
)


def word_tokens(text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """A whitespace tokenizer with character offsets (token id = word length)."""
    ids: list[int] = []
    offsets: list[tuple[int, int]] = []
    at = 0
    for word in text.split():
        start = text.index(word, at)
        ids.append(len(word))
        offsets.append((start, start + len(word)))
        at = start + len(word)
    return ids, offsets


def test_message_text_prefixes_the_name_once() -> None:
    assert message_text("hello", "Ann") == "Ann: hello"
    assert message_text("Ann: hello", "Ann") == "Ann: hello"
    assert message_text("hello", None) == "hello"


def test_context_turns_are_the_n_before_the_target_in_seq_order() -> None:
    history = [Turn(5, "e"), Turn(1, "a"), Turn(3, "c"), Turn(2, "b"), Turn(3, "c"), Turn(9, "later")]
    assert context_turns(history, Turn(6, "f"), 3) == ["b", "c", "e"]
    assert context_turns(history, Turn(1, "a"), 3) == []
    assert context_turns(history, Turn(6, "f"), 0) == []


def test_plan_pools_only_the_targets_tokens_after_its_context() -> None:
    context = ["Ann: I adopted a dog", "Bob: what is its name"]
    target = "Ann: Rex"
    ids, offsets = word_tokens(SEPARATOR.join([*context, target]))
    plan = plan_in_context(context, target, ids, offsets, max_window=64)
    assert plan is not None
    (chunk,) = plan.chunks
    assert plan.chunk_text(chunk) == target
    assert len(plan.token_ids) == len(ids)  # the whole context fits
    assert (chunk.start, chunk.end) == (len(ids) - 2, len(ids))
    assert [(w.start, w.end) for w in plan.windows] == [(0, len(ids))]


def test_plan_cuts_context_from_the_left_to_fit_the_window() -> None:
    context = ["one two three four five", "six seven"]
    target = "eight nine"
    ids, offsets = word_tokens(SEPARATOR.join([*context, target]))
    plan = plan_in_context(context, target, ids, offsets, max_window=4)
    assert plan is not None
    assert plan.token_ids == tuple(ids[-4:])  # "six seven eight nine"
    assert (plan.chunks[0].start, plan.chunks[0].end) == (2, 4)


def test_plan_of_a_target_longer_than_the_window_has_no_context() -> None:
    target = "a b c d e f g"
    ids, offsets = word_tokens(SEPARATOR.join(["ctx words", target]))
    plan = plan_in_context(["ctx words"], target, ids, offsets, max_window=4, window_overlap=1)
    assert plan is not None
    assert len(plan.token_ids) == 7 and (plan.chunks[0].start, plan.chunks[0].end) == (0, 7)
    assert len(plan.windows) > 1 and plan.windows[-1].end == 7


@pytest.mark.parametrize("target", ["", "   "])
def test_plan_of_an_empty_target_is_none(target: str) -> None:
    ids, offsets = word_tokens(SEPARATOR.join(["ctx", target]))
    assert plan_in_context(["ctx"], target, ids, offsets, max_window=8) is None


def test_later_turns_are_the_n_after_the_target_in_seq_order() -> None:
    history = [Turn(9, "i"), Turn(7, "g"), Turn(2, "b"), Turn(8, "h"), Turn(7, "g")]
    assert later_turns(history, Turn(6, "f"), 2) == ["g", "h"]
    assert later_turns(history, Turn(9, "i"), 2) == []
    assert later_turns(history, Turn(6, "f"), 0) == []


def test_ready_targets_are_the_turns_whose_followers_have_arrived() -> None:
    window = [Turn(i, str(i)) for i in (4, 5, 6, 7)]
    spooled = [Turn(8, "8"), Turn(9, "9")]
    # 8 completes 6's two followers (7, 8), 9 completes 7's; 4 and 5 were done before.
    assert [t.seq for t in ready_targets(window, spooled, 2)] == [6, 7]
    # Too early in the window: the turn two places back is not there (evicted or never was).
    assert ready_targets([Turn(1, "1")], [Turn(2, "2")], 2) == []
    assert ready_targets(window, spooled, 0) == spooled


def test_plan_reads_turns_after_the_target_and_splits_the_room_between_sides() -> None:
    context = ["a1 a2 a3 a4 a5 a6"]
    target = "t1 t2"
    after = ["b1 b2 b3 b4 b5 b6"]
    ids, offsets = word_tokens(SEPARATOR.join([*context, target, *after]))
    plan = plan_in_context(context, target, ids, offsets, max_window=6, after=after)
    assert plan is not None
    (chunk,) = plan.chunks
    assert plan.chunk_text(chunk) == target
    kept = [plan.text[a:b] for a, b in plan.offsets]
    assert kept == ["a5", "a6", "t1", "t2", "b1", "b2"]  # two context tokens each side
    # A side with less to give leaves the rest of the room to the other.
    short = ["b1"]
    ids, offsets = word_tokens(SEPARATOR.join([*context, target, *short]))
    plan = plan_in_context(context, target, ids, offsets, max_window=6, after=short)
    assert plan is not None
    assert [plan.text[a:b] for a, b in plan.offsets] == ["a4", "a5", "a6", "t1", "t2", "b1"]
