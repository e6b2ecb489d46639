"""Planning of in-context message embeddings (tasks.message_vectors), pure: no model."""

from __future__ import annotations

import pytest

from tasks.message_vectors import SEPARATOR, Turn, context_turns, message_text, plan_in_context


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
