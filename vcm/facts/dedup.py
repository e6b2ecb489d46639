"""Dedup and conflicts of fact writes (seed 002's InfoUnit dedup, seed 003's fuzzy dedup). Pure.

A write is compared with the agent's facts of the same scope and type:

* same InfoKey (scope + type + key) and the same value (normalised): MATCH, its evidence joins;
* same InfoKey, another value: CONFLICT, both are kept and marked with each other;
* no key, or a key of no fact: near-duplicate text (word overlap, Jaccard, or embedding cosine
  above the MATCH thresholds) is a MATCH; text between the UNSURE and the MATCH thresholds may or
  may not say the same (seed 002 §2.3: uncertain equivalence is staged for review, never merged
  or duplicated silently): UNSURE, with the closest fact as its target; anything else is NEW.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from vcm.store.types import DedupCandidate, Fact

Decision = Literal["MATCH", "NEW", "CONFLICT", "UNSURE"]
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "to",
        "of",
        "in",
        "on",
        "at",
        "and",
        "or",
        "for",
        "with",
        "by",
        "it",
        "its",
        "this",
        "that",
        "i",
        "my",
        "me",
    ]
)


def normalise(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def word_set(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _jaccard(x: set[str], y: set[str]) -> float:
    return len(x & y) / len(x | y) if x and y else 0.0


# Types whose key names the thing itself: one key, one fact.
IDENTITY_TYPES = frozenset({"entity", "relation"})


@dataclass(frozen=True)
class Outcome:
    decision: Decision
    target: Fact | None = None  # the fact a MATCH joins, or an UNSURE one may duplicate
    conflicting: tuple[Fact, ...] = ()  # the facts a CONFLICT is marked against
    similarity: float = 0.0


@dataclass(frozen=True)
class Near:
    """:func:`by_similarity`'s verdict: the candidate a MATCH joins or an UNSURE may repeat."""

    decision: Literal["MATCH", "NEW", "UNSURE"]
    target: DedupCandidate | None = None
    similarity: float = 0.0


def by_key(value: str, key: str | None, keyed: Sequence[Fact], *, identity: bool = False) -> Outcome | None:
    """The verdict of the write's key over ``keyed``, the live facts of that key (same scope and
    type): MATCH (``identity``: the key names the thing itself, an entity's name or a relation's
    triple, so one key is one fact whatever its description says; or the same value), CONFLICT
    (another value: both are kept), or None when no fact has the key (or the write has none)."""
    if key is None:
        return None
    same_key = [f for f in keyed if f.key == key]
    if identity and same_key:
        return Outcome("MATCH", same_key[0], similarity=1.0)
    same = [f for f in same_key if normalise(f.value) == normalise(value)]
    if same:
        return Outcome("MATCH", same[0], similarity=1.0)
    if same_key:
        return Outcome("CONFLICT", conflicting=tuple(same_key))
    return None


def by_similarity(
    value: str,
    key: str | None,
    candidates: Sequence[DedupCandidate],
    *,
    word_overlap: float,
    embedding_similarity: float,
    unsure_overlap: float | None = None,
    unsure_similarity: float | None = None,
) -> Near:
    """The verdict of near-duplicate text over ``candidates``, the live facts of the write's scope
    and type with their cosines to its embedding (a fact of another key is another fact, however
    alike the words): MATCH at or above either MATCH threshold (the closest), UNSURE between the
    thresholds (``unsure_overlap`` and ``unsure_similarity``, the lower bounds; None: no UNSURE
    band) and never towards a fact that is itself staged as a duplicate, else NEW."""
    best: tuple[float, DedupCandidate | None] = (0.0, None)
    maybe: tuple[float, DedupCandidate | None] = (0.0, None)
    low_overlap = word_overlap if unsure_overlap is None else unsure_overlap
    low_near = embedding_similarity if unsure_similarity is None else unsure_similarity
    words = word_set(value)
    for f in candidates:
        if key is not None and f.key is not None and f.key != key:
            continue
        overlap, near = _jaccard(words, word_set(f.value)), f.cosine
        score = max(overlap, near)
        if overlap >= word_overlap or near >= embedding_similarity:
            if score > best[0]:
                best = (score, f)
        elif (overlap >= low_overlap or near >= low_near) and score > maybe[0] and f.duplicate_of is None:
            maybe = (score, f)  # a candidate is never the target of another: targets are settled facts
    if best[1] is not None:
        return Near("MATCH", best[1], best[0])
    if maybe[1] is not None:
        return Near("UNSURE", maybe[1], maybe[0])
    return Near("NEW")
