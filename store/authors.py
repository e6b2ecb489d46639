"""The conversation's participants in a recall query (pure, shared by both adapters and the service).

A stored message may carry its author's ``name`` (the OpenAI ``name`` field: ``Caroline``,
``support_bot``). A question that names some of an agent's authors ("what books has Melanie
read?") is about what those authors said, and two signals follow from it, both chosen on the
LoCoMo dev file (``docs/recall-tuning.md``):

* **Author anchoring** (:func:`anchor`, :func:`anchor_ranking`): in a hybrid ranking, a message by one of the agent's
  *other* authors scores ``weight`` times its fused score (``[recall] other_author_weight``).
  Multi-hop evidence ("which cities has Jon visited?" — "took a short trip to Rome") shares
  almost no words with the question and ranks far down; among the turns at that depth, the ones
  by the person asked about are the likelier evidence. Messages without an author, and those by
  a named author, keep their score.
* **Names out of the query vector** (:func:`without_names`): the turns a message vector is read
  with name the speakers over and over, so a speaker's name in the question pulls the query
  vector towards every turn alike and drowns the words that carry its meaning. The service
  embeds the question without the names of authors it mentions (``[recall]
  query_vector_without_authors``); BM25 still reads the question as written, and anchoring
  carries the author signal exactly.

A name is *mentioned* when each of its analysed terms (the text index's analyser: lower case,
English stems) is among the query's terms, so ``Caroline's`` names ``Caroline`` and ``Mary Jane``
names ``mary_jane``; a name that is also a common word (``Will``) is mentioned by that word too.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from vcm.store.analysis import analyze

K = TypeVar("K", bound=Hashable)

# Defaults of [recall] other_author_weight and query_vector_without_authors (docs/configuration.md).
OTHER_AUTHOR_WEIGHT = 0.93
QUERY_VECTOR_WITHOUT_AUTHORS = True
# The most distinct authors of one agent that recall considers: listing them costs one index seek
# each, on every hybrid search; an agent with more (a large group chat) is not anchored at all,
# rather than anchored on an arbitrary subset.
MAX_AUTHORS = 64

# A word as written, with a possessive "'s" kept on it, so a removed name takes it along.
_WORD = re.compile(r"[^\W_]+(?:['’]s\b)?")


@dataclass(frozen=True)
class Anchor(Generic[K]):
    """How one ranking is anchored (:func:`anchor_ranking`): the authors the query names, how to
    read the authors of some candidates (``None``: none recorded; a candidate left out keeps its
    score), the weight of the other authors' messages, and how many of the best results must be
    exact (``None``: all; then every candidate's author is read)."""

    named: frozenset[str]
    authors_of: Callable[[Collection[K]], Mapping[K, str | None]]
    weight: float
    exact: int | None = None


def check_weight(weight: float) -> float:
    if not 0.0 <= weight <= 1.0:
        raise ValueError("other_author_weight must be within [0, 1]")
    return weight


def mentioned(query: str, authors: Iterable[str]) -> frozenset[str]:
    """The authors among ``authors`` that ``query`` names (see the module docstring)."""
    terms = set(analyze(query))
    if not terms:
        return frozenset()
    found = set()
    for name in authors:
        parts = analyze(name)
        if parts and terms.issuperset(parts):
            found.add(name)
    return frozenset(found)


def anchored(authors: Collection[str], named: Collection[str], weight: float) -> bool:
    """Whether a ranking is anchored: the weight lowers something, the query names some of the
    agent's authors, and some author is left that it does not name."""
    return weight < 1.0 and bool(named) and len(authors) <= MAX_AUTHORS and not set(authors) <= set(named)


def named_in(query: str, known: Callable[[], Collection[str]], weight: float) -> frozenset[str] | None:
    """The agent's authors (``known``, read only when anchoring is on) that ``query`` names, when a
    hybrid ranking is to be anchored on them at ``weight``; None otherwise."""
    if weight >= 1.0:
        return None
    names = known()
    found = mentioned(query, names)
    return found if anchored(names, found, weight) else None


def anchor(
    scores: Mapping[K, float], author_of: Mapping[K, str | None], named: Collection[str], weight: float
) -> dict[K, float]:
    """``scores`` with every item whose author is known and not in ``named`` multiplied by
    ``weight``; items without an author (or not in ``author_of``) keep theirs. Order is kept."""
    check_weight(weight)
    keep = set(named)
    out: dict[K, float] = {}
    for item, score in scores.items():
        author = author_of.get(item)
        out[item] = score * weight if author is not None and author not in keep else score
    return out


def anchor_ranking(scores: Mapping[K, float], spec: Anchor[K]) -> dict[K, float]:
    """:func:`anchor` over ``scores``, reading authors only where they can change the best
    ``spec.exact``: a candidate scoring below ``weight`` times the ``exact``-th best score stays
    below the ``exact`` best whatever its author (each of those keeps at least ``weight`` times its
    score), so its author is not read and its score is left as it is. At 1e6 messages reading a
    candidate's author costs about a microsecond, and 2 000 candidates scattered over the table
    ~6 ms; the best 20 of a ranking need a few dozen."""
    wanted: Collection[K] = scores.keys()
    if spec.exact is not None and 0 < spec.exact < len(scores):
        floor = spec.weight * heapq.nlargest(spec.exact, scores.values())[-1]
        wanted = [item for item, score in scores.items() if score >= floor]
    return anchor(scores, spec.authors_of(wanted), spec.named, spec.weight)


def without_names(query: str, names: Collection[str]) -> str:
    """``query`` without the words that name ``names`` (with a possessive ``'s``), spaces
    collapsed; ``query`` itself when nothing else would remain or nothing was removed."""
    drop = {term for name in names for term in analyze(name)}
    if not drop:
        return query
    parts: list[str] = []
    at = 0
    removed = False
    for word in _WORD.finditer(query):
        base = re.sub(r"['’]s$", "", word.group())
        stems = analyze(base)
        if stems and set(stems) <= drop:
            parts.append(query[at : word.start()])
            at = word.end()
            removed = True
    if not removed:
        return query
    parts.append(query[at:])
    stripped = re.sub(r"\s+", " ", "".join(parts)).strip()
    stripped = re.sub(r"\s+([?.!,;:])", r"\1", stripped)
    return stripped if analyze(stripped) else query
