"""Which sentences a summary keeps: embedding centrality plus maximal marginal relevance. Pure.

Vectors are rows of unit length (as :meth:`vcm.tasks.embedding.Embedder.encode` returns them), so a
dot product is a cosine. Everything here takes plain arrays, so tests use small hand-made vectors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
Scores = npt.NDArray[np.float64]


def unit(vector: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``vector`` scaled to length 1 (zero stays zero)."""
    v = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def centroid(vectors: Vectors, weights: npt.NDArray[np.float64] | None = None) -> npt.NDArray[np.float64]:
    """Unit-length (weighted) mean direction of the rows (zero vector when there are none)."""
    if len(vectors) == 0:
        return np.zeros(vectors.shape[1] if vectors.ndim == 2 else 0, dtype=np.float64)
    return unit(np.average(np.asarray(vectors, dtype=np.float64), axis=0, weights=weights))


def centrality(vectors: Vectors, reference: npt.NDArray[np.float64]) -> Scores:
    """Cosine of each row to the reference direction: how typical the sentence is of the whole."""
    if len(vectors) == 0:
        return np.zeros(0, dtype=np.float64)
    return np.asarray(vectors, dtype=np.float64) @ reference


def mmr_select(
    relevance: Scores,
    vectors: Vectors,
    costs: Sequence[int],
    budget: int,
    mmr_lambda: float,
    *,
    candidates: Sequence[int] | range,
    chosen: Sequence[int] = (),
) -> list[int]:
    """Greedy budgeted MMR: repeatedly take the candidate maximising
    ``lambda * relevance - (1 - lambda) * max cosine to anything already chosen``
    among those whose cost still fits; stops when nothing fits.

    ``chosen`` are rows already in the summary (they count for redundancy, not for the budget).
    Returns the newly picked rows in pick order. Ties go to the earlier row, so it is deterministic.
    """
    rows = np.asarray(vectors, dtype=np.float64)
    picked: list[int] = []
    left = budget
    pool = [i for i in candidates if i not in set(chosen)]
    # Running max similarity of every row to the chosen set.
    redundancy = np.full(len(rows), -1.0)
    for j in chosen:
        redundancy = np.maximum(redundancy, rows @ rows[j])
    while pool:
        best, best_score = -1, -np.inf
        for i in pool:
            if costs[i] > left:
                continue
            penalty = max(redundancy[i], 0.0) if (chosen or picked) else 0.0
            score = mmr_lambda * relevance[i] - (1.0 - mmr_lambda) * penalty
            if score > best_score:
                best, best_score = i, score
        if best < 0:
            break
        picked.append(best)
        left -= costs[best]
        pool.remove(best)
        redundancy = np.maximum(redundancy, rows @ rows[best])
    return picked


_WORD = re.compile(r"[a-z0-9][a-z0-9_\-']+")


def lexical_centrality(texts: Sequence[str]) -> Scores:
    """Cosine of each text's word-count vector to the centroid of all of them (no model needed).
    Words of one or two characters are skipped; the speaker prefix counts like any word.
    Sparse arithmetic: linear in the number of words, whatever the vocabulary."""
    rows: list[dict[str, float]] = []
    total: dict[str, float] = {}
    for text in texts:
        counts: dict[str, float] = {}
        for word in _WORD.findall(text.lower()):
            counts[word] = counts.get(word, 0.0) + 1.0
        norm = math.sqrt(sum(c * c for c in counts.values()))
        row = {w: c / norm for w, c in counts.items()} if norm else {}
        for w, v in row.items():
            total[w] = total.get(w, 0.0) + v
        rows.append(row)
    size = math.sqrt(sum(v * v for v in total.values()))
    if not size:
        return np.zeros(len(texts), dtype=np.float64)
    return np.array([sum(v * total[w] for w, v in row.items()) / size for row in rows], dtype=np.float64)


def stratified_pick(scores: Sequence[float] | Scores, limit: int) -> list[int]:
    """At most ``limit`` indexes: the best-scoring one of each of ``limit`` consecutive, near-equal
    strata, ascending. Keeps a spread over the whole sequence (the conversation's time line)
    while preferring the strongest item of each stretch."""
    n = len(scores)
    if n <= limit:
        return list(range(n))
    if limit <= 0:
        return []
    picks = []
    for stratum in np.array_split(np.arange(n), limit):
        picks.append(int(stratum[int(np.argmax(np.asarray(scores)[stratum]))]))
    return picks
