"""IVF sizing rules for the FAISS index (pure).

They follow ArangoDB's vector index so both adapters mean the same thing by nLists/nProbe:
``nLists ≈ 4·sqrt(N)`` (ArangoDB 3.12.10's ``autoSqrt`` default) and exact search until the
index can be trained. FAISS k-means warns below 39 training points per centroid, so nLists is
also capped at N / 39 and training waits until at least that many vectors exist.
"""

from __future__ import annotations

import math

MIN_POINTS_PER_CENTROID = 39
DEFAULT_TRAIN_THRESHOLD = 10_000
MIN_LISTS = 2


def auto_n_lists(n_vectors: int) -> int:
    """nLists for N vectors when the caller did not fix it: 4·sqrt(N), at most N/39."""
    ideal = round(4 * math.sqrt(max(n_vectors, 0)))
    cap = n_vectors // MIN_POINTS_PER_CENTROID
    return max(MIN_LISTS, min(ideal, cap))


def train_threshold(configured: int, n_lists: int | None) -> int:
    """Vectors needed before training IVF: the configured floor, and enough per centroid."""
    floor = MIN_POINTS_PER_CENTROID * (n_lists if n_lists is not None else MIN_LISTS)
    return max(configured, floor)


def should_retrain(current_lists: int, n_vectors: int, fixed_lists: int | None) -> bool:
    """Retrain an auto-sized index once the ideal nLists has doubled (the index grew ~4x)."""
    if fixed_lists is not None:
        return False
    return auto_n_lists(n_vectors) >= 2 * current_lists


def overfetch_sizes(wanted: int, total: int, factor: int = 4) -> list[int]:
    """Growing candidate counts for a post-filtered top-k: k·f, k·f², ... until the whole index.

    ArangoDB's APPROX_NEAR post-filter subquery over-fetches the same way; the search stops
    at the first size that yields ``wanted`` survivors or covers every vector.
    """
    if wanted <= 0 or total <= 0:
        return []
    sizes: list[int] = []
    size = max(wanted * factor, wanted)
    while True:
        if size >= total:
            sizes.append(total)
            return sizes
        sizes.append(size)
        size *= factor
