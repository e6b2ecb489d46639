"""Ranking of facts for ``search_facts``, shared by both adapters (pure).

An agent holds thousands of facts, not millions of messages, so both adapters fetch the facts
that pass the filters and rank them here: BM25 over the analysed value, key and tags (the same
formula and analyzer as message recall) and cosine on the fact embeddings, combined convexly
(half each, as hybrid recall).

The score means the same in every search, so a caller can compare it across queries or cut at a
threshold: nothing is rescaled by what else the search found (the best hit is 1.0 only if it
matches that well). The text part is the fact's BM25 over the most any text could score for the
query (each query term's weight, which BM25 approaches as the term repeats): the share of the
query matched, in [0, 1). The vector part is the cosine, below zero counted as zero. A fact
without an embedding, or a query without one, takes its text part for both halves.

A prompt build searches facts on every turn, so the per-fact work is kept small: candidates are
light (id, text, update time, vector; the embedded adapter reads whole facts only for the hits),
a fact's analysed terms are cached by its text (a write that changes the text makes a new key),
BM25 touches only the query's terms, and embeddings arrive as arrays (the embedded adapter's
float32 blobs, zero-copy) rather than lists of Python floats.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from vcm.store import bm25, fusion
from vcm.store.analysis import analyze, query_terms
from vcm.store.types import Fact, FactHit

# Candidates fetched per search; beyond this, filters should narrow the search.
MAX_CANDIDATES = 5000

Vector = npt.NDArray[np.float32]


def fact_text(fact: Fact) -> str:
    return document(fact.value, fact.key, fact.tags, fact.category)


def document(value: str, key: str | None, tags: Sequence[str], category: str) -> str:
    """The text a fact is found by: its value, key, tags and category."""
    return " ".join([value, key or "", *tags, category])


def fact_terms(fact: Fact) -> list[str]:
    return analyze(fact_text(fact))


# Fact texts whose analysis is cached (per process); longer texts are analysed on each search so
# that the cache stays within a few tens of MB.
CACHED_TEXTS = 8192
CACHED_TEXT_CHARS = 600


def _term_counts(text: str) -> tuple[int, dict[str, int]]:
    """Length and term frequencies of an analysed fact text (cached: the analyzer is the cost)."""
    return _cached_counts(text) if len(text) <= CACHED_TEXT_CHARS else _counts(text)


def _counts(text: str) -> tuple[int, dict[str, int]]:
    terms = analyze(text)
    return len(terms), dict(Counter(terms))


_cached_counts = functools.lru_cache(maxsize=CACHED_TEXTS)(_counts)


@dataclass(frozen=True)
class Candidate:
    """What ranking needs of a fact: adapters read these light columns for every candidate and
    the whole fact only for the hits."""

    fact_id: str
    text: str  # see fact_text
    updated_at: float
    vector: Vector | None = None
    # Or, from an adapter that computes it in the database (ArangoDB): the cosine of the fact's
    # embedding to the query vector (None when it has none of that length), and whether it has
    # an embedding at all (one of another length scores 0 on the vector half, as here).
    cosine: float | None = None
    embedded: bool = False

    @property
    def has_vector(self) -> bool:
        return self.vector is not None or self.embedded


def candidate(fact: Fact, vector: Vector | None = None) -> Candidate:
    if vector is None and fact.embedding:
        vector = np.asarray(fact.embedding, dtype=np.float32)
    return Candidate(fact.fact_id, fact_text(fact), fact.updated_at, vector)


def _text_scores(wanted: Sequence[str], candidates: Sequence[Candidate]) -> list[tuple[str, float]]:
    """BM25 of each matching candidate over the query's attainable maximum (see the module)."""
    docs = [_term_counts(c.text) for c in candidates]
    avg = sum(n for n, _ in docs) / len(docs)
    terms = list(dict.fromkeys(wanted))
    df = {t: sum(1 for _, counts in docs if t in counts) for t in terms}
    weights = {t: bm25.idf(df[t], len(docs)) * (1.0 + bm25.K1) for t in terms if df[t]}
    out: list[tuple[str, float]] = []
    if not weights:
        return out
    # A query term no fact holds still counts in the maximum: it is part of what was asked.
    ceiling = sum(bm25.idf(df[t], len(docs)) * (1.0 + bm25.K1) for t in terms)
    for c, (length, counts) in zip(candidates, docs, strict=True):
        if not length:
            continue
        norm = bm25.K1 * (1.0 - bm25.B + bm25.B * length / (avg if avg > 0 else float(length)))
        s = 0.0
        for t, w in weights.items():
            tf = counts.get(t, 0)
            if tf:
                s += w * tf / (tf + norm)
        if s > 0:
            out.append((c.fact_id, s / ceiling))
    out.sort(key=lambda kv: -kv[1])
    return out


def _vector_scores(q: Vector, candidates: Sequence[Candidate]) -> list[tuple[str, float]]:
    dim = q.shape[0]
    out = [(c.fact_id, min(1.0, max(0.0, c.cosine))) for c in candidates if c.vector is None and c.cosine is not None]
    rows = [c for c in candidates if c.vector is not None and c.vector.shape[0] == dim]
    if rows:
        matrix, norms = _stacked(rows)
        sims = np.clip((matrix @ q) / norms, 0.0, 1.0)
        out += [(c.fact_id, float(s)) for c, s in zip(rows, sims.tolist(), strict=True)]
    return sorted(out, key=lambda kv: -kv[1])


# The last few candidate lists' stacked vectors and norms: an adapter that keeps its candidates
# between searches (the embedded store's FactVectors) hands the same objects to consecutive
# searches, and stacking 1 000 vectors was ~1 ms of each. Keyed by the candidates' identities;
# the entry holds the candidates themselves, so no identity is reused while it is cached.
_STACKED: OrderedDict[tuple[int, ...], tuple[list[Candidate], Vector, Vector]] = OrderedDict()
_STACKED_KEPT = 4
_stacked_lock = threading.Lock()


def _stacked(rows: list[Candidate]) -> tuple[Vector, Vector]:
    key = tuple(map(id, rows))
    with _stacked_lock:
        held = _STACKED.get(key)
        if held is not None:
            _STACKED.move_to_end(key)
            return held[1], held[2]
    matrix: Vector = np.vstack([c.vector for c in rows if c.vector is not None]).astype(np.float32, copy=False)
    norms: Vector = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0
    with _stacked_lock:
        _STACKED[key] = (rows, matrix, norms)
        while len(_STACKED) > _STACKED_KEPT:
            _STACKED.popitem(last=False)
    return matrix, norms


def order(
    text: str, vector: Sequence[float] | None, candidates: Sequence[Candidate], limit: int
) -> list[tuple[str, float]]:
    """The ids and fused scores of the best ``limit`` candidates for the query, best first (ties:
    the newer first, then by id)."""
    if not candidates:
        return []
    wanted = query_terms(text) if text.strip() else []
    text_scores = _text_scores(wanted, candidates) if wanted else []
    embedded = vector is not None and any(c.has_vector for c in candidates)
    vector_scores = _vector_scores(fusion.unit_vector(vector), candidates) if embedded else []
    if not text_scores and not vector_scores:
        return []
    text_part, vector_part = dict(text_scores), dict(vector_scores)
    unembedded = {c.fact_id for c in candidates if not c.has_vector} if embedded else set(text_part)
    w = fusion.TEXT_WEIGHT
    fused = {
        i: text_part.get(i, 0.0) if i in unembedded else w * text_part.get(i, 0.0) + (1.0 - w) * vector_part.get(i, 0.0)
        for i in {**text_part, **vector_part}
    }
    fused = {i: s for i, s in fused.items() if s > 0.0}  # a fact unlike the query in words and meaning is no hit
    updated = {c.fact_id: c.updated_at for c in candidates}
    return sorted(fused.items(), key=lambda kv: (-kv[1], -updated[kv[0]], kv[0]))[:limit]


def rank(text: str, vector: Sequence[float] | None, facts: Sequence[Fact], limit: int) -> list[FactHit]:
    """:func:`order` over whole facts (their embeddings in ``Fact.embedding``); hits never carry
    embeddings."""
    by_id = {f.fact_id: f for f in facts}
    out: list[FactHit] = []
    for i, s in order(text, vector, [candidate(f) for f in facts], limit):
        f = by_id[i]
        out.append(FactHit(f if f.embedding is None else replace(f, embedding=None), s))
    return out


def cosines(vector: Sequence[float] | None, others: Sequence[Sequence[float] | Vector | None]) -> list[float]:
    """The cosine of ``vector`` with each of ``others``, in float64; 0.0 where either is missing,
    empty, of another length or of zero length. One matrix product: fact dedup compares a write
    with up to a thousand facts, where a Python loop over 384 floats each took ~40 ms."""
    out = [0.0] * len(others)
    if vector is None or len(vector) == 0:
        return out
    rows = [i for i, b in enumerate(others) if b is not None and len(b) == len(vector)]
    if not rows:
        return out
    q = np.asarray(vector, dtype=np.float64)
    m = np.asarray([others[i] for i in rows], dtype=np.float64)
    norms = np.linalg.norm(m, axis=1) * float(np.linalg.norm(q))
    for i, dot, norm in zip(rows, (m @ q).tolist(), norms.tolist(), strict=True):
        out[i] = dot / norm if norm else 0.0
    return out


def blob_vector(blob: bytes | None) -> Vector | None:
    """A stored little-endian float32 embedding, without copying (None: no embedding)."""
    if not blob:
        return None
    v: Vector = np.frombuffer(blob, dtype="<f4")
    return v


__all__ = (
    "MAX_CANDIDATES",
    "Candidate",
    "blob_vector",
    "candidate",
    "cosines",
    "document",
    "fact_terms",
    "fact_text",
    "order",
    "rank",
)
