"""Fusion of recall's ranked lists, shared by both adapters (pure).

Hybrid recall (:func:`hybrid`) is a convex combination of normalised scores (Bruch et al.,
"An Analysis of Fusion Functions for Hybrid Retrieval", TOIS 2023): unlike rank fusion it
keeps how far ahead a strong keyword match is. Each message's fused score then partly spreads to
its neighbours in the conversation (:func:`spread_to_neighbours`): evidence often spans a turn
and the one before or after it (a question and its answer), which neither list can see. Both
steps were chosen on the LoCoMo dev file (see README, recall quality); they help on every
category, not on one.

:func:`rrf` is reciprocal-rank fusion (Cormack et al., SIGIR 2009), kept for comparison:
``score(d) = sum_i w_i / (k + rank_i(d))`` with ranks from 1.

A list that does not hold ``d`` contributes nothing. Ties break by first appearance across the
lists in order (text first), so a fused ranking is deterministic and stable across pages.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from vcm.errors import ValidationError
from vcm.store import authors, search_checks, validation
from vcm.store.diversity import Diversity, diversify

K = TypeVar("K", bound=Hashable)

RRF_K = 60
MODES = ("text", "vector", "hybrid")
# Share of the fused score that is BM25's (the rest is the vector's), and share of the better
# neighbour's fused score a message gains. Both were flat optima on the dev file (0.4-0.6).
TEXT_WEIGHT = 0.5
NEIGHBOUR_WEIGHT = 0.5
# Spreading reaches two turns each way (the weight squared at distance 2: in a dialogue the turn
# two back is the same speaker's previous message); three measured no better.
NEIGHBOUR_REACH = 2
# How deep each list is that hybrid fuses for a ranking of n results. Up to HYBRID_FULL_DEPTH_UPTO
# vectors of the agent, as deep as paging goes (cursor_max_results, 1 000): that covers a whole
# conversation of LoCoMo's size, where the fusion was tuned (min-max scaling of the cosine list
# depends on how deep it is: 5 x n measured 60.4 / 73.2 / 82.9 / 88.6 against 65.1 / 74.9 / 84.8 /
# 90.4 on the dev file), and costs little at that size. Beyond it, HYBRID_DEPTH_FACTOR x n, at
# least HYBRID_DEPTH_MIN: at 1e6 messages of one agent the 1 000-deep lists cost about 10 ms of a
# 17 ms query (docs/recall-scale.md). Deeper rankings (the snapshot a second page is served from) go
# as deep as paging does either way.
HYBRID_FULL_DEPTH_UPTO = 10_000
HYBRID_DEPTH_FACTOR = 5
HYBRID_DEPTH_MIN = 100


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


def minmax(scored: Sequence[tuple[K, float]], *, floor: float | None = None) -> dict[K, float]:
    """Scores mapped onto [0, 1]: ``floor`` (default: the list's own minimum) to 0, the list's
    maximum to 1, anything below the floor to 0 (all 1.0 when the maximum is the floor); a
    repeated item keeps its first score."""
    first: dict[K, float] = {}
    for item, s in scored:
        first.setdefault(item, float(s))
    if not first:
        return {}
    low = min(first.values()) if floor is None else floor
    high = max(first.values())
    return {item: max(s - low, 0.0) / (high - low) if high > low else 1.0 for item, s in first.items()}


def convex(
    text: Sequence[tuple[K, float]],
    vector: Sequence[tuple[K, float]],
    *,
    text_weight: float = TEXT_WEIGHT,
    unembedded: Collection[K] = (),
) -> dict[K, float]:
    """``w * text + (1 - w) * vector`` of normalised scores, in first-appearance order (text
    first); an item missing from a list gets 0 from it. BM25 is scaled by its best score (its
    floor is 0, what every non-matching message scores: the weakest match is still a match);
    cosine, which has no such floor, is min-max scaled over its list.

    An item in ``unembedded`` has no vector to score (not embedded yet, its embedding failed, or
    it predates the current embedding version): its vector score is unknown, not 0, so it takes
    its text score for both parts. Otherwise a keyword match without a vector would lose to every
    embedded message, and partial coverage would bury exactly the messages vectors cannot find;
    with no vectors at all, hybrid scores are the normalised text scores."""
    if not 0.0 <= text_weight <= 1.0:
        raise ValueError("text_weight must be within [0, 1]")
    t, v = minmax(text, floor=0.0), minmax(vector)
    missing = set(unembedded)
    return {
        i: t.get(i, 0.0) if i in missing else text_weight * t.get(i, 0.0) + (1.0 - text_weight) * v.get(i, 0.0)
        for i in {**t, **v}
    }


def spread_to_neighbours(
    scores: Mapping[K, float], seq: Mapping[K, int], *, weight: float = NEIGHBOUR_WEIGHT, reach: int = NEIGHBOUR_REACH
) -> dict[K, float]:
    """Each scored item gains, for every distance ``d`` up to ``reach``, ``weight ** d`` times the
    better score of the two items ``d`` positions before and after it (by ``seq``, among the
    scored ones). An item without a ``seq`` keeps its score. Gains read the scores before
    spreading, so the result does not depend on order."""
    if weight < 0:
        raise ValueError("weight must be >= 0")
    if reach < 0:
        raise ValueError("reach must be >= 0")
    at = {s: scores[item] for item, s in seq.items() if item in scores}  # position -> score
    score_at = at.get
    steps = [(d, weight**d) for d in range(1, reach + 1)]
    out: dict[K, float] = {}
    for item, score in scores.items():
        n = seq.get(item)
        if n is None:
            out[item] = score
            continue
        gain = 0.0
        for d, w in steps:
            before, after = score_at(n - d), score_at(n + d)
            if before is None:
                best = 0.0 if after is None else after
            else:
                best = before if after is None or before >= after else after
            gain += w * best
        out[item] = score + gain
    return out


def hybrid(
    text: Sequence[tuple[K, float]],
    vector: Sequence[tuple[K, float]],
    seq: Mapping[K, int],
    *,
    text_weight: float = TEXT_WEIGHT,
    neighbour_weight: float = NEIGHBOUR_WEIGHT,
    reach: int = NEIGHBOUR_REACH,
    unembedded: Collection[K] = (),
    diversity: Diversity | None = None,
    anchor: authors.Anchor[K] | None = None,
) -> list[tuple[K, float]]:
    """Hybrid recall's ranking: :func:`convex` fusion (``unembedded``: the text hits that have no
    vector), then :func:`spread_to_neighbours`, then, with ``anchor``, the other authors'
    messages weighted down (:func:`vcm.store.authors.anchor_ranking`); best first, ties by first
    appearance (text first); then, with ``diversity``, spread across the conversation
    (:func:`vcm.store.diversity.diversify`)."""
    fused = convex(text, vector, text_weight=text_weight, unembedded=unembedded)
    fused = spread_to_neighbours(fused, seq, weight=neighbour_weight, reach=reach)
    if anchor is not None:
        fused = authors.anchor_ranking(fused, anchor)
    order = {item: i for i, item in enumerate(fused)}
    ranked = sorted(fused.items(), key=lambda kv: (-kv[1], order[kv[0]]))
    return ranked if diversity is None else diversify(ranked, seq, diversity)


def hybrid_depth(n: int, max_results: int, *, corpus: int, factor: int = HYBRID_DEPTH_FACTOR) -> int:
    """Depth of the text and the vector list fused into a hybrid ranking of ``n`` results for an
    agent with ``corpus`` message vectors: ``max_results`` (how deep paging can go) up to
    ``HYBRID_FULL_DEPTH_UPTO`` vectors or with ``factor`` 0, else ``factor * n``, at least
    ``HYBRID_DEPTH_MIN``, at most ``max_results``."""
    if n < 0 or max_results < 0 or factor < 0 or corpus < 0:
        raise ValueError("n, max_results, corpus and factor must be >= 0")
    if factor == 0 or corpus <= HYBRID_FULL_DEPTH_UPTO:
        return max_results
    return min(max_results, max(factor * n, HYBRID_DEPTH_MIN))


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    return mode


def recall_mode(mode: str) -> str:
    """:func:`check_mode` with the store's coded error (both adapters' entry check)."""
    try:
        return check_mode(mode)
    except ValueError as exc:
        raise ValidationError(str(exc), field="mode") from exc


def vector_query(
    agent_id: object, query: object, vector: object, mode: str, limit: object, since: object, until: object
) -> tuple[float | None, float | None, npt.NDArray[np.float32]]:
    """Arguments of a vector or hybrid recall search: its time window and the unit query vector."""
    start, end = search_checks.recall_search(agent_id, query, limit, since, until)
    if vector is None:
        raise ValidationError(f"mode {mode} needs a query vector", field="vector")
    return start, end, unit_vector(vector)


def unit_vectors(
    vectors: object, embedding_version: object, *, dimension: int | None = None
) -> tuple[list[tuple[str, npt.NDArray[np.float32]]], int]:
    """Arguments of ``put_message_vectors``: ``(message_id, unit float32 vector)`` pairs (the
    first of a repeated id wins) and their common dimension (0 when empty)."""
    if not isinstance(embedding_version, str) or not embedding_version or len(embedding_version) > 128:
        raise ValidationError("embedding_version must be a non-empty string (<= 128 chars)")
    if isinstance(vectors, str | bytes) or not isinstance(vectors, Sequence):
        raise ValidationError("vectors must be a sequence of (message_id, vector)")
    out: dict[str, npt.NDArray[np.float32]] = {}
    dim = dimension or 0
    for item in vectors:
        if not isinstance(item, Sequence) or isinstance(item, str) or len(item) != 2:
            raise ValidationError("each vector must be a (message_id, vector) pair")
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
        raise ValidationError("a vector must be a sequence of numbers", field="vector") from exc
    if isinstance(vector, str | bytes) or arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValidationError("a vector must be finite numbers, at least one", field="vector")
    if dimension is not None and arr.size != dimension:
        raise ValidationError(f"vector has dimension {arr.size}, expected {dimension}", field="vector")
    norm = float(np.linalg.norm(arr))
    if norm == 0.0:
        raise ValidationError("a zero vector has no direction", field="vector")
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
