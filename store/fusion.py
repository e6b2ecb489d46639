"""Reciprocal-rank fusion of ranked lists (Cormack et al., SIGIR 2009), shared by both adapters.

``score(d) = sum_i w_i / (k + rank_i(d))`` with ranks from 1; a list that does not rank ``d``
contributes nothing. Ties break by first appearance across the lists in order (text first), so a
fused ranking is deterministic and stable across pages of one search.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from store import validation
from store.errors import StoreValidationError

K = TypeVar("K", bound=Hashable)

RRF_K = 60
MODES = ("text", "vector", "hybrid")


def rrf(
    lists: Sequence[Sequence[K]], *, k: int = RRF_K, weights: Sequence[float] | None = None
) -> list[tuple[K, float]]:
    """Fused ``(item, score)`` best first; duplicates within one list count at their best rank."""
    if k < 0:
        raise ValueError("k must be >= 0")
    if weights is not None and len(weights) != len(lists):
        raise ValueError("one weight per list")
    scores: dict[K, float] = {}
    order: dict[K, int] = {}
    for i, ranked in enumerate(lists):
        w = 1.0 if weights is None else float(weights[i])
        seen: set[K] = set()
        for rank, item in enumerate(ranked, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
            order.setdefault(item, len(order))
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    return mode


def unit_vectors(
    vectors: object, embedding_version: object, *, dimension: int | None = None
) -> tuple[list[tuple[str, npt.NDArray[np.float32]]], int]:
    """Arguments of ``put_message_vectors``: ``(message_id, unit float32 vector)`` pairs (the
    first of a repeated id wins) and their common dimension (0 when empty)."""
    if not isinstance(embedding_version, str) or not embedding_version or len(embedding_version) > 128:
        raise StoreValidationError("embedding_version must be a non-empty string (<= 128 chars)")
    if isinstance(vectors, str | bytes) or not isinstance(vectors, Sequence):
        raise StoreValidationError("vectors must be a sequence of (message_id, vector)")
    out: dict[str, npt.NDArray[np.float32]] = {}
    dim = dimension or 0
    for item in vectors:
        if not isinstance(item, Sequence) or isinstance(item, str) or len(item) != 2:
            raise StoreValidationError("each vector must be a (message_id, vector) pair")
        message_id, vec = item
        validation.identifier("message_id", message_id)
        unit = unit_vector(vec, dim or None)
        dim = dim or len(unit)
        out.setdefault(message_id, unit)
    return list(out.items()), dim


def unit_vector(vector: object, dimension: int | None = None) -> npt.NDArray[np.float32]:
    """A finite, non-zero vector scaled to unit length; of ``dimension`` when given."""
    try:
        arr = np.asarray(vector, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise StoreValidationError("a vector must be a sequence of numbers", field="vector") from exc
    if isinstance(vector, str | bytes) or arr.size == 0 or not np.all(np.isfinite(arr)):
        raise StoreValidationError("a vector must be finite numbers, at least one", field="vector")
    if dimension is not None and arr.size != dimension:
        raise StoreValidationError(f"vector has dimension {arr.size}, expected {dimension}", field="vector")
    norm = float(np.linalg.norm(arr))
    if norm == 0.0:
        raise StoreValidationError("a zero vector has no direction", field="vector")
    return (arr / norm).astype(np.float32)


def cosine_top(
    query: npt.NDArray[np.float32], ids: Sequence[K], matrix: npt.NDArray[np.float32], n: int
) -> list[tuple[K, float]]:
    """Exact cosine top-``n`` of unit rows against a unit query, ties by corpus order."""
    if n <= 0 or not len(ids):
        return []
    scores = matrix @ query
    order = np.argsort(-scores, kind="stable")[:n]
    return [(ids[int(i)], float(scores[int(i)])) for i in order]
