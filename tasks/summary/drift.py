"""Summary drift: how far a new summary strays from what it summarises. Pure.

The score is the cosine between the summary's embedding and the mean embedding of its source
(the evicted batch plus the previous summary). Both sides are means of sentence embeddings: a
sentence-transformers encoder reads only its first ``max_seq_length`` word pieces (256 for
MiniLM), so embedding a long summary as one text would score only its opening.

The cosine barely moves when a fact is lost (a summary of the chat's gist stays close to the
chat's centroid), so a draft may also carry a **loss score**: its ``retention``, the share of the
batch's salient units (names, numbers, dates, preferences, decisions) that the summary keeps or
represents (:func:`vcm.tasks.summary.units.retention`). A draft is good when both its cosine and its
retention reach their thresholds.

Below either threshold the caller summarises again with a stronger setting (more of the batch, less
diversity) and keeps the better draft; if that stays below too, it raises an alarm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from vcm.tasks.summary.selection import Vectors, centroid


class Scored(Protocol):
    @property
    def score(self) -> float: ...


def similarity(summary: Vectors, source: Vectors, source_weights: npt.NDArray[np.float64] | None = None) -> float:
    """Cosine between the mean directions of two sets of unit rows; ``source_weights`` say how
    many sentences of the source each row stands for (when the source was thinned).

    An empty source scores 1.0 (nothing to drift from); an empty summary of a non-empty source
    scores 0.0.
    """
    if len(source) == 0:
        return 1.0
    if len(summary) == 0:
        return 0.0
    return float(np.clip(centroid(summary) @ centroid(source, source_weights), -1.0, 1.0))


D = TypeVar("D", bound=Scored)


@dataclass(frozen=True)
class DriftCheck(Generic[D]):
    draft: D  # the draft to keep
    first_score: float
    retry_score: float | None  # None when the first draft was good enough
    alarm: bool  # the kept draft is still below a threshold
    first_retention: float = 1.0
    retry_retention: float | None = None

    @property
    def retried(self) -> bool:
        return self.retry_score is not None


def retention(draft: object) -> float:
    """The draft's loss score (share of salient units retained); 1.0 for drafts without one."""
    value = getattr(draft, "retention", None)
    return float(value) if isinstance(value, int | float) else 1.0


def check(
    first: Callable[[], D], retry: Callable[[], D], threshold: float, retention_threshold: float = 0.0
) -> DriftCheck[D]:
    """Summarise; below ``threshold`` (cosine) or ``retention_threshold`` (share of salient units
    retained) summarise again with ``retry`` and keep the better draft: one that passes both, else
    the one retaining more, else the closer one."""

    def good(d: D) -> bool:
        return d.score >= threshold and retention(d) >= retention_threshold

    draft = first()
    if good(draft):
        return DriftCheck(draft, draft.score, None, False, retention(draft))
    second = retry()

    def rank(d: D) -> tuple[bool, float, float]:
        return good(d), retention(d), d.score

    kept = second if rank(second) >= rank(draft) else draft
    return DriftCheck(kept, draft.score, second.score, not good(kept), retention(draft), retention(second))
