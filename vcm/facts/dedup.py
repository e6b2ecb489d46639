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

import numpy as np

from vcm.store.types import Fact

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


def jaccard(a: str, b: str) -> float:
    return _jaccard(word_set(a), word_set(b))


def _jaccard(x: set[str], y: set[str]) -> float:
    return len(x & y) / len(x | y) if x and y else 0.0


def cosine(a: Sequence[float] | None, b: Sequence[float] | None) -> float:
    return cosines(a, [b])[0]


def cosines(a: Sequence[float] | None, others: Sequence[Sequence[float] | None]) -> list[float]:
    """The cosine of ``a`` with each of ``others``; 0.0 where either is missing, empty, of
    another length or of zero length. One matrix product: a write is compared with up to a
    thousand facts, and a Python loop over their 384 floats each took about 40 ms at that count."""
    out = [0.0] * len(others)
    if not a:
        return out
    rows = [i for i, b in enumerate(others) if b and len(b) == len(a)]
    if not rows:
        return out
    q = np.asarray(a, dtype=np.float64)
    m = np.asarray([others[i] for i in rows], dtype=np.float64)
    norms = np.linalg.norm(m, axis=1) * float(np.linalg.norm(q))
    dots = m @ q
    for i, dot, norm in zip(rows, dots.tolist(), norms.tolist(), strict=True):
        out[i] = dot / norm if norm else 0.0
    return out


# Types whose key names the thing itself: one key, one fact.
IDENTITY_TYPES = frozenset({"entity", "relation"})


@dataclass(frozen=True)
class Outcome:
    decision: Decision
    target: Fact | None = None  # the fact a MATCH joins, or an UNSURE one may duplicate
    conflicting: tuple[Fact, ...] = ()  # the facts a CONFLICT is marked against
    similarity: float = 0.0


def decide(
    value: str,
    key: str | None,
    embedding: Sequence[float] | None,
    candidates: Sequence[Fact],
    *,
    word_overlap: float,
    embedding_similarity: float,
    identity: bool = False,
    unsure_overlap: float | None = None,
    unsure_similarity: float | None = None,
) -> Outcome:
    """``candidates``: the agent's live facts of the write's scope and type. ``identity``: the
    key names the thing itself (an entity's name, a relation's triple), so one key is one fact
    whatever its description says: a MATCH, never a CONFLICT. ``unsure_overlap`` and
    ``unsure_similarity``: the lower bounds of UNSURE (None: no UNSURE band)."""
    if key is not None:
        keyed = [f for f in candidates if f.key == key]
        if identity and keyed:
            return Outcome("MATCH", keyed[0], similarity=1.0)
        same = [f for f in keyed if normalise(f.value) == normalise(value)]
        if same:
            return Outcome("MATCH", same[0], similarity=1.0)
        if keyed:
            return Outcome("CONFLICT", conflicting=tuple(keyed))
    best: tuple[float, Fact | None] = (0.0, None)
    maybe: tuple[float, Fact | None] = (0.0, None)
    low_overlap = word_overlap if unsure_overlap is None else unsure_overlap
    low_near = embedding_similarity if unsure_similarity is None else unsure_similarity
    # Another key: another fact, however alike the words.
    open_ = [f for f in candidates if key is None or f.key is None or f.key == key]
    words = word_set(value)
    for f, near in zip(open_, cosines(embedding, [f.embedding for f in open_]), strict=True):
        overlap = _jaccard(words, word_set(f.value))
        score = max(overlap, near)
        if overlap >= word_overlap or near >= embedding_similarity:
            if score > best[0]:
                best = (score, f)
        elif (overlap >= low_overlap or near >= low_near) and score > maybe[0] and f.duplicate_of is None:
            maybe = (score, f)  # a candidate is never the target of another: targets are settled facts
    if best[1] is not None:
        return Outcome("MATCH", best[1], similarity=best[0])
    if maybe[1] is not None:
        return Outcome("UNSURE", maybe[1], similarity=maybe[0])
    return Outcome("NEW")
