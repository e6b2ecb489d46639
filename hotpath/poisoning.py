"""Memory-poisoning filter: does a retrieved text read like instructions to the model? Pure.

Whatever the agent stored (or a document it ingested) comes back into its context through
``search_recall``, ``search_archival`` and rehydration. A text planted there to steer the model
("ignore previous instructions", a forged ``system:`` turn, a fake tool call) would otherwise be
read with the authority of the agent's own memory. Retrieved items that match are marked
``tainted: true`` with the names of the patterns that matched (``taint_reasons``), and such text
is not promoted into a working block (``store_core`` / ``put_block``) without a justification.

The patterns (names are what ``taint_reasons`` and ``[poisoning] disable`` use):

======================  ==========================================================================
``override``            ignore / disregard / forget / override ... previous / prior / above / system
                        ... instructions / prompt / rules
``new_instructions``    "new instructions:", "updated system prompt:", "your real instructions are"
``persona_switch``      "you are now DAN / an unrestricted AI / in developer mode", "from now on you
                        will ignore ..."
``roleplay_override``   pretend / act as / role-play ... without restrictions, jailbroken, DAN, "do
                        anything now", developer mode
``fake_role``           a line opening with ``system:`` / ``developer:`` / ``assistant:`` or chat-template
                        markers (``<|im_start|>``, ``[INST]``, ``<<SYS>>``, ``### System``)
``forged_tool_call``    tool-call JSON (``"tool_calls":``, ``"function_call":``), ``<tool_call>`` tags,
                        or a vcm memory tool written as a call (``store_core(``)
``hidden_marker``       zero-width / bidi-override / Unicode tag characters, HTML comments that
                        address the model
``secrecy``             "do not tell the user", "without the user knowing"
``prompt_leak``         reveal / print / repeat ... your system prompt / hidden instructions
======================  ==========================================================================

Each pattern needs an imperative aimed at the model next to what it targets, so ordinary talk
*about* instructions ("the assembly instructions were confusing", "my boss said to ignore the
noise") is not flagged; ``scripts/poisoning_fp.py`` measures the false-positive rate over the
LoCoMo conversations. Text is NFKC-normalised first, so full-width and compatibility look-alikes
match too. Settings ``[poisoning]``: ``enabled``, ``disable`` (pattern names), ``extra`` (name ->
regular expression, case-insensitive).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

_GAP = r"[^.!?\n]{0,40}?"  # a few words within one sentence

DEFAULT_PATTERNS: dict[str, str] = {
    "override": (
        rf"\b(ignore|disregard|forget|override|bypass|skip)\b{_GAP}\b(all|any|the|your|previous|prior|above|"
        rf"earlier|preceding|system|original|initial)\b{_GAP}\b(instructions?|prompts?|rules|directives|"
        r"guidelines|guardrails|system message)\b"
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
        r"(^|\n)\s*(system|developer|assistant)\s*(message|prompt)?\s*:\s*\S"
        r"|<\|(im_start|im_end|system|endoftext|start_header_id)\|>|\[/?INST\]|<</?SYS>>"
        r"|(^|\n)\s*#{2,}\s*(system|instruction)s?\b"
    ),
    "forged_tool_call": (
        r"\"(tool_calls|function_call|tool_call_id)\"\s*:|</?(tool_call|function_call|tool_use)>"
        r"|\b(store_core|fetch_core|append_fifo|evict_fifo|write_recall|search_recall|search_archival|"
        r"ingest_archival|record_heartbeat)\s*\("
    ),
    # Zero-width space/joiners' neighbours, bidi overrides, word joiners, BOM mid-text, tag
    # characters (invisible ASCII); U+200D (zero-width joiner) is left out: emoji sequences use it.
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
    ),
}


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

    def __init__(self, patterns: Mapping[str, str], *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._patterns = {name: re.compile(rx, re.IGNORECASE) for name, rx in patterns.items()}

    @classmethod
    def of(cls, settings: PoisoningSettings) -> Filter:
        return cls(patterns(settings.disable, settings.extra), enabled=settings.enabled)

    @property
    def names(self) -> list[str]:
        return list(self._patterns)

    def scan(self, text: str) -> Verdict:
        if not self.enabled or not text:
            return CLEAN
        normal = unicodedata.normalize("NFKC", text)
        reasons = tuple(
            name for name, rx in self._patterns.items() if rx.search(normal) or (normal != text and rx.search(text))
        )
        return Verdict(bool(reasons), reasons)


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
