"""Server-sent events, read line by line (the WHATWG event-stream format, as much of it as vcm's
streams use: ``event:``, ``data:``, ``id:``, comments), and the lines of a streamed text body
(:class:`Lines`). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Event:
    event: str
    data: str
    id: str | None  # the stream's last event id after this event


@dataclass
class Parser:
    last_id: str | None = None
    _event: str = ""
    _data: list[str] = field(default_factory=list)

    def line(self, text: str) -> Event | None:
        """Feed one line (without its end); returns the event a blank line completes."""
        if text == "":
            if not self._data and not self._event:
                return None
            event = Event(self._event or "message", "\n".join(self._data), self.last_id)
            self._event, self._data = "", []
            return event
        if text.startswith(":"):
            return None  # a comment: keepalive
        name, _, value = text.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\x00" not in value:
            self.last_id = value
        return None


class Lines:
    """A streamed text body cut into lines at ``\\r\\n``, ``\\r`` or ``\\n`` only (the
    event-stream format's line ends; JSON Lines ends at ``\\n``, before which ``\\r`` is JSON
    whitespace). httpx's ``iter_lines`` cuts as ``str.splitlines`` does, at U+2028 and U+0085
    too, which a frame's or a record's JSON may hold raw inside a string."""

    def __init__(self) -> None:
        self._rest = ""

    def feed(self, text: str) -> list[str]:
        """The lines ``text`` completes (without their ends)."""
        text = self._rest + text
        # A chunk ending in \r may be the first half of \r\n: keep it for the next.
        keep = text.endswith("\r")
        parts = _END.split(text[:-1] if keep else text)
        self._rest = parts.pop() + ("\r" if keep else "")
        return parts

    def end(self) -> list[str]:
        """The last line, when the body did not end with a line end."""
        rest, self._rest = self._rest.removesuffix("\r"), ""
        return [rest] if rest else []


__all__ = ["Event", "Lines", "Parser"]
