"""Recursive summarisation: new summary = f(previous summary, evicted batch), within a token cap.

Pure: token counting and embedding come in as callables, so nothing here does I/O.

The default is **extractive**. Candidates are the previous summary's lines and the batch's
sentences (each prefixed with its speaker, so "who said it" survives). Each candidate's
relevance is its embedding's cosine to the centroid of all candidates (centrality) plus a bonus
for names, numbers and identifiers (:func:`vcm.tasks.sentences.salience`; the speakers' own names do
not count), scaled down for sentences with little content ("Wow, that's awesome!",
:func:`vcm.tasks.sentences.substance`), which are central in any chat but say nothing. Maximal marginal
relevance then picks candidates until the cap is spent: first from the previous summary (up to
``previous_share`` of the cap, so the chain stays recursive and old facts do not vanish at the
first eviction), then from the batch, then from whatever is left. The summary lists the kept
previous lines, then the kept batch sentences, each in its original order, one per line. It is
cut only at sentence boundaries and never exceeds the cap.

Embedding is the cost of a summary (about a millisecond per token on one CPU thread), so at most
``max_candidates`` sentences are embedded: a larger batch is first thinned without the model to
the lexically most central and salient sentence of each of that many stretches of the
conversation, which keeps the whole time line represented. Drift is then measured against these
candidates (see :mod:`vcm.tasks.drift`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from vcm.settings import DriftSettings, SummarizerSettings
from vcm.tasks import drift, sentences
from vcm.tasks.selection import (
    Vectors,
    centrality,
    centroid,
    lexical_centrality,
    mmr_select,
    stratified_pick,
)
from vcm.types import Message

Embed = Callable[[Sequence[str]], Vectors]
Count = Callable[[str], int]


@dataclass(frozen=True)
class Turn:
    """One evicted message as the summariser sees it."""

    speaker: str
    text: str

    @classmethod
    def of(cls, message: Message) -> Turn | None:
        """vcm's own memory-pressure notices are not part of the conversation; they are skipped."""
        if message.kind != "message":
            return None
        return cls(message.name or message.role, message.content)


@dataclass(frozen=True)
class Params:
    mmr_lambda: float = 0.7
    previous_share: float = 0.4
    salience_boost: float = 0.25
    max_sentence_chars: int = 400
    max_candidates: int = 48
    attempt: int = 0  # 1 for the re-summarisation after drift

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


@dataclass(frozen=True)
class Draft:
    text: str
    tokens: int
    score: float  # drift similarity to the source (see vcm.tasks.drift)
    method: str  # "extractive" | "llm" | "empty"
    lines: int


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


def candidates(request: Request, params: Params) -> Candidates:
    previous = _dedupe(sentences.split(request.previous, params.max_sentence_chars + 64), set())
    seen = set(previous)
    batch: list[str] = []
    for turn in request.turns:
        for sentence in sentences.split(turn.text, params.max_sentence_chars):
            batch.append(f"{turn.speaker}: {sentence}")
    batch = _dedupe(batch, seen)
    # Bound the embedding work (its cost grows with the batch): previous lines get their share of
    # the slots, the batch the rest, and either takes what the other leaves unused.
    limit = params.max_candidates
    previous_take = min(len(previous), max(round(limit * params.previous_share), limit - len(batch)))
    kept_previous = _prefilter(previous, previous_take, params)
    kept_batch = _prefilter(batch, limit - len(kept_previous), params)
    texts = kept_previous + kept_batch
    weights = np.array(_stand_for(previous, kept_previous) + _stand_for(batch, kept_batch), dtype=np.float64)
    vectors = request.embed(texts) if texts else np.zeros((0, 0), dtype=np.float32)
    return Candidates(texts, len(kept_previous), vectors, weights)


def _stand_for(every: list[str], kept: list[str]) -> list[float]:
    return [len(every) / len(kept)] * len(kept) if kept else []


def _prefilter(texts: list[str], limit: int, params: Params) -> list[str]:
    if len(texts) <= limit:
        return texts
    scores = weigh(lexical_centrality(texts), texts, params)
    return [texts[i] for i in stratified_pick(scores, limit)]


def weigh(centrality_scores: npt.NDArray[np.float64], texts: Sequence[str], params: Params) -> npt.NDArray[np.float64]:
    """Relevance of candidate lines ("speaker: sentence"): centrality plus the salience bonus,
    scaled by how much content the sentence has (a quarter of the score for pure filler)."""
    speakers = _speakers(texts)
    bodies = [_body(t) for t in texts]
    bonus = np.array([sentences.salience(b, speakers) for b in bodies], dtype=np.float64)
    content = np.array([sentences.substance(b) for b in bodies], dtype=np.float64)
    return (centrality_scores + params.salience_boost * bonus) * (0.25 + 0.75 * content)


def _dedupe(texts: list[str], seen: set[str]) -> list[str]:
    out = []
    for t in texts:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def extractive(request: Request, params: Params, source: Candidates | None = None) -> Draft:
    """The extractive summary of ``request`` (pass ``source`` to reuse computed embeddings)."""
    source = source if source is not None else candidates(request, params)
    if not source.texts:
        return _empty(request)
    base = request.count("")
    available = request.cap - base
    if available <= 0:
        return _empty(request)
    costs = [max(1, request.count(t) - base + 1) for t in source.texts]  # +1: the line break
    relevance = weigh(centrality(source.vectors, source.reference), source.texts, params)

    # Filler never enters a summary, however cheap; it still counts in the centroid above.
    speakers = _speakers(source.texts)
    worth = [i for i in range(len(source.texts)) if _has_content(source.texts[i], speakers)]
    if not worth:  # nothing but pleasantries: an empty summary has not drifted from anything
        return replace(_empty(request), score=1.0)
    previous_rows = [i for i in worth if i < source.from_previous]
    batch_rows = [i for i in worth if i >= source.from_previous]
    picked: list[int] = []
    if previous_rows:
        share = int(available * params.previous_share)
        picked += mmr_select(relevance, source.vectors, costs, share, params.mmr_lambda, candidates=previous_rows)
    spent = sum(costs[i] for i in picked)
    picked += mmr_select(
        relevance,
        source.vectors,
        costs,
        available - spent,
        params.mmr_lambda,
        candidates=batch_rows,
        chosen=picked,
    )
    spent = sum(costs[i] for i in picked)
    picked += mmr_select(
        relevance,
        source.vectors,
        costs,
        available - spent,
        params.mmr_lambda,
        candidates=worth,
        chosen=picked,
    )
    return _draft(request, source, picked, "extractive")


def _has_content(line: str, speakers: frozenset[str]) -> bool:
    """At least two content words, or a name (not a speaker's), number or identifier."""
    body = _body(line)
    return sentences.substance(body) >= 0.25 or sentences.salience(body, speakers) > 0


def _speakers(lines: Sequence[str]) -> frozenset[str]:
    return frozenset(t.split(": ", 1)[0].lower() for t in lines if ": " in t)


def _body(line: str) -> str:
    return line.split(": ", 1)[1] if ": " in line else line


def _draft(request: Request, source: Candidates, picked: list[int], method: str) -> Draft:
    """Lines in source order; drop the last-picked while the (non-additive) recount is over cap."""
    kept = list(picked)
    while True:
        rows = sorted(kept)
        text = "\n".join(source.texts[i] for i in rows)
        tokens = request.count(text)
        if tokens <= request.cap or not kept:
            break
        kept.pop()
    if not kept:
        return _empty(request)
    score = drift.similarity(source.vectors[rows], source.vectors, source.weights)
    return Draft(text, tokens, score, method, len(rows))


def _empty(request: Request) -> Draft:
    return Draft("", request.count(""), 0.0 if request.turns or request.previous else 1.0, "empty", 0)


def fit_text(text: str, request: Request, params: Params) -> list[str]:
    """Sentences of free text (an LLM's summary), keeping a prefix that fits the cap."""
    lines = sentences.split(text, params.max_sentence_chars)
    while lines and request.count("\n".join(lines)) > request.cap:
        lines.pop()
    return lines
