"""Memory tags in assistant replies (seed 003): ``[MEMORY:type] ... [/MEMORY]`` becomes a fact,
``[STATE:key] ... [/STATE]`` a state value. Pure: finds the tags and the reply without them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

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
        return json.loads(text)
    except ValueError:
        return text


def capture(reply: str) -> Captured:
    memories = tuple((m.group(1).lower(), " ".join(m.group(2).split())) for m in _MEMORY.finditer(reply))
    states = tuple((m.group(1), _value(m.group(2).strip())) for m in _STATE.finditer(reply))
    stripped = _STATE.sub("", _MEMORY.sub("", reply))
    stripped = re.sub(r"[ \t]{2,}", " ", re.sub(r"\n{3,}", "\n\n", stripped)).strip()
    return Captured(tuple(m for m in memories if m[1]), states, stripped)
