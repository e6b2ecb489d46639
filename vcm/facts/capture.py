"""Memory tags in assistant replies (seed 003): ``[MEMORY:type] ... [/MEMORY]`` becomes a fact,
``[STATE:key] ... [/STATE]`` a state value. Pure: finds the tags and the reply without them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vcm import jsontext

_MEMORY = re.compile(r"\[MEMORY:([A-Za-z][A-Za-z0-9_]{0,31})\](.*?)\[/MEMORY\]", re.S)
_STATE = re.compile(r"\[STATE:([A-Za-z0-9_.:-]{1,128})\](.*?)\[/STATE\]", re.S)


@dataclass(frozen=True)
class Captured:
    memories: tuple[tuple[str, str], ...]  # (type, text)
    states: tuple[tuple[str, Any], ...]  # (key, value: JSON when it parses, else the text)
    stripped: str  # the reply without the tags

    @property
    def any(self) -> bool:
        return bool(self.memories or self.states)


def _value(text: str) -> Any:
    try:
        return jsontext.loads(text)
    except ValueError:
        return text


def capture(reply: str) -> Captured:
    memories = tuple((m.group(1).lower(), " ".join(m.group(2).split())) for m in _MEMORY.finditer(reply))
    states = tuple((m.group(1), _value(m.group(2).strip())) for m in _STATE.finditer(reply))
    stripped = _STATE.sub("", _MEMORY.sub("", reply))
    stripped = re.sub(r"[ \t]{2,}", " ", re.sub(r"\n{3,}", "\n\n", stripped)).strip()
    return Captured(tuple(m for m in memories if m[1]), states, stripped)


def shown(reply: str) -> str:
    """What a reader is shown of a reply: the text without its tags (``capture``'s ``stripped``),
    or the reply as written when it holds none."""
    if "[" not in reply:
        return reply
    captured = capture(reply)
    return captured.stripped if captured.any else reply


# The opening tags, as a streamed reply may hold them cut anywhere.
_OPEN = re.compile(r"\[(MEMORY:[A-Za-z][A-Za-z0-9_]{0,31}|STATE:[A-Za-z0-9_.:-]{1,128})\]")
_CLOSE = {"MEMORY": "[/MEMORY]", "STATE": "[/STATE]"}
_LONGEST_OPEN = len("[STATE:]") + 128


def _may_open(tail: str) -> bool:
    """Whether ``tail`` (from a ``[``) may still become an opening tag as more text arrives."""
    for name, pattern in (("MEMORY:", r"[A-Za-z][A-Za-z0-9_]{0,31}"), ("STATE:", r"[A-Za-z0-9_.:-]{1,128}")):
        head = "[" + name
        if len(tail) <= len(head):
            if head.startswith(tail):
                return True
            continue
        if tail.startswith(head) and re.fullmatch(f"(?:{pattern})?", tail[len(head) :]) is not None:
            return len(tail) < _LONGEST_OPEN
    return False


class TagFilter:
    """Memory tags taken out of a reply that arrives in pieces (a stream), a tag cut across pieces
    included: :meth:`feed` answers the text that can be shown so far, :meth:`end` the rest. Text
    that may be the start of a tag is held back until it is known; a tag is dropped whole once its
    closing tag arrives, with the blanks after it when blanks precede it (as ``capture`` joins the
    text around a tag). An opening tag never closed is no tag (``capture`` leaves it in the reply
    too), so it is shown when the reply ends. Pure."""

    def __init__(self) -> None:
        self._held = ""
        self._last = ""  # the last character shown
        self._seam = False  # a tag was just dropped

    def _show(self, text: str, out: list[str]) -> None:
        if self._seam and self._last in ("", " ", "\t"):
            text = text.lstrip(" \t")
        if text:
            self._seam = False
            self._last = text[-1]
            out.append(text)

    def feed(self, text: str) -> str:
        self._held += text
        out: list[str] = []
        while self._held:
            start = self._held.find("[")
            if start < 0:
                self._show(self._held, out)
                self._held = ""
                break
            self._show(self._held[:start], out)
            self._held = self._held[start:]
            opening = _OPEN.match(self._held)
            if opening is None:
                if _may_open(self._held):
                    break  # wait for more
                self._show("[", out)
                self._held = self._held[1:]
                continue
            close = _CLOSE[opening.group(1).split(":", 1)[0]]
            end = self._held.find(close, opening.end())
            if end < 0:
                break  # inside a tag: wait for its end
            self._held = self._held[end + len(close) :]
            self._seam = True
        return "".join(out)

    def end(self) -> str:
        """What is still held when the reply ends (an unclosed tag, or a ``[`` at the very end)."""
        rest, self._held = self._held, ""
        out: list[str] = []
        self._show(rest, out)
        return "".join(out)
