"""The first-letter lookaheads of the word-list patterns (vcm.tasks.summary.lexicon.LEADS) change
no match: each admits every character a match of the rest of its pattern can start with, in every
case the pattern's flags fold to, and the patterns find the same spans with and without it."""

from __future__ import annotations

import re
from pathlib import Path
from re import _constants as c  # type: ignore[attr-defined]
from re import _parser as parser  # type: ignore[attr-defined]
from typing import Any

import pytest

from vcm.tasks.summary import lexicon

LEAD = re.compile(r"^\(\?=\[[^\]]+\]\)")
# ASCII, Latin-1 and Latin Extended-A, and the letters Unicode case folding maps onto ASCII ones.
UNIVERSE = [chr(i) for i in range(0x250)] + ["\u212a", "\u017f", "\u0131", "\u0130"]


def _split(pattern: re.Pattern[str]) -> tuple[str, str]:
    found = LEAD.match(pattern.pattern)
    assert found, f"{pattern.pattern[:40]!r} does not start with a first-letter lookahead"
    return found.group(), pattern.pattern[found.end() :]


def _member(item: list[tuple[Any, Any]], x: str) -> bool:
    """Whether ``x`` is in a parsed character class (the parts the word lists use)."""
    inside, negate = False, False
    for op, av in item:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            inside |= x == chr(av)
        elif op is c.RANGE:
            inside |= av[0] <= ord(x) <= av[1]
        elif op is c.CATEGORY and av is c.CATEGORY_DIGIT:
            inside |= x.isdecimal()
        else:
            raise AssertionError(f"class part {op} not handled")
    return inside != negate


def _first(items: Any) -> tuple[set[str], bool]:
    """The characters a match of the parsed sequence ``items`` can start with (before folding),
    and whether it can match the empty string."""
    chars: set[str] = set()
    for op, av in items:
        if op in (c.AT, c.ASSERT, c.ASSERT_NOT):
            continue  # zero width
        if op is c.LITERAL:
            return chars | {chr(av)}, False
        if op is c.IN:
            return chars | {x for x in UNIVERSE if _member(av, x)}, False
        if op is c.SUBPATTERN:
            found, empty = _first(av[-1])
        elif op is c.BRANCH:
            parts = [_first(branch) for branch in av[1]]
            found, empty = set().union(*(p[0] for p in parts)), any(p[1] for p in parts)
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            found, empty = _first(av[2])
            empty = empty or av[0] == 0
        else:
            raise AssertionError(f"pattern part {op} not handled")
        chars |= found
        if not empty:
            return chars, False
    return chars, True


@pytest.mark.parametrize("name", lexicon.LEADS)
def test_a_lead_admits_every_first_letter_of_its_pattern(name: str) -> None:
    pattern: re.Pattern[str] = getattr(lexicon, name)
    lead, rest = _split(pattern)
    first, empty = _first(parser.parse(rest, pattern.flags))
    assert first and not empty
    # Every character the rest can start with, and each the flags fold onto it, passes the lead.
    starts = {x for x in UNIVERSE for f in first if re.fullmatch(re.escape(f), x, pattern.flags)}
    missing = sorted(x for x in starts if not re.match(lead, x, pattern.flags))
    assert not missing, f"{name}'s lookahead leaves out {missing}"


@pytest.mark.parametrize("name", lexicon.LEADS)
def test_a_lead_changes_no_match(name: str) -> None:
    pattern: re.Pattern[str] = getattr(lexicon, name)
    plain = re.compile(_split(pattern)[1], pattern.flags)
    docs = Path(__file__).resolve().parents[3] / "docs"
    lines = [line for page in sorted(docs.glob("*.md")) for line in page.read_text().splitlines() if line.strip()]
    for line in lines:
        for text in (line, line.upper(), line.title()):
            assert [m.span() for m in pattern.finditer(text)] == [m.span() for m in plain.finditer(text)], text


def test_a_text_the_hedge_guard_passes_over_holds_no_hedge() -> None:
    """compress searches HEDGE only where HEDGE_WORDS finds something: the guard must find
    something wherever HEDGE does, in every case folding (long s, Kelvin sign, dotted I)."""
    texts = ["I mean, it was just fine", "JUST do it", "ju\u017ft kidding", "\u212aind of odd", "\u0130 mean it",
             "what kind of music", "honestly? totally", "pretty much done", "nothing here at all"]  # fmt: skip
    for text in texts:
        if lexicon.HEDGE.search(text):
            assert lexicon.HEDGE_WORDS.search(text), text
    assert sum(bool(lexicon.HEDGE.search(t)) for t in texts) >= 6
    assert not lexicon.HEDGE_WORDS.search("nothing here at all")
