"""Entities and relations of the context pack (seed 002 §6.1, seed 004's entity graph). Pure.

Both are facts: an ``entity`` fact's key is the canonical name (its aliases are tags), a
``relation`` fact's key is ``src|relation|dst`` over canonical names. In the graph (``g_mem``)
messages ``mentions`` entities and entities ``relates_to`` entities, so "what do we know around
Priya" is a traversal rather than a text search.

The offline path finds relations only where the text states them in a fixed form ("my sister
Maya", "Maya is my sister"): kinship, friendship, work and pets, related to whoever said it (the
message's speaker, ``user`` when the message names none). Entity candidates leave out what is
capitalised without naming anyone or anything: calendar words (months, weekdays, holidays) and
common sentence openers. An LLM extractor, when configured, finds the rest.

A dependency parser with named entities (a spaCy English pipeline) would do this better, but
the pipelines are published as GitHub release wheels, not on the package registries (only
unofficial re-uploads are there), so the rule-based path is the one vcm ships.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vcm.errors import ValidationError

MAX_NAME_CHARS = 80
_SPACE = re.compile(r"\s+")
_RELATION_PART = re.compile(r"^[^|]{1,80}$")
_RELATIONS = (
    "mother|mom|mum|father|dad|sister|brother|wife|husband|partner|girlfriend|boyfriend|son|daughter|"
    "grandmother|grandma|grandfather|grandpa|aunt|uncle|cousin|niece|nephew|friend|best friend|"
    "colleague|coworker|boss|manager|mentor|neighbor|neighbour|roommate|teacher|coach|dog|cat|pet"
)
_NAME = r"([A-Z][a-z]+(?:\s[A-Z][a-z]+)?)"
# "my sister Maya", "my best friend, Jo"
_MY_X_NAME = re.compile(rf"\b[Mm]y\s+(?:new\s+|old\s+|little\s+|big\s+|older\s+|younger\s+)?({_RELATIONS}),?\s+{_NAME}")
# "Maya is my sister", "Maya, my sister"
_NAME_IS_MY_X = re.compile(rf"{_NAME}(?:\s+is|,)\s+my\s+(?:new\s+|old\s+|little\s+|big\s+)?({_RELATIONS})\b")
# Capitalised words that name no entity: calendar words, and openers a sentence capitalises.
NOT_NAMES = frozenset(
    re.findall(
        r"[a-z]+",
        "january february march april may june july august september october november december "
        "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday saturday "
        "sunday mon tue tues wed thu thur thurs fri sat sun today tomorrow yesterday tonight weekend morning "
        "evening afternoon night christmas easter halloween thanksgiving xmas spring summer autumn fall winter "
        "yes no yeah yep nope ok okay sure thanks thank hi hello hey bye wow omg congrats congratulations "
        "sorry please maybe also so well just anyway btw good great happy sounds definitely absolutely "
        "totally really right exactly nice cool awesome amazing glad hope let what when where why how who "
        "which this that these those there here it its my your our their his her we you they he she "
        "mr mrs ms dr god lol haha",
    )
)
_ALIASES = {"mom": "mother", "mum": "mother", "dad": "father", "grandma": "grandmother", "grandpa": "grandfather",
            "coworker": "colleague", "neighbour": "neighbor", "best friend": "friend"}  # fmt: skip


@dataclass(frozen=True)
class Relation:
    src: str  # canonical names
    relation: str
    dst: str

    @property
    def key(self) -> str:
        return f"{self.src}|{self.relation}|{self.dst}"


def canonical(name: str) -> str:
    """The key of an entity: case and spacing folded, so "Priya  Shah" and "priya shah" are one."""
    folded = _SPACE.sub(" ", name).strip().lower()
    if not folded or len(folded) > MAX_NAME_CHARS or "|" in folded:
        raise ValidationError(f"an entity name is 1-{MAX_NAME_CHARS} characters without '|'", field="key")
    return folded


def relation_of(key: str) -> Relation:
    """A relation fact's key ``src|relation|dst``, each part canonicalised."""
    parts = key.split("|")
    if len(parts) != 3 or not all(_RELATION_PART.match(p) and p.strip() for p in parts):
        raise ValidationError("a relation's key is 'source|relation|target'", field="key")
    return Relation(canonical(parts[0]), _SPACE.sub("_", parts[1].strip().lower()), canonical(parts[2]))


def is_name(word: str) -> bool:
    """A capitalised candidate that may name an entity (not a calendar word or an opener)."""
    return word.strip().lower() not in NOT_NAMES


def stated(speaker: str, text: str) -> list[Relation]:
    """Relations the text states of its speaker in a fixed form ("my sister Maya"), whoever
    speaks: an unnamed speaker is ``user`` (the person the agent talks with)."""
    speaker = speaker.strip() or "user"
    found: dict[str, Relation] = {}
    for rel, name in _MY_X_NAME.findall(text):
        r = Relation(canonical(speaker), _ALIASES.get(rel.lower(), rel.lower()).replace(" ", "_"), canonical(name))
        found.setdefault(r.key, r)
    for name, rel in _NAME_IS_MY_X.findall(text):
        r = Relation(canonical(speaker), _ALIASES.get(rel.lower(), rel.lower()).replace(" ", "_"), canonical(name))
        found.setdefault(r.key, r)
    return [r for r in found.values() if r.src != r.dst and is_name(r.dst)]
