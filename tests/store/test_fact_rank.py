"""fact_rank's vectorised ranking against a plain reference of the same rules (BM25 over the
query's attainable maximum, cosines clipped at zero, half each, text only where a fact or the
query has no vector, ties by update time then id), on seeded random candidate lists, each list
searched several times (its prepared terms and vectors are kept between searches)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from vcm.store import bm25, fact_rank, fusion
from vcm.store.analysis import analyze, query_terms
from vcm.store.fact_rank import Candidate

WORDS = ("tea coffee green launch date paris porto sister dog biscuit french answers juice sea likes runs").split()  # noqa: SIM905


def reference(
    text: str, vector: Sequence[float] | None, candidates: Sequence[Candidate], limit: int
) -> list[tuple[str, float]]:
    """The rules one candidate at a time, in Python floats."""
    wanted = list(dict.fromkeys(query_terms(text))) if text.strip() else []
    text_part: dict[str, float] = {}
    if wanted:
        docs = [(len(t), Counter(t)) for t in (analyze(c.text) for c in candidates)]
        avg = sum(n for n, _ in docs) / len(docs)
        df = {t: sum(1 for _, counts in docs if t in counts) for t in wanted}
        weights = {t: bm25.idf(df[t], len(docs)) * (1 + bm25.K1) for t in wanted if df[t]}
        ceiling = sum(bm25.idf(df[t], len(docs)) * (1 + bm25.K1) for t in wanted)
        for c, (length, counts) in zip(candidates, docs, strict=True):
            if weights and length:
                norm = bm25.K1 * (1 - bm25.B + bm25.B * length / avg)
                s = sum(w * counts[t] / (counts[t] + norm) for t, w in weights.items() if counts[t])
                if s > 0:
                    text_part[c.fact_id] = s / ceiling
    vector_part: dict[str, float] = {}
    embedded = vector is not None and any(c.has_vector for c in candidates)
    if embedded:
        q = fusion.unit_vector(vector)
        for c in candidates:
            if c.vector is None and c.cosine is not None:
                vector_part[c.fact_id] = min(1.0, max(0.0, c.cosine))
            elif c.vector is not None and c.vector.shape[0] == q.shape[0]:
                norm = float(np.linalg.norm(c.vector)) or 1.0
                vector_part[c.fact_id] = min(1.0, max(0.0, float(c.vector @ q) / norm))
    unembedded = {c.fact_id for c in candidates if not c.has_vector} if embedded else set(text_part)
    w = fusion.TEXT_WEIGHT
    fused = {
        i: text_part.get(i, 0.0) if i in unembedded else w * text_part.get(i, 0.0) + (1 - w) * vector_part.get(i, 0.0)
        for i in {**text_part, **vector_part}
    }
    updated = {c.fact_id: c.updated_at for c in candidates}
    hits = [(i, s) for i, s in fused.items() if s > 0]
    return sorted(hits, key=lambda kv: (-kv[1], -updated[kv[0]], kv[0]))[:limit]


def _candidates(rng: random.Random, n: int, dim: int) -> list[Candidate]:
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 6)))
        kind = rng.random()
        vector = cosine = None
        embedded = False
        if kind < 0.5:
            vector = np.array([rng.gauss(0, 1) for _ in range(dim)], dtype=np.float32)
        elif kind < 0.6:  # a vector of another model's length: 0 on the vector half
            vector = np.array([rng.gauss(0, 1) for _ in range(dim + 1)], dtype=np.float32)
        elif kind < 0.7:  # the database's own cosine (ArangoDB)
            cosine, embedded = rng.uniform(-0.5, 1.2), True
        out.append(Candidate(f"f{i:04d}", text, float(rng.randint(0, 5)), vector, cosine, embedded))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_ranking_follows_the_rules_on_random_candidates(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(25):
        dim = 8
        candidates = _candidates(rng, rng.randint(1, 200), dim)
        for _ in range(3):  # the same list again: its prepared terms and vectors are reused
            query = " ".join(rng.choice([*WORDS, "zzz"]) for _ in range(rng.randint(0, 4)))
            vector = None if rng.random() < 0.2 else [rng.gauss(0, 1) for _ in range(dim)]
            limit = rng.choice([1, 3, 10, 500])
            got = fact_rank.order(query, vector, candidates, limit)
            want = reference(query, vector, candidates, limit)
            assert [i for i, _ in got] == [i for i, _ in want]
            assert np.allclose([s for _, s in got], [s for _, s in want], rtol=1e-6, atol=1e-7)  # float32 vectors


def test_ties_at_the_limit_break_by_update_time_then_id() -> None:
    same = [Candidate(f"f{i}", "likes tea", float(i % 2), None) for i in range(6)]
    assert [i for i, _ in fact_rank.order("tea", None, same, 3)] == ["f1", "f3", "f5"]
    assert fact_rank.order("tea", None, same, 0) == []
