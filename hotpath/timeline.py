"""Time in the prompt: the marker a FIFO message carries so that the model can place it in time.

Pure rendering, and the per-process memory of each agent's latest message time it needs.

``[context] time`` chooses the marker:

* ``day`` (default): a compact date where the day changes from the agent's previous message
  (``[Mon 8 May 2023]``), with the gap when it is long (``[Mon 8 May 2023, 3 weeks later]``); within
  a day, a pause of :data:`SAME_DAY_GAP_S` or more gets the time (``[15:40, 5 hours later]``).
  An agent's first message has no previous one and no marker: the identity layer's date places
  an undated FIFO beginning (with its date when that is not today: the built prompt's identity
  layer says when the messages begin), and the recalled messages, facts and summary carry their dates.
* ``message``: every message its date and time (``[8 May 2023 13:56]``), ~8 tokens each.

Dates are written as people (and the summary's resolved relative dates, "on 7 May 2023") write
them, so a question's date words meet the prompt's.
* ``off``: none.

The marker is rendered in front of the message's content (:func:`vcm.types.marked`) and its tokens
are counted with the message's on append, so the hot path's accounting is what the prompt holds.
It is kept apart from the content: recall, summaries and facts see the words as they were said.
Times are UTC, as the identity layer's date.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime

SAME_DAY_GAP_S = 3 * 3600.0
# A day change says how long the pause was from this gap on (the next day needs no saying).
LONG_GAP_S = 2 * 86400.0
MODES = ("day", "message", "off")


def marker(now: float, previous: float | None, mode: str) -> str:
    """The marker of a message appended at ``now`` after one at ``previous`` (None: no previous
    message known, no marker in ``day`` mode); "" for none."""
    if mode == "off" or now <= 0:
        return ""
    at = datetime.fromtimestamp(now, UTC)
    if mode == "message":
        return f"[{day(at)} {at:%H:%M}]"
    if previous is None or previous <= 0:
        return ""
    gap = now - previous
    if datetime.fromtimestamp(previous, UTC).date() != at.date():
        later = f", {span(gap)} later" if gap >= LONG_GAP_S else ""
        return f"[{at:%a} {day(at)}{later}]"
    if gap >= SAME_DAY_GAP_S:
        return f"[{at:%H:%M}, {span(gap)} later]"
    return ""


def day(at: datetime) -> str:
    """A date as people write it: 8 May 2023."""
    return f"{at.day} {at:%B %Y}"


# Exactly the markers marker() writes, followed by the space that joins them to the content.
_DAY = r"\d{1,2} [A-Z][a-z]+ \d{4}"
_LATER = r"\d+ \w+ later"
_MARKER = re.compile(rf"^\[(?:\w{{3}} {_DAY}(?:, {_LATER})?|{_DAY} \d\d:\d\d|\d\d:\d\d, {_LATER})\] ")


def unmarked(text: str) -> str:
    """A rendered message's content without its time marker (what the speaker wrote)."""
    return _MARKER.sub("", text, count=1)


def span(seconds: float) -> str:
    """A pause in the largest whole unit that fits: hours, days, weeks, months or years."""
    for unit, size in (("year", 365 * 86400), ("month", 30 * 86400), ("week", 7 * 86400), ("day", 86400)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    n = max(1, int(seconds // 3600))
    return f"{n} hour{'s' if n != 1 else ''}"


class Timeline:
    """Each agent's latest message time in this process, read from the FIFO's newest message the
    first time (``read_latest``). Another process's appends are not seen: the worst case is a date
    marker repeated, never one missing for a day this process appends to."""

    def __init__(self, mode: str, read_latest: Callable[[str], float | None]) -> None:
        self.mode = mode
        self._read_latest = read_latest
        self._latest: dict[str, float | None] = {}
        self._lock = threading.Lock()

    def marker(self, agent_id: str, now: float) -> str:
        if self.mode != "day":
            return marker(now, None, self.mode)
        with self._lock:
            known = agent_id in self._latest
            previous = self._latest.get(agent_id)
        if not known:
            previous = self._read_latest(agent_id)
        return marker(now, previous, self.mode)

    def created(self, agent_id: str) -> None:
        """A new agent: no message yet (its first append needs no read)."""
        with self._lock:
            self._latest[agent_id] = None

    def appended(self, agent_id: str, at: float, *, dated: bool = False) -> None:
        """A message of ``agent_id`` was appended at ``at``; ``dated``: at the time its caller
        gave (history imported with its times), which the next marker follows even when it is
        earlier, so that the markers read in the FIFO's order tell the story the messages do.
        Undated appends keep the latest time seen, so two concurrent appends cannot make a marker
        go missing."""
        with self._lock:
            latest = self._latest.get(agent_id)
            self._latest[agent_id] = at if latest is None or dated else max(latest, at)

    def forget(self, agent_id: str) -> None:
        """The agent's FIFO was replaced (reset, restore, deletion): read it again next time."""
        with self._lock:
            self._latest.pop(agent_id, None)
