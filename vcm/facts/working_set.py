"""The Working Set (seed 002 §6.1): a bounded, taxonomy-aligned state snapshot of what the agent
is doing, built from its active facts — not a prose recap. Pure.

Sections and the fact types that feed them: ``goal`` (the top goal), ``constraints``,
``facts`` (preference, project, learned, sticky and configured types), ``entities`` (key =
canonical name, tags = aliases), ``relations`` (key ``src|relation|dst``), ``open_questions``,
``next_actions``, ``risk_flags``. Each section has a cap; items compete by utility and the lowest
are dropped (counted, never silently). Expired items never appear.

utility = 0.4 relevance (to the query, normalised hybrid score) + 0.25 recency (half-life one
day on the last use or update) + 0.2 explicitness (confidence; captured or stated facts carry
more than extracted ones) + 0.15 stability (reconfirmations: evidence pointers beyond the first).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vcm.store.types import Fact

SECTIONS: dict[str, tuple[str, ...]] = {
    "goal": ("goal",),
    "constraints": ("constraint",),
    "entities": ("entity",),
    "relations": ("relation",),
    "open_questions": ("question",),
    "next_actions": ("action",),
    "risk_flags": ("risk",),
}
CAPS: dict[str, int] = {
    "goal": 1,
    "constraints": 10,
    "facts": 20,
    "entities": 50,
    "relations": 80,
    "open_questions": 10,
    "next_actions": 10,
    "risk_flags": 10,
}
HALF_LIFE_S = 86400.0
# Fact search hits the relevance is taken from (facts beyond them count as irrelevant).
RELEVANCE_HITS = 100
WEIGHTS = {"relevance": 0.4, "recency": 0.25, "explicitness": 0.2, "stability": 0.15}


@dataclass(frozen=True)
class Item:
    fact: Fact
    utility: float


@dataclass
class WorkingSet:
    sections: dict[str, list[Item]] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sections": {
                name: [
                    {
                        "fact_id": i.fact.fact_id,
                        "type": i.fact.type,
                        "key": i.fact.key,
                        "value": i.fact.value,
                        "utility": round(i.utility, 4),
                        "conflict": bool(i.fact.conflict_with),
                        "evidence": [dict(e) for e in i.fact.evidence],
                    }
                    for i in items
                ]
                for name, items in self.sections.items()
            },
            "dropped": dict(self.dropped),
        }


def section_of(fact_type: str) -> str:
    for name, types in SECTIONS.items():
        if fact_type in types:
            return name
    return "facts"


def utility(fact: Fact, relevance: float, now: float) -> float:
    age = max(0.0, now - max(fact.last_used, fact.updated_at))
    recency = math.pow(0.5, age / HALF_LIFE_S)
    stability = min(1.0, max(0, len(fact.evidence) - 1) / 3)
    parts = {"relevance": relevance, "recency": recency, "explicitness": fact.confidence, "stability": stability}
    return sum(WEIGHTS[k] * v for k, v in parts.items())


def types_needed(caps: Mapping[str, int] | None = None) -> list[str] | None:
    """The fact types a Working Set with these caps can show (None: all of them, since the
    ``facts`` section takes every type the others do not name)."""
    limits = {**CAPS, **(caps or {})}
    if limits.get("facts", 0) > 0:
        return None
    return [t for name, types in SECTIONS.items() if limits.get(name, 0) > 0 for t in types]


def build(
    facts: Sequence[Fact],
    relevance: Mapping[str, float],
    now: float,
    caps: Mapping[str, int] | None = None,
    *,
    statuses: Sequence[str] = ("active",),
) -> WorkingSet:
    """``relevance``: fact id -> [0, 1] for the current query (missing: 0). Only facts of
    ``statuses`` count: shadow facts are unconfirmed, so by default they are left out."""
    limits = {**CAPS, **(caps or {})}
    pools: dict[str, list[Item]] = {}
    for f in facts:
        if f.status not in statuses or (f.expires_at is not None and f.expires_at < now):
            continue
        pools.setdefault(section_of(f.type), []).append(Item(f, utility(f, relevance.get(f.fact_id, 0.0), now)))
    ws = WorkingSet()
    for name in [*SECTIONS, "facts"]:
        ranked = sorted(pools.get(name, []), key=lambda i: (-i.utility, i.fact.fact_id))
        keep = limits.get(name, 0)
        ws.sections[name] = ranked[:keep]
        if len(ranked) > keep:
            ws.dropped[name] = len(ranked) - keep
    return ws
