"""Shadow facts from an eviction batch, before it leaves the context (seed 003: "facts extracted
before compaction so they survive it"). Pure and offline: the summariser's fact units
(:mod:`vcm.tasks.facts`: attributed, compressed, dates anchored, flagged text excluded) that are
salient — they name, count or date something, or state a preference or a decision — each with a
pointer to the turn it came from. The service stores them as ``shadow`` facts; consolidation
promotes those its replay test confirms.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from vcm.tasks import facts, sentences
from vcm.types import Message

_LIKING = re.compile(
    r"\b(?:lov(?:e|es|ed)|lik(?:e|es|ed)|prefer(?:s|red)?|hat(?:e|es|ed)|enjoy(?:s|ed)?|favou?rite)\b", re.I
)
_PLAN = re.compile(r"\b(?:decid(?:e|ed|es)|plan(?:s|ned|ning)?|going to|will|deadline|due|launch(?:es|ed)?)\b", re.I)
MAX_SENTENCE_CHARS = 400


@dataclass(frozen=True)
class Candidate:
    type: str  # preference | project | learned
    value: str  # "Speaker: sentence" as the summary would hold it
    message_id: str
    importance: float


def kind_of(body: str) -> str:
    if _LIKING.search(body):
        return "preference"
    if _PLAN.search(body):
        return "project"
    return "learned"


def extract(messages: Sequence[Message], scan: facts.Scan | None = None, *, limit: int = 40) -> list[Candidate]:
    """The batch's salient units as fact candidates, most important first, at most ``limit``."""
    speakers = frozenset((m.name or "").lower() for m in messages if m.name)
    out: list[Candidate] = []
    seen: set[str] = set()
    for m in messages:
        if m.kind != "message" or m.role not in ("user", "assistant") or not m.content:
            continue
        # A role as speaker would read like a chat-role marker ("assistant: ...", which the
        # poisoning filter rightly flags): unnamed turns give bare sentences.
        speaker = m.name or ""
        for sentence in sentences.split(m.content, MAX_SENTENCE_CHARS):
            unit = facts.unit_of(speaker, sentence, m.created_at, scan)
            if unit is None or unit.flagged or not facts.salient(unit, speakers):
                continue
            if unit.line in seen:
                continue
            seen.add(unit.line)
            named = len(facts.entities(unit.body, speakers))
            importance = min(
                1.0, 0.4 + 0.1 * named + (0.2 if _LIKING.search(unit.body) or _PLAN.search(unit.body) else 0.0)
            )
            out.append(Candidate(kind_of(unit.body), unit.line, m.id, round(importance, 2)))
    out.sort(key=lambda c: -c.importance)
    return out[:limit]
