"""The earlier summariser, kept for comparison (``scripts/eval_summary.py --summarizer old``):
candidates ranked by embedding centrality and salience, picked by maximal marginal relevance
(see :mod:`vcm.tasks.summary.recursive`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from vcm.tasks.summary import drift, sentences
from vcm.tasks.summary.request import Candidates, Draft, Params, Request, empty_draft
from vcm.tasks.summary.selection import (
    centrality,
    lexical_centrality,
    mmr_select,
    stratified_pick,
)


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


def by_centrality(request: Request, params: Params, source: Candidates | None = None) -> Draft:
    """The earlier extractive summary of ``request``: whole sentences by embedding centrality
    (pass ``source`` to reuse computed embeddings). Kept for comparison."""
    source = source if source is not None else candidates(request, params)
    if not source.texts:
        return empty_draft(request)
    base = request.count("")
    available = request.cap - base
    if available <= 0:
        return empty_draft(request)
    costs = [max(1, request.count(t) - base + 1) for t in source.texts]  # +1: the line break
    relevance = weigh(centrality(source.vectors, source.reference), source.texts, params)

    # Filler never enters a summary, however cheap; it still counts in the centroid above.
    speakers = _speakers(source.texts)
    worth = [i for i in range(len(source.texts)) if _has_content(source.texts[i], speakers)]
    if not worth:  # nothing but pleasantries: an empty summary has not drifted from anything
        return replace(empty_draft(request), score=1.0)
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
    return _draft(request, source, picked, "centrality")


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
        return empty_draft(request)
    score = drift.similarity(source.vectors[rows], source.vectors, source.weights)
    return Draft(text, tokens, score, method, len(rows))
