"""How readable a summary is on its own: the share of its clauses that are *fragments*.

A summary line is ``Speaker: clause; clause`` (``vcm.tasks.summary.recursive.render``); note style
drops the speaker's own "I", which the line's speaker supplies, so ``Priya: ran Porto half
marathon on 7 May 2023`` reads alone. A clause is a **fragment** when a reader needs the lost
conversation to make sense of it:

* **leaning**: it starts with a word that hangs on something before it: a conjunction or
  subordinator (``because it rained``), a preposition (``with mixed results``) or a relative
  pronoun (``which was fun``);
* **pronoun only**: it refers to something by a pronoun among its first three words (``they``,
  ``it``, ``this`` ...) and names nothing (no capitalised word past its first, no number):
  ``Hopefully they finish soon``;
* **stub**: fewer than three words (``so cool``).

Pure: the evaluation scripts call :func:`measure` on a summary text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

LEANING = frozenset(
    (
        "and",
        "but",
        "or",
        "nor",
        "so",
        "yet",
        "because",
        "since",
        "though",
        "although",
        "whereas",
        "while",
        "whilst",
        "unless",
        "until",
        "if",
        "than",
        "as",
        "which",
        "who",
        "whom",
        "whose",
        "where",
        "whereby",
        "with",
        "without",
        "for",
        "of",
        "to",
        "at",
        "on",
        "in",
        "by",
        "from",
        "about",
        "into",
        "onto",
        "upon",
        "like",
        "over",
        "under",
        "after",
        "before",
        "during",
        "through",
        "across",
        "against",
        "between",
        "among",
        "toward",
        "towards",
        "via",
        "per",
        "plus",
        "including",
        "especially",
        "also",
        "too",
        "either",
        "neither",
    )
)
PRONOUNS = frozenset(
    (
        "it",
        "its",
        "they",
        "them",
        "their",
        "theirs",
        "he",
        "him",
        "his",
        "she",
        "her",
        "hers",
        "this",
        "that",
        "these",
        "those",
        "one",
    )
)
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\-]*")
_SPEAKER = re.compile(r"^([\w.\-]{1,64}): ")


@dataclass
class Readability:
    clauses: int = 0
    fragments: int = 0
    lines: int = 0
    lines_with_fragment: int = 0
    examples: list[str] = field(default_factory=list)  # "reason: speaker: clause"

    @property
    def fragment_pct(self) -> float:
        return round(100.0 * self.fragments / self.clauses, 1) if self.clauses else 0.0

    @property
    def lines_pct(self) -> float:
        return round(100.0 * self.lines_with_fragment / self.lines, 1) if self.lines else 0.0


def reason(clause: str) -> str:
    """Why ``clause`` is a fragment ("" when it is not)."""
    words = _WORD.findall(clause)
    if len(words) < 3:
        return "stub"
    if words[0].lower() in LEANING:
        return "leaning"
    named = any(w[0].isupper() or w[0].isdigit() for w in words[1:])
    if not named and any(w.lower() in PRONOUNS for w in words[:3]):
        return "pronoun only"
    return ""


def clauses_of(line: str) -> tuple[str, list[str]]:
    """A summary line's speaker ("" for none) and its clauses."""
    match = _SPEAKER.match(line)
    speaker, body = (match.group(1), line[match.end() :]) if match else ("", line)
    return speaker, [c.strip() for c in body.split("; ") if c.strip()]


def measure(summary: str, examples: int = 0) -> Readability:
    """Fragments among the clauses of ``summary`` (flagged quotes, ``[...]`` lines, are left out)."""
    out = Readability()
    for line in summary.splitlines():
        line = line.strip()
        if not line or line.startswith("["):
            continue
        speaker, clauses = clauses_of(line)
        out.lines += 1
        found = False
        for clause in clauses:
            out.clauses += 1
            why = reason(clause)
            if why:
                out.fragments += 1
                found = True
                if len(out.examples) < examples:
                    out.examples.append(f"{why}: {speaker + ': ' if speaker else ''}{clause}")
        out.lines_with_fragment += found
    return out


def pooled(parts: Sequence[Readability]) -> Readability:
    """Several measures as one (clauses and lines summed; the first examples kept)."""
    out = Readability()
    for p in parts:
        out.clauses += p.clauses
        out.fragments += p.fragments
        out.lines += p.lines
        out.lines_with_fragment += p.lines_with_fragment
        out.examples.extend(p.examples)
    return out
