"""Server-sent events, read line by line (the WHATWG event-stream format, as much of it as vcm's
streams use: ``event:``, ``data:``, ``id:``, comments). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field


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


__all__ = ["Event", "Parser"]
