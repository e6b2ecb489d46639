"""Spreading a recall ranking across the conversation (pure, shared by both adapters).

Hybrid recall's neighbour spreading (:func:`vcm.store.fusion.spread_to_neighbours`) lifts the
turns around a strong match, which is what a question answered in one exchange needs; but a
question whose evidence lies in several sessions ("what indoor activities has Andrew pursued with
his girlfriend?") then finds its top 10 full of one strong hit's neighbours. :func:`diversify`
re-ranks greedily in the manner of maximal marginal relevance (Carbonell and Goldstein, SIGIR
1998) with a positional notion of redundancy: an item's score is multiplied by ``penalty`` once
for every item already ranked within ``reach`` positions of it (by ``seq``). A neighbour of one
hit still ranks high when it scores well on its own; one that rides on the hit's score gives its
place to another part of the conversation. Chosen on the LoCoMo dev file, see
``docs/recall-tuning.md``.

Only the best ``depth`` items are re-ranked (the rest follow in their fused order): the cost is
``O(depth log depth)`` whatever the lists' depth, and the result does not depend on how many
results were asked for, so the pages of one search agree.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

# Defaults of [recall] diversity_* (docs/configuration.md); see docs/recall-tuning.md.
DIVERSITY_PENALTY = 1.0
DIVERSITY_REACH = 3
DIVERSITY_DEPTH = 200


@dataclass(frozen=True)
class Diversity:
    """How :func:`diversify` re-ranks: ``penalty`` 1.0 (or ``reach`` 0) leaves the ranking as it
    is."""

    penalty: float = DIVERSITY_PENALTY
    reach: int = DIVERSITY_REACH
    depth: int = DIVERSITY_DEPTH

    def __post_init__(self) -> None:
        if not 0.0 <= self.penalty <= 1.0:
            raise ValueError("diversity penalty must be within [0, 1]")
        if not 0 <= self.reach <= 1000:
            raise ValueError("diversity reach must be within 0..1000")
        if not 1 <= self.depth <= 10_000:
            raise ValueError("diversity depth must be within 1..10000")

    @property
    def off(self) -> bool:
        return self.penalty >= 1.0 or self.reach == 0


DEFAULT = Diversity()
OFF = Diversity(penalty=1.0, reach=0)


def diversify(ranked: Sequence[tuple[K, float]], seq: Mapping[K, int], diversity: Diversity) -> list[tuple[K, float]]:
    """``ranked`` (best first) re-ranked greedily: each next item is the one with the best
    ``score * penalty ** c``, ``c`` the items already taken within ``reach`` positions of it;
    the scores returned are those adjusted ones (non-increasing). An item without a ``seq`` is
    never penalised. Ties keep the input order. Lazy: a penalty is recomputed only when its item
    reaches the top of the heap, which is exact since penalties only grow."""
    if diversity.off or len(ranked) < 2:
        return list(ranked)
    head, tail = ranked[: diversity.depth], ranked[diversity.depth :]
    score = {item: s for item, s in head}
    # (negated adjusted score, input order, item, neighbours counted when it was computed)
    heap = [(-s, i, item, 0) for i, (item, s) in enumerate(head)]
    heapq.heapify(heap)
    taken: list[int] = []  # positions of the items taken, sorted
    out: list[tuple[K, float]] = []
    while heap:
        neg, i, item, counted = heapq.heappop(heap)
        at = seq.get(item)
        if at is None:
            out.append((item, -neg))
            continue
        near = bisect.bisect_right(taken, at + diversity.reach) - bisect.bisect_left(taken, at - diversity.reach)
        if near != counted:
            heapq.heappush(heap, (-score[item] * diversity.penalty**near, i, item, near))
            continue
        out.append((item, -neg))
        bisect.insort(taken, at)
    if tail:
        # The tail keeps its order below the head's last adjusted score.
        floor = min(out[-1][1], tail[0][1])
        out.extend((item, min(s, floor)) for item, s in tail)
    return out
