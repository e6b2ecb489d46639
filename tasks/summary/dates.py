"""Anchoring relative dates to a turn's time: "yesterday" becomes "yesterday (7 May 2023)", or in
note style just "on 7 May 2023"."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import MAXYEAR, MINYEAR, UTC, datetime, timedelta


def _day(d: datetime) -> str:
    return f"{d.day} {d:%B %Y}"


def anchor(text: str, at: float | None, *, compact: bool = False) -> str:
    """Relative dates of ``text`` followed by the date they mean, from the turn's time ``at``
    (seconds since the epoch, UTC); unchanged when ``at`` is unknown. ``compact``: the date
    replaces the relative words ("yesterday" -> "on 7 May 2023", "last week" -> "week of 1 May
    2023"), the form of a telegraphic summary line."""
    if at is None or at <= 0:
        return text
    found = {m.lastgroup for m in _RELATIVE.finditer(text)}
    if not found:
        return text
    try:
        day = datetime.fromtimestamp(at, tz=UTC)
    except (OverflowError, ValueError, OSError):  # a time past the calendar's range anchors nothing
        return text

    def month(d: datetime, delta: int) -> str:
        m = d.month - 1 + delta
        return f"{datetime(d.year + m // 12, m % 12 + 1, 1):%B %Y}"

    def put(match: re.Match[str], date: str, short: str = "") -> str:
        if not compact:
            return f"{match.group(0)} ({date})"
        if short or date.startswith("week of"):
            return short or date  # "week of …", "weekend before …" read on their own
        # "on 7 May 2023", "in 2022": unless a preposition already stands there ("about 2018").
        before = match.string[: match.start()].split()[-1:]
        if before and before[0].lower() in _PREPOSITIONS:
            return date
        return f"{'on' if date[0].isdigit() and ' ' in date else 'in'} {date}"

    def year(delta: int) -> str:
        if not MINYEAR <= day.year + delta <= MAXYEAR:
            raise ValueError(f"year {day.year + delta} is out of range")
        return str(day.year + delta)

    def ago(match: re.Match[str]) -> str:
        # casefold, not lower: the rule matches "ſix" case-insensitively, and "ſ" folds to "s".
        n = int(match.group(1)) if match.group(1).isdigit() else _SMALL.get(match.group(1).casefold(), 1)
        unit = match.group(2).casefold().rstrip("s")
        if unit == "day":
            return put(match, _day(day - timedelta(days=n)))
        if unit == "week":
            return put(match, f"week of {_day(day - timedelta(weeks=n))}")
        if unit == "month":
            return put(match, month(day, -n))
        return put(match, year(-n))

    before = f"before {_day(day)}"
    # Each rule with the relative words it holds: a rule runs only when one of them is in the
    # text (a sentence with "this" runs three rules, not fourteen). No replacement writes any of
    # these words, so the words found before the first rule stand for every later one.
    rules: list[tuple[tuple[str, ...], str, Callable[[re.Match[str]], str]]] = [
        (("yesterday",), r"\byesterday\b", lambda m: put(m, _day(day - timedelta(days=1)))),
        (("tomorrow",), r"\btomorrow\b", lambda m: put(m, _day(day + timedelta(days=1)))),
        (
            ("today", "tonight", "this"),
            r"\b(?:today|tonight|this morning|this afternoon|this evening)\b",
            lambda m: put(m, _day(day)),
        ),
        (("last",), r"\blast weekend\b", lambda m: put(m, before, f"weekend {before}")),
        (("last",), rf"(?<!the )\blast ({_WEEKDAY})\b", lambda m: put(m, _day(_last(day, m.group(1))))),
        (("last",), r"\blast week\b", lambda m: put(m, f"week of {_day(day - timedelta(weeks=1))}")),
        (("next",), r"\bnext week\b", lambda m: put(m, f"week of {_day(day + timedelta(weeks=1))}")),
        (("last",), r"\blast month\b", lambda m: put(m, month(day, -1))),
        (("next",), r"\bnext month\b", lambda m: put(m, month(day, 1))),
        (("this",), r"\bthis month\b", lambda m: put(m, month(day, 0))),
        (("last",), r"\blast year\b", lambda m: put(m, year(-1))),
        (("next",), r"\bnext year\b", lambda m: put(m, year(1))),
        (("this",), r"\bthis year\b", lambda m: put(m, year(0))),
        (("ago",), r"\b(\d+|a|an|one|two|three|four|five|six|a few|few) (days?|weeks?|months?|years?) ago\b", ago),
    ]
    for words, pattern, replace in rules:
        if not found.isdisjoint(words):
            text = re.sub(pattern, _as_said(replace), text, flags=re.IGNORECASE)
    return text


def _as_said(replace: Callable[[re.Match[str]], str]) -> Callable[[re.Match[str]], str]:
    """``replace``, leaving a relative date whose date is past the calendar's range (years 1 to
    9999) as it was said: "1000000 days ago" raised, and failed the eviction job of the batch
    that said it on every retry."""

    def anchored(match: re.Match[str]) -> str:
        try:
            return replace(match)
        except (OverflowError, ValueError):
            return match.group(0)

    return anchored


# Every rule below holds one of these words: a sentence with none of them has nothing to anchor
# (most have none; a 128k eviction anchors ~8 000 sentences). A group per word, so the words a
# text holds are named as the rules' own case-insensitive matching reads them ("ſ" is an "s").
def _named(words: tuple[str, ...]) -> str:
    """An alternation of ``words``, each in a group named after itself (a match's ``lastgroup``)."""
    return "|".join(f"(?P<{w}>{w})" for w in words)


_WORDS = ("yesterday", "tomorrow", "today", "tonight", "this", "last", "next", "ago")
_RELATIVE = re.compile(rf"\b(?:{_named(_WORDS)})\b", re.IGNORECASE)

_PREPOSITIONS = frozenset(
    [
        "about",
        "around",
        "since",
        "from",
        "until",
        "till",
        "by",
        "in",
        "on",
        "before",
        "after",
        "nearly",
        "almost",
        "over",
        "roughly",
        "approximately",
        "of",
        "for",
        "than",
    ]
)


_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


_WEEKDAY = r"(?:mon|tues?|wed(?:nes)?|thu(?:rs?)?|fri|sat(?:ur)?|sun)(?:day)?"


# The weekday a name the rule matched begins with, read with the rule's own case-insensitive
# matching: "ſunday" and "Frİday" match the rule, and str.lower() would not give "sun" and "fri"
# (it raised, failing the eviction job of any batch that said "laſt ſunday").
_WEEKDAY_START = re.compile(_named(_WEEKDAYS), re.IGNORECASE)


def _last(day: datetime, name: str) -> datetime:
    """The latest such weekday before ``day`` ("last Friday" said on a Friday: a week before)."""
    start = _WEEKDAY_START.match(name)
    assert start is not None and start.lastgroup is not None  # the rule matched a weekday name
    back = (day.weekday() - _WEEKDAYS.index(start.lastgroup)) % 7 or 7
    return day - timedelta(days=back)


_SMALL = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a few": 3, "few": 3}
