"""IVF sizing rules for the FAISS index (pure).

nLists and nProbe mean what they mean in ArangoDB's vector index (IVF cells, cells searched per
query), and the index stays exact until it can be trained. The defaults are tuned for the
machine the embedded adapter targets (a few cores), measured with ``scripts/bench_store.py``:

* ``nLists = sqrt(N)``, capped at N/39 (FAISS k-means warns below 39 training points per
  centroid). ArangoDB's ``autoSqrt`` uses 4·sqrt(N); at equal recall@10 the fraction of the
  vectors a query scans is about the same either way, but k-means training and list
  assignment cost grow with nLists: at 5e6 384-d vectors 4·sqrt(N) is ~4x the build time
  (tens of minutes on two cores) for no gain in query cost.
* default ``nProbe = max(16, nLists/64)`` (rounded up): recall@10 depends mostly on the
  fraction of lists probed; a fixed nProbe loses recall as nLists grows with N. 16 of 1 000
  lists (1e6 vectors) gave recall@10 0.980; 1 % of the lists (23 of 2 236 at 5e6) only
  0.952-0.967 across runs, too close to the 0.95 target, so the default probes ~1.6 % (35).
"""

from __future__ import annotations

import math

MIN_POINTS_PER_CENTROID = 39
# FAISS k-means subsamples to this many points per centroid anyway; reading more is waste.
TRAIN_POINTS_PER_CENTROID = 256
DEFAULT_TRAIN_THRESHOLD = 10_000
MIN_LISTS = 2
MIN_PROBE = 16
PROBE_DIVISOR = 64


def auto_n_lists(n_vectors: int) -> int:
    """nLists for N vectors when the caller did not fix it: sqrt(N), at most N/39."""
    ideal = round(math.sqrt(max(n_vectors, 0)))
    cap = n_vectors // MIN_POINTS_PER_CENTROID
    return max(MIN_LISTS, min(ideal, cap))


def default_n_probe(n_lists: int) -> int:
    """Lists searched when the caller passes no nProbe: max(16, nLists/64), at most nLists."""
    return max(1, min(n_lists, max(MIN_PROBE, math.ceil(n_lists / PROBE_DIVISOR))))


def training_sample_size(n_vectors: int, n_lists: int) -> int:
    """Vectors to train nLists centroids on: all of them, up to 256 per centroid."""
    return min(n_vectors, n_lists * TRAIN_POINTS_PER_CENTROID)


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
