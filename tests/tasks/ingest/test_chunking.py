"""Chunk and macro-window plans (vcm.tasks.ingest.chunking): exhaustive properties with hypothesis."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vcm.tasks.ingest.chunking import ChunkSpan, Window, plan_chunks, plan_windows, sentence_breaks

# --- macro windows --------------------------------------------------------------------------


@st.composite
def window_args(draw: st.DrawFn) -> tuple[int, int, int]:
    max_tokens = draw(st.integers(1, 300))
    overlap = draw(st.integers(0, max_tokens - 1))
    n_tokens = draw(st.integers(0, 3000))
    return n_tokens, max_tokens, overlap


def _context(window: Window, token: int) -> int:
    """Tokens on the short side of ``token`` inside ``window``."""
    return min(token - window.start, window.end - 1 - token)


@settings(max_examples=300, deadline=None)
@given(window_args())
def test_windows_cover_every_token_exactly_once_and_fit(args: tuple[int, int, int]) -> None:
    n, limit, overlap = args
    windows = plan_windows(n, limit, overlap)
    if n == 0:
        assert windows == []
        return
    kept = [0] * n
    for w in windows:
        assert 1 <= w.tokens <= limit
        assert w.start <= w.keep_start < w.keep_end <= w.end  # every window contributes
        for t in range(w.keep_start, w.keep_end):
            kept[t] += 1
    assert kept == [1] * n
    # Spans are contiguous: window ranges chain with exactly `overlap` shared tokens, kept ranges tile.
    assert windows[0].start == 0 and windows[-1].end == n
    assert windows[0].keep_start == 0 and windows[-1].keep_end == n
    for a, b in itertools.pairwise(windows):
        assert a.end - b.start == overlap
        assert a.keep_end == b.keep_start
        assert a.start < b.start and a.end < b.end


@settings(max_examples=300, deadline=None)
@given(window_args())
def test_windows_are_as_few_as_possible_and_balanced(args: tuple[int, int, int]) -> None:
    n, limit, overlap = args
    windows = plan_windows(n, limit, overlap)
    if n <= limit:
        assert len(windows) == min(n, 1)
        return
    # One window fewer could not reach the end with the required overlap.
    assert (len(windows) - 1) * (limit - overlap) + overlap < n
    lengths = [w.tokens for w in windows]
    assert max(lengths) - min(lengths) <= 1


@settings(max_examples=300, deadline=None)
@given(window_args())
def test_each_token_keeps_the_window_where_it_has_most_context(args: tuple[int, int, int]) -> None:
    n, limit, overlap = args
    windows = plan_windows(min(n, 800), limit, overlap)
    for w in windows:
        for t in range(w.keep_start, w.keep_end):
            for other in windows:
                if other is not w and other.start <= t < other.end:
                    assert _context(w, t) >= _context(other, t)


def test_windows_example_minilm() -> None:
    # 300 tokens, MiniLM's 256 minus [CLS]/[SEP], 64 overlap: two balanced windows.
    assert plan_windows(300, 254, 64) == [Window(0, 182, 0, 150), Window(118, 300, 150, 300)]
    assert plan_windows(254, 254, 64) == [Window(0, 254, 0, 254)]


@pytest.mark.parametrize(("limit", "overlap"), [(0, 0), (10, 10), (10, -1)])
def test_windows_reject_bad_arguments(limit: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        plan_windows(100, limit, overlap)


# --- chunks ---------------------------------------------------------------------------------


def _doc(unit_sizes: list[int]) -> tuple[list[tuple[int, int]], list[int], list[tuple[int, int]]]:
    """Token offsets (3-char tokens, one space apart), break positions, and the units' token ranges."""
    offsets: list[tuple[int, int]] = []
    breaks: list[int] = []
    units: list[tuple[int, int]] = []
    for size in unit_sizes:
        if offsets:
            breaks.append(offsets[-1][1] + 1)
        first = len(offsets)
        for _ in range(size):
            start = offsets[-1][1] + 1 if offsets else 0
            offsets.append((start, start + 3))
        units.append((first, len(offsets)))
    return offsets, breaks, units


@st.composite
def chunk_args(draw: st.DrawFn) -> tuple[list[int], int, int]:
    sizes = draw(st.lists(st.integers(1, 60), min_size=0, max_size=40))
    target = draw(st.integers(1, 80))
    overlap = draw(st.integers(0, target - 1))
    return sizes, target, overlap


def _unit_starts(units: list[tuple[int, int]], target: int) -> set[int]:
    """Where a chunk may start: a unit start, or anywhere inside a unit too long for one chunk."""
    allowed: set[int] = set()
    for a, b in units:
        allowed.update(range(a, b) if b - a > target else [a])
    return allowed


def _check_common(chunks: list[ChunkSpan], offsets: list[tuple[int, int]], target: int) -> None:
    n = len(offsets)
    if n == 0:
        assert chunks == []
        return
    assert chunks[0].start == 0 and chunks[-1].end == n
    for i, c in enumerate(chunks):
        assert c.index == i
        assert 1 <= c.tokens <= target
        assert (c.char_start, c.char_end) == (offsets[c.start][0], offsets[c.end - 1][1])
    for a, b in itertools.pairwise(chunks):
        assert a.start < b.start <= a.end < b.end  # contiguous, no gaps, progress


@settings(max_examples=300, deadline=None)
@given(chunk_args())
def test_chunks_cover_document_within_target_on_sentence_boundaries(args: tuple[list[int], int, int]) -> None:
    sizes, target, overlap = args
    offsets, breaks, units = _doc(sizes)
    chunks = plan_chunks(offsets, breaks, target_tokens=target, overlap_tokens=overlap)
    _check_common(chunks, offsets, target)
    starts = _unit_starts(units, target)
    ends = {b for _, b in units} | {s for s in starts}
    for a, b in itertools.pairwise(chunks):
        assert a.end - b.start <= overlap
        assert b.start in starts and a.end in ends
    for a, c in zip(chunks, chunks[2:], strict=False):
        assert a.end <= c.start  # only neighbours overlap
    if overlap == 0:
        assert all(a.end == b.start for a, b in itertools.pairwise(chunks))


@settings(max_examples=300, deadline=None)
@given(chunk_args())
def test_packing_is_greedy_without_overlap(args: tuple[list[int], int, int]) -> None:
    sizes, target, _ = args
    offsets, breaks, _ = _doc(sizes)
    pieces = plan_chunks(offsets, breaks, target_tokens=target, pack=False)  # units, long ones split
    piece_at = {p.start: p for p in pieces}
    chunks = plan_chunks(offsets, breaks, target_tokens=target)
    for c in chunks:
        assert c.start in piece_at and (c.end == len(offsets) or c.end in piece_at)  # whole pieces
    for c in chunks[:-1]:
        assert c.tokens + piece_at[c.end].tokens > target  # the next piece would not have fitted


@settings(max_examples=300, deadline=None)
@given(chunk_args())
def test_unpacked_chunks_are_the_units(args: tuple[list[int], int, int]) -> None:
    sizes, target, _ = args
    offsets, breaks, units = _doc(sizes)
    chunks = plan_chunks(offsets, breaks, target_tokens=target, pack=False)
    _check_common(chunks, offsets, target)
    starts = {c.start for c in chunks}
    assert {a for a, _ in units} <= starts
    for a, b in units:  # long units are split into near-equal pieces
        inner = [c.tokens for c in chunks if a <= c.start < b]
        assert max(inner) - min(inner) <= 1
        assert len(inner) == -(-(b - a) // target)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=60),
    st.lists(st.integers(0, 400), max_size=20),
    st.integers(1, 30),
)
def test_breaks_anywhere_still_give_a_valid_plan(
    gaps: list[tuple[int, int]], raw_breaks: list[int], target: int
) -> None:
    offsets: list[tuple[int, int]] = []
    pos = 0
    for gap, length in gaps:
        pos += gap
        offsets.append((pos, pos + length))
        pos += length
    chunks = plan_chunks(offsets, sorted(set(raw_breaks)), target_tokens=target)
    _check_common(chunks, offsets, target)


def test_sentence_breaks_split_sentences_and_lines() -> None:
    text = 'He said "Go!" She went. Then? Yes...\nNew line 3.14 here.\n\n  Next para.'
    starts = sentence_breaks(text)
    pieces = [text[a:b] for a, b in zip([0, *starts], [*starts, len(text)], strict=True)]
    assert pieces == ['He said "Go!" ', "She went. ", "Then? ", "Yes...\n", "New line 3.14 here.\n\n  ", "Next para."]
    assert sentence_breaks("") == []
    assert sentence_breaks("No end") == []


def test_chunks_follow_sentences_of_real_text() -> None:
    text = "One two three. Four five.\nSix seven eight nine."
    offsets = [(m.start(), m.end()) for m in __import__("re").finditer(r"\w+|[^\w\s]", text)]
    chunks = plan_chunks(offsets, sentence_breaks(text), target_tokens=7)
    assert [text[c.char_start : c.char_end] for c in chunks] == ["One two three. Four five.", "Six seven eight nine."]
    with_overlap = plan_chunks(offsets, sentence_breaks(text), target_tokens=9, overlap_tokens=3)
    assert [text[c.char_start : c.char_end] for c in with_overlap] == [
        "One two three. Four five.",
        "Four five.\nSix seven eight nine.",
    ]


@pytest.mark.parametrize(("target", "overlap"), [(0, 0), (5, 5), (5, -1)])
def test_chunks_reject_bad_arguments(target: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        plan_chunks([(0, 1)], [], target_tokens=target, overlap_tokens=overlap)
