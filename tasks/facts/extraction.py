"""Shadow facts from an eviction batch, before it leaves the context (seed 003: "facts extracted
before compaction so they survive it"). Pure and offline: the summariser's fact units
(:mod:`vcm.tasks.summary.units`: attributed, compressed, dates anchored, flagged text excluded) that are
salient — they name, count or date something, or state a preference or a decision — each with a
pointer to the turn it came from. The service stores them as ``shadow`` facts; consolidation
promotes those its replay test confirms.

Besides those, the names the salient units carry become ``entity`` candidates (calendar words
and openers left out) and relations the text states in a fixed form ("my sister Maya", of the
speaker or the user) ``relation`` candidates, so the context pack and the graph grow from what
was said once consolidation promotes them (:mod:`vcm.facts.entities`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from vcm.errors import ValidationError
from vcm.facts import entities
from vcm.tasks.summary import sentences, units
from vcm.types import Message

_LIKING = re.compile(
    r"\b(?:lov(?:e|es|ed)|lik(?:e|es|ed)|prefer(?:s|red)?|hat(?:e|es|ed)|enjoy(?:s|ed)?|favou?rite)\b", re.I
)
_PLAN = re.compile(r"\b(?:decid(?:e|ed|es)|plan(?:s|ned|ning)?|going to|will|deadline|due|launch(?:es|ed)?)\b", re.I)
MAX_SENTENCE_CHARS = 400
# A sentence that asks ("What was your favorite part?", "Did you go?") states no fact about anyone,
# though it may name a liking or a plan; a statement with a tag ("Sunflowers mean warmth, right?")
# does, and so does a question that tells of the speaker ("Did you know I moved to Lund?").
_QUESTION = re.compile(
    r"^\W*(?:what|how|why|when|where|who|whom|whose|which|do|does|did|are|is|was|were|am|have|has|had|can|"
    r"could|would|will|should|shall|may|might|any|anything|ever|wanna)\b[^.!]*\?\W*$",
    re.I,
)


MAX_ENTITIES = 15
MAX_RELATIONS = 10


@dataclass(frozen=True)
class Candidate:
    type: str  # preference | project | learned | entity | relation
    value: str  # "Speaker: sentence" as the summary would hold it; an entity's name
    message_id: str
    importance: float
    key: str | None = None  # entity: canonical name; relation: "src|relation|dst"
    also: tuple[str, ...] = ()  # further message ids that state it
    aliases: tuple[str, ...] = ()  # an entity's other names (kept as its tags)

    def evidence(self) -> list[dict[str, str]]:
        return [{"kind": "message", "id": i} for i in dict.fromkeys((self.message_id, *self.also))]


def kind_of(body: str) -> str:
    if _LIKING.search(body):
        return "preference"
    if _PLAN.search(body):
        return "project"
    return "learned"


_OWN = re.compile(r"\b(?:I|I'm|I've|my|we|our)\b")


def asks(sentence: str) -> bool:
    """``sentence`` is a question (an interrogative or auxiliary first, a question mark last)."""
    return bool(_QUESTION.match(sentence.strip())) and not _OWN.search(sentence)


def extract(messages: Sequence[Message], scan: units.Scan | None = None, *, limit: int = 40) -> list[Candidate]:
    """The batch's salient units as fact candidates, most important first, at most ``limit``."""
    speakers = frozenset((m.name or "").lower() for m in messages if m.name)
    said = _sentences(messages, scan)
    out: list[Candidate] = []
    seen: set[str] = set()
    for m, sentence, unit in said:
        if asks(sentence) or unit is None or unit.flagged or not units.salient(unit, speakers):
            continue
        if unit.line in seen:
            continue
        seen.add(unit.line)
        named = len(units.entities(unit.body, speakers))
        importance = min(
            1.0, 0.4 + 0.1 * named + (0.2 if _LIKING.search(unit.body) or _PLAN.search(unit.body) else 0.0)
        )
        out.append(Candidate(kind_of(unit.body), unit.line, m.id, round(importance, 2)))
    out.sort(key=lambda c: -c.importance)
    return out[:limit] + _graph(said, speakers)


def _sentences(messages: Sequence[Message], scan: units.Scan | None) -> list[tuple[Message, str, units.Unit | None]]:
    """Each sentence of the batch's chat messages with its unit, made once for both kinds of
    candidate (making them twice was a third of a 128k window's fact extraction)."""
    out: list[tuple[Message, str, units.Unit | None]] = []
    for m in messages:
        if m.kind != "message" or m.role not in ("user", "assistant") or not m.content:
            continue
        # A role as speaker would read like a chat-role marker ("assistant: ...", which the
        # poisoning filter rightly flags): unnamed turns give bare sentences.
        speaker = m.name or ""
        for sentence in sentences.split(m.content, MAX_SENTENCE_CHARS):
            out.append((m, sentence, units.unit_of(speaker, sentence, m.created_at, scan)))
    return out


def _graph(said: Sequence[tuple[Message, str, units.Unit | None]], speakers: frozenset[str]) -> list[Candidate]:
    """Entity and relation candidates: the names of salient units (first mention), relations
    stated in a fixed form. Flagged text gives none."""
    named: dict[str, Candidate] = {}
    related: dict[str, Candidate] = {}
    for m, sentence, unit in said:
        if unit is None or unit.flagged:
            continue
        # Whoever says "my sister Maya" is its source: the speaker, else the user.
        for r in entities.stated(m.name or "", sentence):
            value = f"{m.name}: {sentence.strip()}" if m.name else sentence.strip()
            related.setdefault(r.key, Candidate("relation", value, m.id, 0.6, r.key))
        if not units.salient(unit, speakers):
            continue
        for name in units.entities(unit.body, speakers):
            if not entities.is_name(name):  # "June", "Monday", "Thanks": capitalised, no entity
                continue
            try:
                key = entities.canonical(name)
            except ValidationError:
                continue
            named.setdefault(key, Candidate("entity", name, m.id, 0.5, key))
    return list(named.values())[:MAX_ENTITIES] + list(related.values())[:MAX_RELATIONS]
