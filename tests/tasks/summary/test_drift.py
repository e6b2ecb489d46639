"""Drift similarity and the re-summarise-once rule."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from vcm.tasks.summary import drift


@dataclass(frozen=True)
class D:
    score: float


def test_similarity_of_sets_of_rows() -> None:
    a = np.array([[1.0, 0.0]], dtype=np.float32)
    b = np.array([[0.0, 1.0]], dtype=np.float32)
    assert drift.similarity(a, a) == pytest.approx(1.0)
    assert drift.similarity(a, b) == pytest.approx(0.0)
    assert drift.similarity(a, np.vstack([a, b])) == pytest.approx(np.sqrt(0.5))
    assert drift.similarity(np.zeros((0, 2), dtype=np.float32), a) == 0.0
    assert drift.similarity(a, np.zeros((0, 2), dtype=np.float32)) == 1.0


def test_weights_let_a_thinned_source_keep_its_true_mix() -> None:
    a = np.array([[1.0, 0.0]], dtype=np.float32)
    both = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    # one row stands for 9 sentences, the other for 1: the source is mostly "a"
    assert drift.similarity(a, both, np.array([9.0, 1.0])) > drift.similarity(a, both) + 0.2


def test_good_first_draft_is_kept_without_a_retry() -> None:
    def retry() -> D:
        raise AssertionError("must not re-summarise above the threshold")

    out = drift.check(lambda: D(0.9), retry, 0.85)
    assert out.draft == D(0.9) and not out.retried and not out.alarm


def test_drifted_draft_is_resummarised_and_the_closer_one_kept() -> None:
    out = drift.check(lambda: D(0.6), lambda: D(0.88), 0.85)
    assert out.draft == D(0.88) and out.retried and not out.alarm
    assert (out.first_score, out.retry_score) == (0.6, 0.88)


def test_alarm_when_both_drafts_stay_below() -> None:
    out = drift.check(lambda: D(0.7), lambda: D(0.6), 0.85)
    assert out.draft == D(0.7) and out.alarm and out.retry_score == 0.6
