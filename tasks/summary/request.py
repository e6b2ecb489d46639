"""A summary request and its draft: the turns of an evicted batch, the previous summary, the
parameters and the callables (token count, embedding, poisoning scan) a summariser is given."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from vcm.settings.memory import DriftSettings, SummarizerSettings
from vcm.tasks.summary import units
from vcm.tasks.summary.selection import (
    Vectors,
    centroid,
)
from vcm.types import Message

Embed = Callable[[Sequence[str]], Vectors]


Count = Callable[[str], int]


@dataclass(frozen=True)
class Turn:
    """One evicted message as the summariser sees it."""

    speaker: str
    text: str
    at: float | None = None  # when it was said (seconds since the epoch): anchors "yesterday"

    @classmethod
    def of(cls, message: Message, user_name: str | None = None) -> Turn | None:
        """vcm's own memory-pressure notices are not part of the conversation; they are skipped.
        The speaker is the message's name; an unnamed user message is the user's when the name
        is known (``[context] user_name``), so a summary line never reads ``user: ...``."""
        if message.kind != "message":
            return None
        speaker = message.name or (user_name if message.role == "user" and user_name else message.role)
        return cls(speaker, message.content, message.created_at or None)


@dataclass(frozen=True)
class Params:
    mmr_lambda: float = 0.7
    previous_share: float = 0.4
    salience_boost: float = 0.25
    max_sentence_chars: int = 400
    max_candidates: int = 48
    attempt: int = 0  # 1 for the re-summarisation after drift
    # Below this share of the batch's salient units retained, the summary is redone (then alarmed).
    retention_threshold: float = 0.5

    @classmethod
    def of(cls, settings: SummarizerSettings) -> Params:
        return cls(
            settings.mmr_lambda,
            settings.previous_share,
            settings.salience_boost,
            settings.max_sentence_chars,
            settings.max_candidates,
        )

    def stronger(self, settings: DriftSettings) -> Params:
        """The retry setting after drift: more of the batch, less diversity."""
        return replace(
            self,
            mmr_lambda=max(self.mmr_lambda, settings.retry_mmr_lambda),
            previous_share=min(self.previous_share, settings.retry_previous_share),
            attempt=self.attempt + 1,
        )


@dataclass(frozen=True)
class Request:
    previous: str  # the previous summary text ("" before the first eviction)
    turns: Sequence[Turn]
    cap: int  # tokens the summary may take, as ``count`` counts it
    count: Count  # tokens of a summary text as the main context will hold it
    embed: Embed  # unit-length sentence embeddings, one row per text
    # Names of the poisoning patterns a text matches (None: vcm's default patterns).
    scan: units.Scan | None = None


@dataclass(frozen=True)
class Draft:
    text: str
    tokens: int
    score: float  # drift similarity to the source (see vcm.tasks.summary.drift)
    method: str  # "extractive" | "llm" | "centrality" | "empty"
    lines: int
    salient: int = 0  # salient units of the batch (see vcm.tasks.summary.units.salient)
    retained: int = 0  # of those, kept or represented in the summary
    flagged: int = 0  # sentences the poisoning filter flagged (kept only as marked quotes)
    room: int = 0  # how many of the salient units the cap could hold at most (0: not known)

    @property
    def retention(self) -> float:
        """The loss score: share of the batch's salient units retained, out of as many as the cap
        could hold (a 600-token cap cannot hold 80 facts; losing what it could hold is the loss).
        1.0 when the batch has none."""
        if not self.salient:
            return 1.0
        reachable = min(self.salient, self.room) if self.room > 0 else self.salient
        return min(1.0, self.retained / reachable)


@dataclass(frozen=True)
class Candidates:
    """The source of a summary: previous lines then batch sentences, with their embeddings."""

    texts: list[str]
    from_previous: int  # the first this many texts are previous-summary lines
    vectors: Vectors
    # How many source sentences each row stands for: the batch and the previous summary are
    # thinned separately, so each keeps its true share of the source's centroid.
    weights: npt.NDArray[np.float64]

    @property
    def reference(self) -> npt.NDArray[np.float64]:
        """The source's mean direction."""
        return centroid(self.vectors, self.weights)

    @property
    def previous_rows(self) -> list[int]:
        return list(range(self.from_previous))

    @property
    def batch_rows(self) -> list[int]:
        return list(range(self.from_previous, len(self.texts)))


def empty_draft(request: Request) -> Draft:
    return Draft("", request.count(""), 0.0 if request.turns or request.previous else 1.0, "empty", 0)
