"""Memory-poisoning filter: does a retrieved text read like instructions to the model? Pure.

Whatever the agent stored (or a document it ingested) comes back into its context through
``search_recall``, ``search_archival`` and rehydration. A text planted there to steer the model
("ignore previous instructions", a forged ``system:`` turn, a fake tool call) would otherwise be
read with the authority of the agent's own memory. Retrieved items that match are marked
``tainted: true`` with the names of the patterns that matched (``taint_reasons``), and such text
is not promoted into a working block (``store_core`` / ``put_block``) without a justification of
substance (:func:`justification_problem`).

The patterns (names are what ``taint_reasons`` and ``[poisoning] disable`` use):

======================  ==========================================================================
``override``            ignore / disregard / forget / override ... previous / prior / above / system
                        ... instructions / prompt / rules; with a strong object ("previous
                        instructions", "system prompt") the filler in between may run to ~25 words
``new_instructions``    "new instructions:", "updated system prompt:", "your real instructions are"
``persona_switch``      "you are now DAN / an unrestricted AI / in developer mode", "from now on you
                        will ignore ..."
``roleplay_override``   pretend / act as / role-play ... without restrictions, jailbroken, DAN, "do
                        anything now", developer mode
``fake_role``           a line opening with ``system:`` / ``developer:`` / ``assistant:`` (also after
                        ``>``), a markdown-decorated role anywhere (``**System:**``, ``__system__:``),
                        XML-ish role tags (``<system>``, ``</assistant>``, ``<system_prompt>``) or
                        chat-template markers (``<|im_start|>``, ``[INST]``, ``<<SYS>>``, ``### System``)
``forged_tool_call``    tool-call JSON keys in any quotes (``"tool_calls":``, ``'function_call':``,
                        ``toolCalls``), ``<tool_call>`` tags, or a vcm memory tool written as a call
                        (``store_core(``)
``hidden_marker``       zero-width / bidi-override / Unicode tag characters (looked for in the text as
                        stored), HTML comments that address the model
``secrecy``             "do not tell the user", "without the user knowing"
``prompt_leak``         reveal / print / repeat ... your system prompt / hidden instructions
======================  ==========================================================================

Each pattern needs an imperative aimed at the model next to what it targets, so ordinary talk
*about* instructions ("the assembly instructions were confusing", "my boss said to ignore the
noise") is not flagged; ``scripts/poisoning_fp.py`` measures the false-positive rate over the
LoCoMo conversations (and any text files given to it).

Every pattern is matched against the text as stored and against normalised copies of it
(:func:`forms`; the text shown to anyone stays the original): compatibility forms folded (NFKD:
full-width and mathematical letters, ligatures), accents and other combining marks dropped, invisible
characters dropped (format characters such as the soft hyphen, zero-width spaces and bidi controls,
variation selectors, stray control characters), Cyrillic / Greek / Armenian / Cherokee letters and
Latin small capitals that look like ASCII letters mapped to those letters (:data:`LOOK_ALIKES`; a
bare stroke such as Cyrillic ``І`` reads as either ``I`` or ``l``, so both readings are tried), curly
quotes and dashes made ASCII; then one copy keeps its line breaks (for the patterns anchored at a
line start) and one has every whitespace run, newlines included, made a single space. Settings
``[poisoning]``: ``enabled``, ``disable`` (pattern names), ``extra`` (name -> regular expression,
case-insensitive, matched the same way).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

_GAP = r"[^.!?\n]{0,40}?"  # a few words within one sentence
# Filler an attacker pads between the verb and its object ("ignore, and I mean this, ... all previous
# instructions"): up to ~25 words, still within one sentence. Only used before an object that can
# mean nothing but the model's own instructions, so the longer reach finds no more ordinary talk.
_LONG_GAP = r"[^.!?\n]{0,150}?"
_ROLE = r"(system|developer|assistant)(\s*(message|prompt))?"
_DECO = r"[*_`~]{1,3}"  # markdown emphasis or code marks around a role label

DEFAULT_PATTERNS: dict[str, str] = {
    "override": (
        rf"\b(ignore|disregard|forget|override|bypass|skip)\b{_GAP}\b(all|any|the|your|previous|prior|above|"
        rf"earlier|preceding|system|original|initial)\b{_GAP}\b(instructions?|prompts?|rules|directives|"
        r"guidelines|guardrails|system message)\b"
        # "skip" is left out here: "skip the queue ... the previous rules" is everyday talk
        rf"|\b(ignore|disregard|forget|override|bypass)\b{_LONG_GAP}\b((previous|prior|above|earlier|preceding|"
        r"original|initial|system|developer)\s+(\w+\s+)?(instructions?|prompts?|rules|directives|guidelines|"
        r"guardrails)|system\s+messages?)\b"
    ),
    "new_instructions": (
        r"\b(new|updated|real|actual|true|hidden|secret)\s+(system\s+)?(instructions?|prompt|directives?)"
        r"\s*(:|are\b|is\b)"
    ),
    "persona_switch": (
        r"\byou are (now|no longer)\b[^.!?\n]{0,30}?\b(ai|assistant|model|bot|chatbot|dan|jailbroken|"
        r"unrestricted|unfiltered|uncensored|developer mode|bound by|restricted)\b"
        rf"|\bfrom now on\b,?\s*you\b{_GAP}\b(ignore|disregard|obey|only follow|no longer|must not refuse)\b"
    ),
    "roleplay_override": (
        rf"\b(pretend|act as|role-?play|behave as|simulate)\b{_GAP}\b(no|without)\s+(restrictions|rules|"
        r"filters|limits|guidelines|censorship)\b"
        r"|\b(developer|god|jailbreak|dan)\s+mode\b|\bdo anything now\b|\bjailbroken\b"
    ),
    "fake_role": (
        rf"(^|\n)\s*(>\s*)*{_ROLE}\s*:\s*\S"
        # **System:** / **System**: / __system__: / `assistant`: -- decoration makes it a label, not prose
        rf"|(?<![\w*`~]){_DECO}\s*{_ROLE}\s*({_DECO}\s*:|:\s*{_DECO})"
        r"|<\s*/?\s*(system|developer|assistant)([ _-]?(message|prompt|instructions?|turn))?(\s[^<>]{0,80})?>"
        r"|<\|(im_start|im_end|system|endoftext|start_header_id)\|>|\[/?INST\]|<</?SYS>>"
        r"|(^|\n)\s*#{2,}\s*(system|instruction)s?\b"
    ),
    "forged_tool_call": (
        r"[\"'`](tool_?calls?|function_?call|tool_call_id)[\"'`]\s*:|</?(tool_call|function_call|tool_use)>"
        r"|\b(store_core|fetch_core|append_fifo|evict_fifo|write_recall|search_recall|search_archival|"
        r"ingest_archival|record_heartbeat)\s*\("
    ),
    # Zero-width space/joiners' neighbours, bidi overrides, word joiners, BOM mid-text, tag
    # characters (invisible ASCII); U+200D (zero-width joiner) is left out: emoji sequences use it,
    # and so is the soft hyphen: text copied from web pages carries it in long words. Normalised
    # copies have these characters dropped, so this branch only ever matches the text as stored.
    "hidden_marker": (
        r"[\u200b\u200c\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]"
        r"|<!--[^>]{0,500}?\b(ignore|instruction|assistant|system|prompt|model|ai)\b"
    ),
    "secrecy": (
        r"\b(do not|don't|never)\s+(tell|inform|alert|mention (this|it) to|reveal (this|it) to)\s+the user\b"
        r"|\bwithout the user (knowing|noticing)\b"
    ),
    "prompt_leak": (
        rf"\b(reveal|print|repeat|show|output|dump|leak)\b{_GAP}\b(your|the)\s+(system prompt|"
        r"(hidden |initial |original )?instructions)\b"
        rf"|\b(reveal|print|repeat|output|dump|leak|disclose)\b{_LONG_GAP}\b(your|the)\s+(system prompt|"
        r"(hidden|initial|original|secret)\s+(instructions|prompt))\b"
    ),
}

# Words that any match of a default pattern contains, lower-cased: on a form of the text that is
# ASCII (where IGNORECASE is ASCII case folding), a pattern none of whose words occur cannot
# match, so it is not run. Most texts are ordinary talk and hold none of them; the regexes, which
# try every position of the text, were most of the scan (an eviction job at a 128k window scans
# ~7 000 texts). A non-ASCII form is always searched: Unicode case folding matches letters
# (the Kelvin sign, the long s) that lower() leaves alone. tests/service/test_poisoning.py checks
# every pattern against its gate.
GATES: dict[str, tuple[str, ...]] = {
    "override": ("ignore", "disregard", "forget", "override", "bypass", "skip"),
    "new_instructions": ("instruction", "prompt", "directive"),
    "persona_switch": ("you are", "from now on"),
    "roleplay_override": (
        "pretend",
        "act as",
        "role",
        "behave as",
        "simulate",
        "mode",
        "do anything now",
        "jailbroken",
    ),
    "fake_role": ("system", "developer", "assistant", "instruction", "<|", "inst]", "sys>>"),
    "forged_tool_call": ("tool", "function", "_core", "_fifo", "_recall", "_archival", "record_heartbeat"),
    "hidden_marker": ("<!--",),
    "secrecy": ("the user",),
    "prompt_leak": ("prompt", "instruction"),
}

# --- normalisation -------------------------------------------------------------------------------
# ASCII letter <- the letters of other scripts that are drawn like it (from Unicode's confusables.txt,
# letters only, plus a few near-identical shapes it leaves out). Applied after NFKD, so only
# characters that NFKD leaves alone need to be here.
LOOK_ALIKES: dict[str, str] = {
    "a": "аɑαᴀ",
    "A": "АΑᎪ",
    "b": "ьЬƅʙ",
    "B": "ВΒᏴ",
    "c": "сςᴄⲥ",
    "C": "СᏟⲤ",
    "d": "ԁᴅ",
    "D": "Ꭰ",
    "e": "еҽεᴇ",
    "E": "ЕΕᎬ",
    "f": "ꜰ",
    "g": "ɡɢց",
    "G": "ԌᏀ",
    "h": "һհʜ",
    "H": "НΗᎻⲎ",
    "i": "іιɩɪıꙇ",
    "j": "јϳᴊ",
    "J": "ЈͿᎫ",
    "k": "кκᴋ",
    "K": "КΚᏦⲔ",
    "l": "ʟ",
    "L": "ᏞⳐ",
    "m": "мᴍ",
    "M": "МΜᎷⲘϺ",
    "n": "пոռɴη",
    "N": "ΝⲚ",
    "o": "оοσօᴏⲟ",
    "O": "ОΟՕⲞ",
    "p": "рρᴘⲣ",
    "P": "РΡᏢⲢ",
    "q": "ԛզգ",
    "Q": "Ԛ",
    "r": "гʀⲅ",
    "R": "ᎡᏒ",
    "s": "ѕꜱƽ",
    "S": "ЅՏᏚᏕ",
    "t": "тτᴛ",
    "T": "ТΤᎢⲦ",
    "u": "υսᴜʋ",
    "U": "Ս",
    "v": "νѵᴠ",
    "V": "ѴᏙ",
    "w": "ԝѡաᴡωɯ",
    "W": "ԜᏔ",
    "x": "хχ",
    "X": "ХΧⲬ",
    "y": "уүγʏ",
    "Y": "УҮΥ",
    "z": "ᴢ",
    "Z": "ΖᏃ",
    "'": "\u2018\u2019\u201a\u201b\u2032\u02b9\u02bb\u02bc",
    '"': "\u201c\u201d\u201e\u201f",
    "-": "\u2010\u2012\u2013\u2014\u2015\u2212\u2043",
}
# A bare vertical stroke: Cyrillic І / Ӏ / ӏ, Greek Ι, Coptic Ⲓ, Latin ǀ / Ɩ. It passes for I in "Ignore"
# and for l in "all", so it is first mapped to _STROKE and then read both ways (:func:`forms`).
_STROKES = "ІӀӏΙⲒǀƖ"
_STROKE = "\x00"  # stray NUL is dropped from the text first, so this stands for strokes alone
_DROP = frozenset({"Cf", "Mn", "Me", "Cc"})  # format (soft hyphen, zero-width, bidi), combining marks, controls
_NEWLINES = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # line breaks \s knows; kept for line-anchored patterns
_BLANKS = "\u115f\u1160\u3164\uffa0\u2800"  # Hangul fillers and the Braille blank: letters/symbols drawn empty


class _Fold(dict[int, "int | str | None"]):
    """``str.translate`` table built as characters are met: look-alikes to ASCII, invisible characters
    dropped. A full table would mean classifying all 1.1M code points at import; this one only ever
    holds what the texts contained. Entries never change, so concurrent fills are harmless."""

    def __missing__(self, code: int) -> int | str | None:
        char = chr(code)
        out: int | str | None
        if char in "\t\n " or (char.isspace() and char not in _NEWLINES):
            out = code
        elif char in _NEWLINES:
            out = "\n"
        elif unicodedata.category(char) in _DROP:
            out = None
        else:
            out = code
        self[code] = out
        return out


_FOLD = _Fold()
for _ascii, _similar in LOOK_ALIKES.items():
    _FOLD.update({ord(c): _ascii for c in _similar})
_FOLD.update({ord(c): _STROKE for c in _STROKES})
_FOLD.update({ord(c): " " for c in _BLANKS})
# The ASCII characters _FOLD changes (the controls it drops, the line breaks it makes "\n"), read
# from the table itself.
_ASCII_FOLDED = re.compile("[" + "".join(re.escape(chr(c)) for c in range(128) if _FOLD[c] != c) + "]")
_SPACES = re.compile(r"[^\S\n]+")
_WHITESPACE = re.compile(r"\s+")
# Where those two change a text: a blank other than a single space (a run, or another blank).
_SPACES_CHANGE = re.compile(r"[^\S\n ]|  ")
_WHITESPACE_CHANGE = re.compile(r"[^\S ]|  ")
_STROKE_WORD = re.compile(rf"(?:[^\W\d_]|{_STROKE})*{_STROKE}(?:[^\W\d_]|{_STROKE})*")


def _read_strokes(match: re.Match[str]) -> str:
    """The likelier reading of the strokes in one word: I throughout a capitalised word ("ІNSTRUCTІONS")
    and at a word's start ("Іgnore"), l inside a lower-case word ("aІІ", "ruІes")."""
    word = match.group()
    if word.replace(_STROKE, "").isupper() or _STROKE * len(word) == word:
        return word.replace(_STROKE, "I")
    return word[0].replace(_STROKE, "I") + word[1:].replace(_STROKE, "l")


def forms(text: str) -> list[str]:
    """The texts the patterns are matched against: ``text`` itself, then normalised copies (see the module
    docstring): one that keeps line breaks and one with every whitespace run made a single space, each read
    with strokes as I / l when there are any. Distinct, in that order."""
    # Each step is skipped where it would change nothing (most texts): the table changes no
    # printable ASCII character, and a substitution that rewrites each single space as itself
    # still builds a new string. Together they were most of a scan's time (20 of 47 us on a
    # LoCoMo turn).
    if text.isascii():
        folded = text.translate(_FOLD) if _ASCII_FOLDED.search(text) else text
    else:
        folded = unicodedata.normalize("NFKD", text).translate(_FOLD)
    lines = _SPACES.sub(" ", folded) if _SPACES_CHANGE.search(folded) else folded
    readings = [lines]
    if _STROKE in lines:
        readings = [
            _STROKE_WORD.sub(_read_strokes, lines),
            lines.replace(_STROKE, "i"),
            lines.replace(_STROKE, "l"),
        ]
    out = [text]
    for reading in readings:
        spaced = _WHITESPACE.sub(" ", reading) if _WHITESPACE_CHANGE.search(reading) else reading
        for candidate in (reading, spaced):
            if candidate not in out:
                out.append(candidate)
    return out


@dataclass(frozen=True)
class Verdict:
    tainted: bool
    reasons: tuple[str, ...] = ()

    def fields(self) -> dict[str, Any]:
        """What a rendered search result carries: nothing when clean."""
        return {"tainted": True, "taint_reasons": list(self.reasons)} if self.tainted else {}


CLEAN = Verdict(False)


class PoisoningSettings(Protocol):
    enabled: bool
    disable: list[str]
    extra: dict[str, str]


class Filter:
    """Compiled patterns; thread-safe (compiled regexes are)."""

    def __init__(self, patterns: Mapping[str, str], *, enabled: bool = True, gated: bool = True) -> None:
        self.enabled = enabled
        self._patterns = {name: re.compile(rx, re.IGNORECASE) for name, rx in patterns.items()}
        # Only a default pattern as written has a gate (an `extra` one of the same name has none).
        self._gates = {
            name: GATES[name]
            for name, rx in patterns.items()
            if gated and name in GATES and DEFAULT_PATTERNS[name] == rx
        }
        by_word: dict[str, list[str]] = {}
        for name, gate in self._gates.items():
            for word in gate:
                by_word.setdefault(word, []).append(name)
        self._all_gated = len(self._gates) == len(self._patterns)
        # Each gate word once, with the patterns it opens: one pass of substring tests a form.
        self._gate_words = tuple((word, tuple(names)) for word, names in by_word.items())

    @classmethod
    def of(cls, settings: PoisoningSettings) -> Filter:
        return cls(patterns(settings.disable, settings.extra), enabled=settings.enabled)

    @property
    def names(self) -> list[str]:
        return list(self._patterns)

    def scan(self, text: str) -> Verdict:
        if not self.enabled or not text:
            return CLEAN
        found: set[str] = set()
        for form in forms(text):
            opened = self._opened(form)
            if opened is not None and not opened and self._all_gated:
                continue  # none can match (most texts)
            for name, rx in self._patterns.items():
                searched = name not in found and (opened is None or name in opened or name not in self._gates)
                if searched and rx.search(form):
                    found.add(name)
        reasons = tuple(name for name in self._patterns if name in found)
        return Verdict(bool(reasons), reasons)

    def _opened(self, form: str) -> set[str] | None:
        """The gated patterns that can match ``form`` (see :data:`GATES`): those with a gate word
        in it; None when it is not ASCII (every pattern is searched)."""
        if not form.isascii():
            return None
        lowered = form.lower()
        opened: set[str] = set()
        for word, names in self._gate_words:
            if word in lowered:
                opened.update(names)
        return opened


def patterns(disable: Iterable[str] = (), extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The default patterns less ``disable``, plus ``extra``; unknown names and bad regular
    expressions raise ValueError (settings turn it into a CONFIG_ERROR naming the setting)."""
    out = dict(DEFAULT_PATTERNS)
    for name in disable:
        if name not in out:
            raise ValueError(f"unknown poisoning pattern {name!r}; the patterns are {', '.join(DEFAULT_PATTERNS)}")
        del out[name]
    for name, rx in (extra or {}).items():
        try:
            re.compile(rx)
        except re.error as exc:
            raise ValueError(f"poisoning pattern {name!r} is not a valid regular expression: {exc}") from None
        out[name] = rx
    return out


# --- justifications --------------------------------------------------------------------------------
# Tainted text enters a working block only with a justification of substance: at least this many
# different words (runs of two or more letters that are not one letter repeated) with at least this
# many letters in them. "quoted", "a quote", "ok ok ok", "." and "aaaa bbbb cccc" are refused; "the user
# asked to keep this quote" passes. A character of a script written without spaces (CJK: East Asian
# wide) counts as a word of two letters, so "用户要求保留这段原文" passes too.
JUSTIFICATION_MIN_WORDS = 3
JUSTIFICATION_MIN_LETTERS = 12


def _words(text: str) -> list[str]:
    """The words of ``text`` that count towards a justification (lower-cased; wide characters one by one)."""
    plain = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) not in _DROP)
    out: list[str] = []
    word = ""
    for char in plain + " ":
        wide = unicodedata.east_asian_width(char) in ("W", "F")
        if char.isalpha() and not wide:
            word += char.lower()
            continue
        if len(set(word)) >= 2:
            out.append(word)
        word = ""
        if char.isalpha():
            out.append(char)
    return out


def justification_problem(justification: str) -> str | None:
    """Why ``justification`` is too thin to let tainted text into a working block, or None when it will do."""
    words = _words(justification)
    letters = sum(2 if len(w) == 1 else len(w) for w in words)
    distinct = len(set(words))
    if distinct >= JUSTIFICATION_MIN_WORDS and letters >= JUSTIFICATION_MIN_LETTERS:
        return None
    return (
        "a justification must say in words why this content belongs in a working block: at least "
        f"{JUSTIFICATION_MIN_WORDS} different words and {JUSTIFICATION_MIN_LETTERS} letters (this one has "
        f"{distinct} words, {letters} letters)"
    )
