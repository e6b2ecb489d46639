"""Sentences of a conversation and how much each carries that a summary must not lose. Pure.

A summary that drops "Alice", "INV-2041" or "May 3" has lost what later questions ask about,
so sentences carrying capitalised names, numbers or identifiers score a salience bonus.
"""

from __future__ import annotations

import functools
import re

from vcm.tasks.ingest.chunking import sentence_breaks

# A capitalised word that does not start the sentence: a name, a place, a product.
_NAME = re.compile(r"(?<=[\s,;:(\"'])[A-Z][a-z]+(?:[-'][A-Za-z]+)?\b")
_NUMBER = re.compile(r"\d")
# Letters mixed with digits or joined by _ - / . : ids, codes, paths, versions, e-mails, URLs.
_IDENTIFIER = re.compile(
    r"\b(?:[A-Za-z]+[_\-./:@#]?\d[\w\-./:@#]*|[A-Za-z0-9]+(?:[_\-/.@][A-Za-z0-9]+){1,}|[A-Z]{2,}\d*)\b"
)
# Words that are capitalised for grammar, not because they name something.
COMMON_CAPS = frozenset(
    [
        "I",
        "I'm",
        "I've",
        "I'll",
        "I'd",
        "The",
        "A",
        "An",
        "And",
        "But",
        "Or",
        "So",
        "Then",
        "This",
        "That",
        "These",
        "Those",
        "It",
        "It's",
        "We",
        "You",
        "He",
        "She",
        "They",
        "My",
        "Our",
        "Your",
        "Their",
        "His",
        "Her",
        "Yes",
        "No",
        "Ok",
        "Okay",
        "Sure",
        "Thanks",
        "Please",
        "Hi",
        "Hello",
        "Also",
        "What",
        "When",
        "Where",
        "Why",
        "How",
        "Who",
        "Which",
        "If",
        "Let",
        "Maybe",
        "Well",
    ]
)


# Words whose full stop does not end a sentence ("Mr. Haruki", "5 p.m. on Friday", "e.g. Porto").
_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "st",
        "jr",
        "sr",
        "vs",
        "etc",
        "e.g",
        "i.e",
        "a.m",
        "p.m",
        "approx",
        "fig",
        "inc",
        "ltd",
        "mt",
        "ft",
        "dept",
        "cf",
    ]
)
_TAIL = re.compile(r"(?:^|[\s(\"'])((?:[A-Za-z]\.){2,}|[A-Za-z]+\.)$")


def _no_break_after(piece: str, following: str) -> bool:
    """The break after ``piece`` is a false one: an abbreviation's dot. (Decimals never break:
    a break needs white space after the stop.)"""
    stripped = piece.rstrip()
    match = _TAIL.search(stripped)
    if match is None:
        return False
    word = match.group(1).lower().rstrip(".")
    if word in _ABBREVIATIONS:
        # "a.m." / "etc." end a sentence when a capitalised word that is not a name follows;
        # titles (Mr., Dr.) never do.
        return word not in {"a.m", "p.m", "etc"} or not following[:1].isupper()
    return "." in word and len(word) <= 5  # other dotted initials: "U.S.", "J.R."


# A message's sentences are asked for twice in an eviction, by its summary and by its fact
# extraction (~1 500 messages a 128k window); short texts are remembered for the second.
MEMO_CHARS = 4000
MEMO_TEXTS = 4096


def split(text: str, max_chars: int) -> list[str]:
    """Sentences (and lines) of ``text``, each at most ``max_chars`` long, cut at word boundaries.
    A full stop after an abbreviation (Mr., Dr., p.m., e.g.) or inside a decimal is no break."""
    return list(_remembered(text, max_chars) if len(text) <= MEMO_CHARS else _split(text, max_chars))


def _split(text: str, max_chars: int) -> tuple[str, ...]:
    pieces: list[str] = []
    start = 0
    for end in [*sentence_breaks(text), len(text)]:
        piece = text[start:end]
        start = end
        if pieces and "\n" not in pieces[-1].rstrip(" \t")[-1:] and _no_break_after(pieces[-1], piece.lstrip()):
            pieces[-1] += piece
        else:
            pieces.append(piece)
    out: list[str] = []
    for raw in pieces:
        piece = " ".join(raw.split())
        if piece:
            out.extend(_wrap(piece, max_chars))
    return tuple(out)


_remembered = functools.lru_cache(maxsize=MEMO_TEXTS)(_split)


def _wrap(sentence: str, max_chars: int) -> list[str]:
    if len(sentence) <= max_chars:
        return [sentence]
    pieces: list[str] = []
    current = ""
    for word in sentence.split(" "):
        while len(word) > max_chars:  # one unbroken token longer than a piece
            if current:
                pieces.append(current)
                current = ""
            pieces.append(word[:max_chars])
            word = word[max_chars:]
        if current and len(current) + 1 + len(word) > max_chars:
            pieces.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        pieces.append(current)
    return pieces


def salience(sentence: str, known: frozenset[str] = frozenset()) -> float:
    """0..1: how much the sentence carries names (0.35), numbers (0.35) and identifiers (0.3).

    ``known`` names (the speakers, lower case) do not count: addressing each other by name says
    nothing new."""
    names = [w for w in _NAME.findall(sentence) if w not in COMMON_CAPS and w.lower() not in known]
    score = 0.0
    if names:
        score += 0.35
    if _NUMBER.search(sentence):
        score += 0.35
    if _IDENTIFIER.search(sentence):
        score += 0.3
    return min(score, 1.0)


# Words that carry no content on their own.
_FILLER = frozenset(
    [
        "the",
        "and",
        "but",
        "for",
        "you",
        "your",
        "yours",
        "that",
        "this",
        "these",
        "those",
        "with",
        "was",
        "were",
        "are",
        "have",
        "has",
        "had",
        "its",
        "it's",
        "i'm",
        "i've",
        "i'll",
        "i'd",
        "you're",
        "that's",
        "what",
        "wow",
        "yeah",
        "yes",
        "hey",
        "thanks",
        "thank",
        "sounds",
        "awesome",
        "great",
        "cool",
        "nice",
        "glad",
        "really",
        "just",
        "too",
        "very",
        "so",
        "all",
        "not",
        "can",
        "will",
        "would",
        "could",
        "there",
        "they",
        "them",
        "our",
        "out",
        "how",
        "about",
        "from",
        "been",
        "also",
        "some",
        "such",
        "much",
        "lot",
    ]
)
_CONTENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9'_\-]{2,}|\d+")


def substance(sentence: str, full_at: int = 8) -> float:
    """0..1: content words (not filler, three letters or more, or numbers) over ``full_at``.
    "Wow, that's awesome!" scores near 0; a sentence with eight content words scores 1."""
    words = [w for w in _CONTENT.findall(sentence) if w.lower() not in _FILLER]
    return min(1.0, len(words) / full_at)
