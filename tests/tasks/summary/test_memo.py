"""Drift texts are embedded once per job, and once across the jobs of one process while the
process's recent vectors hold them: never from another embedder's vectors. The source's sample
is embedded in a thread beside the selection, with the same draft as without."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from tests.doubles.coldpath import line
from tests.doubles.embedder import word_embed
from vcm.tasks.summary.memo import JobVectors, RecentVectors
from vcm.tasks.summary.recursive import extractive
from vcm.tasks.summary.request import Params, Request, Turn
from vcm.tasks.summary.selection import Vectors


class Counting:
    """An embedder that records the texts it was asked for; ``shift`` tells two apart."""

    def __init__(self, shift: float = 0.0) -> None:
        self.asked: list[str] = []
        self.shift = shift

    def __call__(self, texts: Sequence[str]) -> Vectors:
        self.asked += texts
        return np.array([[len(t) + self.shift, 1.0] for t in texts], dtype=np.float32)


def test_a_job_embeds_each_text_once_and_the_next_job_only_what_is_new() -> None:
    embed, recent = Counting(), RecentVectors()
    first = JobVectors(embed, recent)
    assert first(["a", "bb", "a"]).tolist() == [[1.0, 1.0], [2.0, 1.0], [1.0, 1.0]]
    first(["bb", "ccc"])
    assert embed.asked == ["a", "bb", "ccc"]
    second = JobVectors(embed, recent)  # the agent's next job: its previous summary's clauses again
    assert second(["ccc", "dddd", "a"]).tolist() == [[3.0, 1.0], [4.0, 1.0], [1.0, 1.0]]
    assert embed.asked == ["a", "bb", "ccc", "dddd"]
    assert JobVectors(embed)(["a"]).tolist() == [[1.0, 1.0]] and embed.asked[-1] == "a"  # no recent: asks
    assert JobVectors(embed, recent)([]).shape == (0, 0)


def test_another_embedder_is_never_answered_from_the_first_ones_vectors() -> None:
    old, new, recent = Counting(), Counting(shift=10.0), RecentVectors()
    JobVectors(old, recent)(["a"])
    assert JobVectors(new, recent)(["a"]).tolist() == [[11.0, 1.0]] and new.asked == ["a"]


def test_the_recent_vectors_keep_the_last_ones_used() -> None:
    embed, recent = Counting(), RecentVectors(size=2)
    JobVectors(embed, recent)(["a", "bb"])
    JobVectors(embed, recent)(["a"])  # used again: now the newest
    JobVectors(embed, recent)(["ccc"])  # "bb" leaves
    JobVectors(embed, recent)(["a", "bb", "ccc"])
    assert embed.asked == ["a", "bb", "ccc", "bb"]


class Threaded:
    """``word_embed``, recording which thread asked for which texts."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, texts: Sequence[str]) -> Vectors:
        self.calls.append((threading.current_thread().name, list(texts)))
        return word_embed(texts)


def test_the_drift_sample_is_embedded_beside_the_selection_with_the_same_draft() -> None:
    previous = "\n".join(f"alice: {line(i)}" for i in range(60))
    turns = [Turn("alice" if i % 2 else "user", line(i)) for i in range(60, 200)]
    plain = extractive(Request(previous, turns, 400, _count, word_embed), Params())
    embed = Threaded()
    ahead = extractive(Request(previous, turns, 400, _count, JobVectors(embed)), Params())
    # The same summary and the same drift score: only when and where the vectors were embedded moved.
    assert (ahead.text, ahead.score, ahead.retention) == (plain.text, plain.score, plain.retention)
    assert 0.0 < ahead.score < 1.0
    [(first, sample), (second, rest)] = embed.calls  # none left for the job's own thread
    # The source's sample beside the selection; the summary's lines beside the draft's rendering.
    assert (first, second) == ("vcm-drift-source", "vcm-drift-summary")
    assert 0 < len(sample) <= Params().max_candidates and not set(rest) & set(sample)
    assert rest and all(unit.split(": ", 1)[-1] in ahead.text for unit in rest)


def test_a_draft_cut_after_the_selection_embeds_the_lines_it_kept() -> None:
    """The recount of the rendered draft can exceed the cap (tokens merge across clauses), and
    the draft then drops its last picks: the summary side embedded ahead is not the one kept, so
    the check embeds the kept lines in the job's thread, and scores what the plain path scores."""
    previous = "\n".join(f"alice: {line(i)}" for i in range(60))
    turns = [Turn("alice" if i % 2 else "user", line(i)) for i in range(60, 200)]

    def superlinear(text: str) -> int:  # a long text costs more than its parts
        n = len(text.split())
        return 8 + n + n * n // 400

    params = replace(Params(), max_candidates=8)  # fewer than the lines: the kept ones sample others
    plain = extractive(Request(previous, turns, 400, superlinear, word_embed), params)
    embed = Threaded()
    ahead = extractive(Request(previous, turns, 400, superlinear, JobVectors(embed)), params)
    assert (ahead.text, ahead.score, ahead.retention) == (plain.text, plain.score, plain.retention)
    names = [name for name, _ in embed.calls]
    assert names[:2] == ["vcm-drift-source", "vcm-drift-summary"]
    assert names[2:] == [threading.current_thread().name]  # the kept lines the summary thread lacked
    assert all(unit.split(": ", 1)[-1] in ahead.text for unit in embed.calls[2][1])


def _count(text: str) -> int:
    return 8 + len(text.split())


def test_the_loss_scores_room_is_counted_once_beside_the_selection_even_over_retries() -> None:
    previous = "\n".join(f"alice: {line(i)}" for i in range(60))
    turns = [Turn("alice" if i % 2 else "user", line(i)) for i in range(60, 200)]
    counted: list[tuple[str, str]] = []

    def count(text: str) -> int:
        counted.append((threading.current_thread().name, text))
        return _count(text)

    retry = replace(Params(), attempt=1, retention_threshold=1.1)  # no floor is enough: every one is tried
    draft = extractive(Request(previous, turns, 400, count, word_embed), retry)
    plain = extractive(Request(previous, turns, 400, _count, word_embed), retry)
    assert (draft.text, draft.room, draft.retention) == (plain.text, plain.room, plain.retention)
    on_room = [text for name, text in counted if name == "vcm-summary-room"]
    assert draft.room > 0 and on_room and len(on_room) == len(set(on_room))  # each unit once, all floors
