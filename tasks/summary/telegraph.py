"""Telegraphic compression of one attributed sentence for the recursive summary. Pure.

A summary line already says who spoke (``Priya: …``), so the words that only restate the speaker
or the grammar cost tokens and carry nothing a later question needs. :func:`condense` rewrites a
sentence in note style, the way a person writes minutes:

* the speaker's own subject goes at a clause start ("I ran" -> "ran", "I'm allergic" ->
  "allergic", "I've adopted" -> "adopted", "I'll" -> "will"), and so does "my" ("my sister Lena"
  -> "sister Lena"); "we", "you" and every other subject stay, they say who else was involved;
* articles, intensifiers ("so", "very", "super") and empty openers ("it was", "it's") go;
* a closing full stop or exclamation mark goes, a question mark stays (a question is no fact);
  dashes and semicolons become commas (the semicolon separates a speaker's clauses, see
  :func:`join`).

Negations, names, numbers, dates, nouns, verbs, adjectives and prepositions all stay, so the line
still reads as a sentence about who did what ("Priya: ran Porto half marathon in 97 minutes").
Quoted text (titles, what someone said) is left as it was.

:func:`split` cuts a condensed sentence into its independent clauses, and :func:`join` /
:func:`clauses` write and read back one speaker's clauses as one summary line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from vcm.eval.fragments import reason as fragment_reason

# Where a clause starts: the sentence's start, after a comma / colon / dash, or after a conjunction.
# Not after a bare "and": "my wife and I left" keeps its subject.
_START = r"(?:^|(?<=[,:(]\s)|(?<=\s[-–—]\s)|(?<=, and\s)|(?<=\bbut\s)|(?<=\bso\s)|(?<=\bthen\s)|(?<=\bbecause\s))"
# Past participles that follow "I've" without -ed ("I've been", "I've got").
_PARTICIPLE = (
    r"(?:\w+ed|been|got|gotten|had|made|done|seen|taken|found|gone|known|begun|read|run|heard|met|felt|kept|left"
    r"|lost|won|bought|brought|taught|thought|written|grown|given|driven|become|come|said|spent|built|sent|put)\b"
)
# The same before a rule whose match begins with "I" / "it". The lookahead is implied by the
# match, and lets the search pass over other positions without trying each lookbehind there: the
# rules ran 26 us a sentence instead of 2, most of a large eviction's condensing. (So does the
# intensifiers' first letters below.)
_I = r"(?=I)" + _START
_IT = r"(?=it)" + _START
_ADVERB = r"(?:(?:always|never|just|already|finally|recently|also|really|even|often|actually|ever|not)\s+)*"
Rule = tuple[re.Pattern[str], str]
# The rules in passes, each pass with a test of the text that any match of its rules implies (a
# character or a word they need), so a pass whose test fails would have changed nothing: most
# rules find nothing in most sentences, and a test costs a fraction of the searches it saves
# (22 -> 12 us a LoCoMo sentence; thousands of sentences a large eviction).
Guard = Callable[[str], object]
# The speaker's own subject at a clause start (the line names the speaker): any of the group's
# matches is one of these.
_OWN_SUBJECT = re.compile(_I + r"I(?:'m|’m| am| was|'ve|’ve| have|'ll|’ll|'d|’d)\s+", re.I)
_PASSES: list[tuple[Guard | None, list[Rule]]] = [
    # Punctuation first, so that the clause starts below see commas: dashes, semicolons, ellipses
    # and inner exclamation marks become commas.
    (lambda t: "-" in t or "–" in t or "—" in t or ";" in t, [(re.compile(r"\s+[-–—]+\s+|\s*;\s*"), ", ")]),
    (lambda t: "..." in t or "…" in t, [(re.compile(r"\s*(?:\.\.\.|…)\s*(?=\S)"), ", ")]),
    (lambda t: "!" in t, [(re.compile(r"\s*!+\s*(?=\S)"), ", ")]),
    (
        _OWN_SUBJECT.search,
        [
            (re.compile(_I + r"I(?:'m|’m| am| was)\s+", re.I), ""),
            (re.compile(_I + r"I(?:'ve|’ve| have)\s+(?=" + _ADVERB + _PARTICIPLE + ")", re.I), ""),
            (re.compile(_I + r"I(?:'ve|’ve)\s+", re.I), "have "),
            (re.compile(_I + r"I(?:'ll|’ll)\s+", re.I), "will "),
            (re.compile(_I + r"I(?:'d|’d)\s+(?=been\b)", re.I), "had "),
            (re.compile(_I + r"I(?:'d|’d)\s+", re.I), "would "),
        ],
    ),
    (None, [(re.compile(_I + r"I\s+(?=[a-z])"), "")]),
    # Empty openers: "it was so powerful" -> "powerful", "It's been a great way" -> "great way".
    (
        re.compile(r"it(?:'s|’s| is| was)", re.I).search,
        [
            (re.compile(r",?\s+and\s+it(?:'s|’s| is| was)(?: been)?\s+", re.I), ", "),
            (re.compile(_IT + r"it(?:'s|’s| is| was)(?: been)?\s+", re.I), ""),
        ],
    ),
    (re.compile("my", re.I).search, [(re.compile(r"\bmy\s+(?=\w)", re.I), "")]),
    (
        None,
        [
            # Articles, and the sentence-initial capitalised ones when a lower-case word follows.
            (re.compile(r"(?<![\w'’])(?:a|an|the)\s+(?=[\w\"'“‘(])"), ""),
            (re.compile(r"^(?:A|An|The)\s+(?=[a-z])"), ""),
            # Intensifiers, not where they carry the meaning ("so far", "such as", "so that").
            (
                re.compile(
                    r"(?=[adeiqstv])\b(?:so|very|super|truly|totally|extremely|incredibly|absolutely|definitely|quite"
                    r"|such)\s+(?!far\b|as\b|that\b|on\b|much\b|many\b)",
                    re.I,
                ),
                "",
            ),
        ],
    ),
    (re.compile(r"too|as well", re.I).search, [(re.compile(r"\s+(?:too|as well)(?=\s*[.!?,]*$)", re.I), "")]),
    (lambda t: "  " in t or "\t" in t, [(re.compile(r"[ \t]{2,}"), " ")]),
    (lambda t: "," in t, [(re.compile(r"\s+,"), ","), (re.compile(r",(?:\s*,)+"), ",")]),
]
_QUOTED = re.compile(r"(\"[^\"]*\"|“[^”]*”)")


def condense(sentence: str) -> str:
    """``sentence`` in note style (see the module docstring); quoted spans are left as they are."""
    parts = _QUOTED.split(sentence.strip())
    for i in range(0, len(parts), 2):  # the even parts are outside quotes
        text = parts[i]
        for guard, rules in _PASSES:
            if guard is None or guard(text):
                for pattern, replacement in rules:
                    text = pattern.sub(replacement, text)
        parts[i] = text
    # "; " separates a speaker's clauses in a summary line, so none stays inside one (not even quoted).
    return _END.sub("", "".join(parts)).strip(" ,").replace("; ", ", ")


_END = re.compile(r"[\s,.!…]+$")


# A comma-separated part that starts like this depends on what came before it: a relative or
# adverbial clause, a comparison, the rest of a list.
_DEPENDENT = re.compile(
    r"^(?:which|who|whose|whom|where|when|while|that|because|since|as|if|though|although|unless|until|like|such|"
    r"including|especially|even|or|and|plus|than)\b",
    re.I,
)
_CONJUNCTION = re.compile(r"^(?:but|so|and then|then)\s+", re.I)
# A part that is only a date ("on 24 April 2023", "week of 1 May 2023"): it dates the clause before.
_DATE = re.compile(
    r"^(?:(?:on|in|at|since|until|by|before|after|around|about|during)\s+)?(?:week of |weekend before )?"
    r"(?:\d{1,2} )?(?:(?:January|February|March|April|May|June|July|August|September|October|November|December)\s+)?"
    r"\d{4}$",
    re.I,
)
# A part of nothing but names, numbers and "and": an item of a list ("Bach, Mozart and Chopin").
_ITEM = re.compile(r"^(?:[A-Z0-9][\w'’.\-]*|and|or|&)(?:\s+(?:[A-Z0-9][\w'’.\-]*|and|or|&))*$")


def split(body: str, words: Callable[[str], Sequence[str]], least: int = 2) -> list[str]:
    """``body`` cut at commas into independent clauses that each hold at least ``least`` content
    words (``words``), so a summary can keep the clause that carries a fact without the one that
    comments on it ("started guitar in 2018" / "great way to express myself"). A part that depends
    on the one before (a relative or adverbial clause, a list's items) stays with it, and so does
    one that would read as a fragment alone (:func:`fragment`: "with mixed results", "they finish
    soon"); nothing is cut inside quotes, parentheses or brackets; a leading "but" / "so" of a cut
    clause goes."""
    parts = body.split(", ")
    out: list[str] = []
    current = ""
    for part in parts:
        if current and _open(current):
            current = f"{current}, {part}"
            continue
        if current and (
            _DEPENDENT.match(part)
            or _ITEM.match(part)
            or _DATE.match(part)
            or len(set(words(part))) < least
            or fragment(_CONJUNCTION.sub("", part))
        ):
            current = f"{current}, {part}"
            continue
        if current:
            out.append(current)
        current = part
    if current:
        out.append(current)
    merged: list[str] = []
    for clause in out:  # a first part too thin to stand alone (or only a date) goes with the next one
        if merged and (len(set(words(merged[-1]))) < least or _DATE.match(merged[-1]) or fragment(merged[-1])):
            merged[-1] = f"{merged[-1]}, {clause}"
        else:
            merged.append(clause)
    return [_CONJUNCTION.sub("", c) if i else c for i, c in enumerate(merged)]


def fragment(clause: str) -> bool:
    """``clause`` cannot be read without what was said before it (the rule the summary's
    readability is measured by, :mod:`vcm.eval.fragments`): it leans on a word before it, points
    back by a pronoun and names nothing, or is a stub."""
    return bool(fragment_reason(clause))


def _open(text: str) -> bool:
    """Inside a quote, a parenthesis or a bracket at the end of ``text``."""
    return bool(
        text.count('"') % 2
        or text.count("(") > text.count(")")
        or text.count("[") > text.count("]")
        or text.count("“") > text.count("”")
    )


def join(speaker: str, bodies: Sequence[str]) -> str:
    """One summary line for several clauses of one speaker: ``Speaker: a; b; c``."""
    return f"{speaker}: " + "; ".join(bodies)


def clauses(body: str) -> list[str]:
    """The clauses of a joined line's body (the inverse of :func:`join`)."""
    return [c.strip() for c in body.split("; ") if c.strip()]
