"""Chunk boundaries and macro-window plans over a document's tokens (pure: no I/O, no model).

Everything works on the embedding tokenizer's tokenisation of the *whole* document, given as
one ``(char_start, char_end)`` offset pair per content token (special tokens left out), so a
chunk is a token span ``[start, end)`` that also knows its characters.

Two plans come out of here:

* :func:`plan_chunks` - sentence-aware chunks of at most ``target_tokens`` tokens. A chunk ends
  only where a sentence (or line) ends, unless one sentence alone is longer than the target,
  which is then cut into near-equal pieces. Optional overlap repeats whole trailing sentences.
* :func:`plan_windows` - for late chunking: a document longer than the model window is run
  through the model in overlapping windows; each window says which token outputs it keeps so
  that every token's embedding comes from exactly one window, the one where it sits further
  from a window edge (more context on its short side).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

Offsets = Sequence[tuple[int, int]]

# A sentence ends after . ! ? or an ellipsis (plus closing quotes/brackets) followed by
# whitespace; a line break always ends a unit, so headings, list items and dialogue turns
# never share a unit with the next line.
_SENTENCE_END = re.compile(r"(?:[.!?\u2026]+[\"'\u201d\u2019)\]]*\s+|\n\s*)")


@dataclass(frozen=True)
class ChunkSpan:
    """Tokens ``[start, end)`` of the document and the characters they cover."""

    index: int
    start: int
    end: int
    char_start: int
    char_end: int

    @property
    def tokens(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Window:
    """One model pass over tokens ``[start, end)``; only outputs ``[keep_start, keep_end)`` are used."""

    start: int
    end: int
    keep_start: int
    keep_end: int

    @property
    def tokens(self) -> int:
        return self.end - self.start


def sentence_breaks(text: str) -> list[int]:
    """Character positions where a new sentence or line starts (ascending, without 0)."""
    return [m.end() for m in _SENTENCE_END.finditer(text) if 0 < m.end() < len(text)]


def _units(offsets: Offsets, breaks: Sequence[int]) -> list[tuple[int, int]]:
    """Token ranges of the text units between breaks; units without tokens disappear."""
    units: list[tuple[int, int]] = []
    start = 0
    current = -1
    for i, (char_start, _) in enumerate(offsets):
        unit = bisect.bisect_right(breaks, char_start)
        if unit != current:
            if i > start:
                units.append((start, i))
            start, current = i, unit
    if len(offsets) > start:
        units.append((start, len(offsets)))
    return units


def _split(unit: tuple[int, int], limit: int) -> list[tuple[int, int]]:
    """A unit longer than ``limit`` becomes ceil(len/limit) near-equal pieces (no tiny tail)."""
    start, end = unit
    size = end - start
    if size <= limit:
        return [unit]
    pieces = -(-size // limit)
    base, extra = divmod(size, pieces)
    out: list[tuple[int, int]] = []
    for p in range(pieces):
        length = base + (1 if p < extra else 0)
        out.append((start, start + length))
        start += length
    return out


def _pack(units: list[tuple[int, int]], target: int, overlap: int) -> list[tuple[int, int]]:
    """Greedy packing of consecutive units into spans of <= target tokens.

    A new span starts with the previous span's trailing whole units that fit in ``overlap``
    tokens and still leave room for the next unit, so overlap never breaks the size limit.
    """
    spans: list[tuple[int, int]] = []
    i = 0
    # Only the previous span's own (not carried) units may be carried again, and never its
    # first unit when it carried nothing, so starts strictly increase and only neighbours overlap.
    carryable: list[tuple[int, int]] = []
    while i < len(units):
        carried: list[tuple[int, int]] = []
        room = min(overlap, target - (units[i][1] - units[i][0]))
        for unit in reversed(carryable):
            size = unit[1] - unit[0]
            if size > room:
                break
            carried.insert(0, unit)
            room -= size
        taken = [*carried, units[i]]
        used = sum(u[1] - u[0] for u in taken)
        i += 1
        while i < len(units) and used + units[i][1] - units[i][0] <= target:
            taken.append(units[i])
            used += units[i][1] - units[i][0]
            i += 1
        spans.append((taken[0][0], taken[-1][1]))
        carryable = taken[len(carried) :] if carried else taken[1:]
    return spans


def plan_chunks(
    offsets: Offsets,
    breaks: Sequence[int],
    *,
    target_tokens: int,
    overlap_tokens: int = 0,
    pack: bool = True,
) -> list[ChunkSpan]:
    """Chunks over ``len(offsets)`` tokens, cut at ``breaks`` (char positions, ascending).

    ``pack=False`` makes one chunk per unit (e.g. one per dialogue turn), still splitting units
    longer than ``target_tokens``. Token ranges are contiguous, cover every token, start and end
    strictly increasing; consecutive chunks share at most ``overlap_tokens`` tokens.
    """
    if target_tokens < 1:
        raise ValueError(f"target_tokens must be positive, got {target_tokens}")
    if not 0 <= overlap_tokens < target_tokens:
        raise ValueError(f"overlap_tokens must be in [0, target_tokens), got {overlap_tokens}")
    units = [piece for unit in _units(offsets, breaks) for piece in _split(unit, target_tokens)]
    ranges = _pack(units, target_tokens, overlap_tokens) if pack else units
    return [
        ChunkSpan(index=i, start=a, end=b, char_start=offsets[a][0], char_end=offsets[b - 1][1])
        for i, (a, b) in enumerate(ranges)
    ]


def plan_windows(n_tokens: int, max_tokens: int, overlap: int) -> list[Window]:
    """Model windows over ``n_tokens`` content tokens, each at most ``max_tokens`` long.

    Uses the fewest windows that keep ``overlap`` tokens shared between neighbours, with
    lengths balanced (so one batch pads little and no window is a sliver). In each overlap the
    cut between kept outputs is its middle: a token left of it is further from the left
    window's right edge than from the right window's left edge, so it keeps the output of the
    window where its nearer edge is further away.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if not 0 <= overlap < max_tokens:
        raise ValueError(f"overlap must be in [0, max_tokens), got {overlap}")
    if n_tokens <= 0:
        return []
    if n_tokens <= max_tokens:
        return [Window(0, n_tokens, 0, n_tokens)]
    count = -(-(n_tokens - overlap) // (max_tokens - overlap))
    total = n_tokens + (count - 1) * overlap
    base, extra = divmod(total, count)
    bounds: list[tuple[int, int]] = []
    end = overlap  # so the first window starts at 0
    for i in range(count):
        start = end - overlap
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
    cuts = [0] + [(bounds[i + 1][0] + bounds[i][1] - 1) // 2 + 1 for i in range(count - 1)] + [n_tokens]
    return [Window(s, e, cuts[i], cuts[i + 1]) for i, (s, e) in enumerate(bounds)]
