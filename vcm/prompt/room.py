"""Room for the per-turn layers: how many of the FIFO's oldest messages a prompt leaves out when
the hot context leaves the injected layers less than their floor. Pure.

With seed 000's lines the hot context runs from 50 % of the window (after a flush) to 90 % (the
flush line), and the output reserve keeps the last 10 %: near the flush line nothing is left for
relevant memory, just when the oldest FIFO messages are the ones about to be summarised anyway.
A prompt built there leaves those messages out instead (the hot state keeps them until its own
flush; recall may bring them back if the turn needs them), so relevant memory keeps its room.

The cut is cache-stable: the shortfall is rounded up to a multiple of ``step`` tokens, and the
cut falls at the first user message at or past that many tokens from the FIFO's start; as the
FIFO grows turn by turn the rounded shortfall, and so the cut and the prompt's prefix, stay the
same for several turns. The first message kept is a user message, so no tool exchange is split;
the cut never passes a pinned message or the latest user message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """What the cut needs to know of one FIFO message."""

    role: str
    tokens: int
    pinned: bool = False


def left_out(fifo: Sequence[Entry], shortfall: int, step: int) -> int:
    """How many of ``fifo``'s oldest messages (oldest first) to leave out of the prompt so that at
    least ``shortfall`` more tokens are free, rounded up to a multiple of ``step``; fewer when a
    pinned message or the latest user message comes first, 0 when no cut frees anything."""
    if shortfall <= 0 or not fifo:
        return 0
    step = max(1, step)
    wanted = -(-shortfall // step) * step
    limit = max((i for i, e in enumerate(fifo) if e.role == "user"), default=0)
    limit = min(limit, next((i for i, e in enumerate(fifo) if e.pinned), len(fifo)))
    freed = 0
    cut = 0
    for i in range(limit + 1):
        if i > 0 and fifo[i].role == "user":
            cut = i
            if freed >= wanted:
                break
        freed += fifo[i].tokens
    return cut
