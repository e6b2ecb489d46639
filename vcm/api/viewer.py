"""The memory viewer's live stream and page files: what :mod:`vcm.api.routes.viewer`'s routes
serve (the routes, and how the page gets its token, are described there).

**The stream.** ``EventSource`` cannot send headers, which leaves a token in the query string (it
lands in access logs, proxy logs and the browser history) or a short-lived signed ticket (a second
credential to mint, scope, expire and revoke). The page reads the stream with ``fetch()`` instead,
which sends the header, so the stream is an ordinary route behind the ordinary check. Every
``poll_s`` it checks the token again (a rotated token or a deleted agent ends it), reads the audit
rows written since the last tick and the agent's gauges, eviction backlog and health, and sends
what changed. Polling the store and Redis at a second's pace costs one indexed query and three
Redis reads per open page; a push channel would have to be threaded through every writer,
workers included. A stream ends after ``max_stream_s`` and the page reconnects from the last row
it saw, so a client that vanished without closing holds nothing for long and a server can drain.

Frames (``event:`` name, one JSON ``data:`` line): ``audit`` (an :class:`~vcm.api.models.EventOut`),
``status`` (:class:`StreamStatus`, sent when it changes), ``gap`` (rows were skipped: too many to
send at once), ``error`` (a coded error; the stream ends), ``bye`` (lifetime over: reconnect).
:func:`feed` serves the change feed's stream too (:mod:`vcm.api.routes.sync`).
"""

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Protocol

import redis
from fastapi import Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from vcm.api.health import HealthCache
from vcm.api.models import EventOut, Gauges
from vcm.errors import NotFound, VcmError
from vcm.service import MemoryService

log = logging.getLogger(__name__)

POLL_S = 1.0
MAX_STREAM_S = 300.0
# A comment line after this long without a frame, so that proxies and the browser see the
# connection alive.
KEEPALIVE_S = 15.0
# How far back a fresh stream starts when the page names no ``since``.
BACKLOG_S = 3600.0
# Rows are re-read this far behind the newest one seen: a worker may write a row stamped a
# little earlier than rows already sent (the spool writes ``append`` rows after the fact).
LOOKBACK_S = 5.0
EVENT_PAGE = 500
MAX_EVENTS_PER_TICK = 2000

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
# Scripts and styles from this origin only, no inline code, no framing; the API is the only place
# the page talks to. Message text is user content: the scripts only ever set it as text.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
STREAM_HEADERS = {
    "Cache-Control": "no-store",
    # nginx buffers responses by default, which would hold frames back.
    "X-Accel-Buffering": "no",
}


class WhoAmIOut(BaseModel):
    admin: bool
    agent_id: str | None = Field(description="the agent an agent token belongs to; null for the admin token")


class Thresholds(BaseModel):
    """The budget lines, as fractions of the window (settings ``[budget]``)."""

    warning: float
    flush: float
    target: float
    pinned_cap: float
    summary_cap: float
    output_reserve: float
    # Held back for the memory injected on each call, where the settings have it (0 otherwise).
    memory_reserve: float = 0.0


class StreamHealth(BaseModel):
    ok: bool
    redis: bool
    store: bool
    store_backend: str


class StreamStatus(BaseModel):
    gauges: Gauges
    thresholds: Thresholds
    pending_batches: list[int] = Field(description="eviction batches begun and not yet committed (the backlog)")
    health: StreamHealth


class StreamGap(BaseModel):
    resumed_from: float = Field(description="rows before this time (unix seconds) were not sent")


def frame(event: str, data: BaseModel | dict[str, Any]) -> str:
    """One server-sent event. JSON holds no raw newline, so one ``data:`` line carries it."""
    if isinstance(data, BaseModel):
        text = data.model_dump_json()
    else:  # an error's details: str() whatever JSON cannot carry
        text = json.dumps(data, separators=(",", ":"), default=str)
    return f"event: {event}\ndata: {text}\n\n"


@dataclass
class Watch:
    """One stream's view of an agent: the audit rows it sent (by id, within the look-back) and
    the status it sent last. :meth:`poll` returns the frames of what is new."""

    service: MemoryService
    agent_id: str
    since: float
    health: HealthCache
    _seen: dict[str, float] = field(default_factory=dict)
    _status: str | None = None

    def poll(self) -> list[str]:
        return [*self._events(), *self._status_frame()]

    def _events(self) -> list[str]:
        frames: list[str] = []
        cursor: str | None = None
        read = 0
        while True:
            page = self.service.events(self.agent_id, since=self.since, limit=EVENT_PAGE, cursor=cursor)
            read += len(page.items)
            for ev in page.items:
                if ev.event_id not in self._seen:
                    self._seen[ev.event_id] = ev.created_at
                    frames.append(frame("audit", EventOut.of(ev)))
            cursor = page.next_cursor
            if cursor is None:
                break
            if read >= MAX_EVENTS_PER_TICK:
                # More than a page can take in at once: go on from the present, and say so.
                self.since = self.service.clock() - LOOKBACK_S
                frames.append(frame("gap", StreamGap(resumed_from=self.since)))
                break
        newest = max(self._seen.values(), default=self.since)
        self.since = max(self.since, newest - LOOKBACK_S)
        self._seen = {event_id: t for event_id, t in self._seen.items() if t >= self.since}
        return frames

    def _status_frame(self) -> list[str]:
        budget = self.service.settings.budget
        report = self.health.cached() or self.health.refresh()
        status = StreamStatus(
            gauges=Gauges.model_validate(self.service.gauges(self.agent_id).as_dict()),
            thresholds=Thresholds.model_validate(budget.model_dump(include=set(Thresholds.model_fields))),
            pending_batches=self.service.pending_batches(self.agent_id),
            health=StreamHealth(
                ok=report["ok"], redis=report["redis"], store=report["store"], store_backend=report["store_backend"]
            ),
        )
        text = status.model_dump_json()
        if text == self._status:
            return []
        self._status = text
        return [f"event: status\ndata: {text}\n\n"]


class Poller(Protocol):
    """What :func:`feed` polls: :class:`Watch`, or another stream's source of frames (the change
    feed's, :mod:`vcm.api.sync`)."""

    agent_id: str

    def poll(self) -> list[str]: ...


async def feed(
    request: Request, watch: Poller, allowed: Callable[[], None], *, poll_s: float, max_s: float
) -> AsyncIterator[str]:
    """The frames of one stream until the client leaves, the token stops working, or ``max_s``."""
    opened = last_sent = time.monotonic()
    while True:
        try:
            frames = await run_in_threadpool(_tick, watch, allowed)
        except VcmError as exc:  # the token was rotated, the agent deleted, the store is down
            yield frame("error", exc.to_dict())
            return
        except redis.exceptions.RedisError:
            yield frame("error", {"code": "STORE_UNAVAILABLE", "message": "the hot state (Redis) is unavailable"})
            return
        except Exception:  # a bug: the page reconnects; the traceback goes to the log
            log.exception("viewer stream of %s failed", watch.agent_id)
            yield frame("error", {"code": "INTERNAL_ERROR", "message": "internal error; see the server log"})
            return
        now = time.monotonic()
        if frames:
            yield "".join(frames)
            last_sent = now
        elif now - last_sent >= KEEPALIVE_S:
            yield ": keepalive\n\n"
            last_sent = now
        if now - opened >= max_s:
            yield frame("bye", {"reconnect": True})
            return
        await asyncio.sleep(poll_s)
        if await request.is_disconnected():
            return


def _tick(watch: Poller, allowed: Callable[[], None]) -> list[str]:
    allowed()
    return watch.poll()


@functools.cache
def _assets() -> dict[str, tuple[bytes, str]]:
    """The page's files, read once: a name outside this table is a 404, so no path reaches the disk."""
    root = resources.files("vcm.api").joinpath("static")
    out: dict[str, tuple[bytes, str]] = {}
    for item in root.iterdir():
        suffix = "." + item.name.rpartition(".")[2]
        if item.is_file() and suffix in _TYPES:
            out[item.name] = (item.read_bytes(), _TYPES[suffix])
    return out


def asset_response(name: str) -> Response:
    """One of the page's files, with the page's headers; NOT_FOUND for any other name."""
    found = _assets().get(name)
    if found is None:
        raise NotFound(f"no viewer file {name!r}", name=name)
    body, media_type = found
    return Response(body, media_type=media_type, headers=_PAGE_HEADERS)


__all__ = [
    "BACKLOG_S",
    "MAX_STREAM_S",
    "POLL_S",
    "STREAM_HEADERS",
    "Poller",
    "StreamStatus",
    "Watch",
    "WhoAmIOut",
    "asset_response",
    "feed",
    "frame",
]
