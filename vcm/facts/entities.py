"""Entities and relations of the context pack (seed 002 §6.1, seed 004's entity graph). Pure.

Both are facts: an ``entity`` fact's key is the canonical name (its aliases are tags), a
``relation`` fact's key is ``src|relation|dst`` over canonical names. In the graph (``g_mem``)
messages ``mentions`` entities and entities ``relates_to`` entities, so "what do we know around
Priya" is a traversal rather than a text search.

The offline path finds relations only where the text states them in a fixed form ("my sister
Maya", "Maya is my sister"): kinship, friendship, work and pets. An LLM extractor, when
configured, finds the rest.
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


def stated(speaker: str, text: str) -> list[Relation]:
    """Relations the text states of its speaker in a fixed form ("my sister Maya"). Without a
    speaker name there is nobody to relate to, so nothing is found."""
    if not speaker.strip():
        return []
    found: dict[str, Relation] = {}
    for rel, name in _MY_X_NAME.findall(text):
        r = Relation(canonical(speaker), _ALIASES.get(rel.lower(), rel.lower()).replace(" ", "_"), canonical(name))
        found.setdefault(r.key, r)
    for name, rel in _NAME_IS_MY_X.findall(text):
        r = Relation(canonical(speaker), _ALIASES.get(rel.lower(), rel.lower()).replace(" ", "_"), canonical(name))
        found.setdefault(r.key, r)
    return [r for r in found.values() if r.src != r.dst]
