"""Second-level compression of a summary clause as it ages, and the weight of an attachment note. Pure.

The recursive summary is hierarchical: the newest block holds each clause as
:func:`vcm.tasks.summary.telegraph.condense` wrote it, and when the next eviction reads the summary back,
:func:`shorten` rewrites the older clauses in headline style, so they cost fewer tokens and more of
them stay within the cap:

* the speaker's "I" goes wherever it is the subject ("when I came across" -> "when came across";
  not after "and" / "or": "wife and I left" keeps it), as condense already does at a clause start;
* empty openers ("that's", "there's", "here's"), the copula ("is", "are", "was", "were") and
  "been" after it, and the demonstratives "this" / "these" / "those" / "some" before a word go
  ("Seattle is colorful city" -> "Seattle colorful city");
* adverbs and praise that add no fact ("always", "really", "just", "also", "still", "even",
  "actually"; "great", "awesome", "amazing", "cool", "nice", "wonderful", "fantastic",
  "incredible" before another word) go.

Negations, names, numbers, dates, nouns, verbs, prepositions and "and" stay, so a clause still
reads as a note about who did what; quoted text is left as it was. :func:`attachment` tells a note
that only describes a shared image or file ("[shared photo of …]"): it weighs less in the
selection, since it describes a picture more than it states a fact of the speaker's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from vcm.eval.fragments import reason as fragment_reason

_QUOTED = re.compile(r"(\"[^\"]*\"|“[^”]*”)")
_AFTER_WORD = r"(?=[\w\"“(])"


def _unless_a_name_ends(match: re.Match[str]) -> str:
    """The subject "I" goes, except where it ends a name ("World War I", "Henry I")."""
    before = match.string[: match.start()].split()
    return match.group(0) if before and before[-1][:1].isupper() else ""


_RULES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    # The speaker's own subject anywhere (a clause start is condense's already), not "X and I".
    (re.compile(r"(?<!\band )(?<!\bor )\bI(?:'m|’m| am| was)\s+" + _AFTER_WORD), _unless_a_name_ends),
    (re.compile(r"(?<!\band )(?<!\bor )\bI(?:'ve|’ve)\s+" + _AFTER_WORD), ""),
    (re.compile(r"(?<!\band )(?<!\bor )\bI(?:'ll|’ll)\s+" + _AFTER_WORD), "will "),
    (re.compile(r"(?<!\band )(?<!\bor )\bI\s+(?=[a-z])"), _unless_a_name_ends),
    # Empty openers and the copula.
    (re.compile(r"\b(?:that|there|here)(?:'s|’s| is| was)\s+" + _AFTER_WORD, re.I), ""),
    (re.compile(r"(?<!\bit )\b(?:is|are|was|were)(?: been)?\s+(?=[\w\"“(])(?!not\b|n't)", re.I), ""),
    (re.compile(r"^been\s+" + _AFTER_WORD, re.I), ""),
    (re.compile(r"\b(?:this|these|those|some)\s+(?=[a-z])(?!of\b|time\b|day\b|week\b|year\b)", re.I), ""),
    # Adverbs and praise that state no fact; lower case only, and praise only before a lower-case
    # word: a capital makes them part of a name ("Nice", "Great Wall", "Cool Runnings").
    (re.compile(r"\b(?:always|really|just|also|still|even|actually)\s+" + _AFTER_WORD), ""),
    (
        re.compile(
            r"\b(?:great|awesome|amazing|cool|nice|wonderful|fantastic|incredible)\s+(?=[a-z])"
            r"(?!and\b|or\b|to\b|grand|aunt|uncle)"
        ),
        "",
    ),
    (re.compile(r"[ \t]{2,}"), " "),
]


# Cached: each eviction shortens every clause of the summary it carries over, and those are
# mostly the clauses the agent's previous eviction shortened (a 128k window: ~1 000 a job).
@functools.lru_cache(maxsize=32768)
def shorten(body: str) -> str:
    """``body`` (a clause of a summary line) in headline style (see the module docstring); quoted
    spans are left as they are, and a clause that would lose all its words stays as it was."""
    if not body or body.startswith("["):
        return body
    body = _without_asides(body)
    parts = _QUOTED.split(body)
    for i in range(0, len(parts), 2):  # the even parts are outside quotes
        text = parts[i]
        for pattern, replacement in _RULES:
            text = pattern.sub(replacement, text)
        parts[i] = text
    out = "".join(parts).strip(" ,")
    if not out:
        return body
    return out


_NAMED = re.compile(r"(?<!^)\b[A-Z0-9]")


def _without_asides(body: str) -> str:
    """The clause without the comma-separated asides that only comment on what came before it and
    name nothing ("ran Porto half marathon, with mixed results" -> "ran Porto half marathon"):
    the newest block keeps them attached so the clause reads alone (telegraph.split), an older one
    gives their tokens to facts. Dates, names and numbers stay; nothing inside quotes is cut."""
    if '"' in body or "“" in body or "(" in body:
        return body
    parts = body.split(", ")
    kept = [parts[0], *(p for p in parts[1:] if not _aside(p))]
    return ", ".join(kept)


# A part that starts with one of these comments on the clause before it; a longer prepositional
# tail ("for 3 hours", "with my sister's kids") often completes a fact and stays. A stub that names
# nothing goes, a prepositional one too ("with kids"): measured, older facts gain more from its
# tokens than the clause loses (eval_summary, 5 dev conversations: evicted kept at the end 65.9 %
# keeping such tails, 70.3 % without).
_COMMENT = re.compile(
    r"^(?:which|who|that|because|since|so|but|and|though|although|while|as|if|like|hopefully|anyway)\b", re.I
)


def _aside(part: str) -> bool:
    if _NAMED.search(part):
        return False
    why = fragment_reason(part)
    # A stub that names nothing is a reaction ("started surfing in 2018, great"; "real good").
    return why in ("pronoun only", "stub") or (why == "leaning" and bool(_COMMENT.match(part)))


_ATTACHMENT = re.compile(r"^\[(?:shared|sent|attached|image|photo|picture|file)\b[^\]]*\]$", re.I)


def attachment(body: str) -> bool:
    """A clause that only describes a shared image or file (``[shared photo of dog on beach]``)."""
    return bool(_ATTACHMENT.match(body.strip()))
