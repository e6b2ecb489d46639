"""Batches of similar token length: the cuts are the cheapest (against every way of cutting a
small list), keep to the batch size, and only cut where the padding saved pays for a call."""

from __future__ import annotations

import itertools
import random

import pytest

from vcm.tasks.embedding_batches import length_groups


def cost(lengths: list[int], runs: list[tuple[int, int]], call: int) -> int:
    return sum((end - start) * lengths[start] + call for start, end in runs)


def every_cut(n: int, batch_size: int) -> list[list[tuple[int, int]]]:
    """Every way to cut n sorted items into contiguous runs of at most batch_size."""
    out = []
    for mask in itertools.product([False, True], repeat=n - 1):
        bounds = [0, *[i + 1 for i, cut in enumerate(mask) if cut], n]
        runs = list(itertools.pairwise(bounds))
        if all(end - start <= batch_size for start, end in runs):
            out.append(runs)
    return out


def test_the_cuts_are_the_cheapest_of_all() -> None:
    rng = random.Random(11)
    for _ in range(300):
        n = rng.randrange(1, 10)
        lengths = sorted((rng.randrange(1, 130) for _ in range(n)), reverse=True)
        batch_size, call = rng.randrange(1, 6), rng.choice([0, 12, 24, 48])
        runs = length_groups(lengths, batch_size, call)
        assert runs[0][0] == 0 and runs[-1][1] == n
        assert all(a[1] == b[0] for a, b in itertools.pairwise(runs))  # contiguous, nothing left out
        assert all(0 < end - start <= batch_size for start, end in runs)
        assert cost(lengths, runs, call) == min(cost(lengths, cut, call) for cut in every_cut(n, batch_size))


def test_texts_of_one_length_fill_whole_batches_and_mixed_ones_are_cut_by_length() -> None:
    assert length_groups([30] * 70, 32, 24) == [(0, 32), (32, 64), (64, 70)]
    # Eight long texts and eight short: one batch would pad the short ones to 100 tokens.
    assert length_groups([100] * 8 + [10] * 8, 32, 24) == [(0, 8), (8, 16)]
    # A slightly shorter text is not worth a call of its own.
    assert length_groups([40, 38, 36, 35], 32, 24) == [(0, 4)]
    assert length_groups([], 32) == []


@pytest.mark.parametrize(("lengths", "batch_size"), [([1, 2], 4), ([3, 2], 0)])
def test_unsorted_lengths_or_no_batch_size_are_refused(lengths: list[int], batch_size: int) -> None:
    with pytest.raises(ValueError):
        length_groups(lengths, batch_size)
