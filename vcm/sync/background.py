"""The sync client's background threads: a :class:`Follower` per agent reading its change feed
as server-sent events, and the :class:`Periodic` sync.

A follower reconnects after every end of its stream (the server closes it after
``[sync] max_stream_s``, or the network does) with ``Last-Event-ID`` = the last change the
instance applied, so it misses nothing; a ``gap`` frame (its position was trimmed away) drops the
agent's cache. Failures back off from 0.2 s to 5 s; the periodic sync pulls whatever the follower
missed meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx

from vcm.sync.replica import Replica
from vcm.sync.sse import Lines, Parser
from vcm.wire import seg

log = logging.getLogger(__name__)

BACKOFF_S = (0.2, 5.0)
# Longer than the server's keepalive interval (15 s), so a silent dead connection is noticed.
READ_TIMEOUT_S = 45.0


class StreamEnded(Exception):
    """The server ended the stream with an ``error`` frame."""


class Follower(threading.Thread):
    def __init__(self, http: httpx.Client, replica: Replica, agent_id: str, stop: threading.Event) -> None:
        super().__init__(name=f"vcm-follow-{agent_id}", daemon=True)
        self.http = http
        self.replica = replica
        self.agent_id = agent_id
        self.stop = stop
        self.connected = threading.Event()
        self._response: httpx.Response | None = None

    def run(self) -> None:
        delay = BACKOFF_S[0]
        while not self.stop.is_set():
            try:
                self._follow()
                delay = BACKOFF_S[0]
            except (httpx.HTTPError, StreamEnded, ValueError, OSError) as exc:
                if self.stop.is_set():
                    return
                log.debug("change feed of %s: %s; reconnecting in %.1f s", self.agent_id, exc, delay)
                self.stop.wait(delay)
                delay = min(delay * 2, BACKOFF_S[1])

    def _follow(self) -> None:
        headers = {"Accept": "text/event-stream"}
        cursor = self.replica.cursor(self.agent_id)
        if cursor is not None:
            headers["Last-Event-ID"] = cursor
        path = f"/v1/agents/{seg(self.agent_id)}/changes/stream"
        timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_S)
        with self.http.stream("GET", path, headers=headers, timeout=timeout) as response:
            if response.status_code != 200:
                response.read()
                raise StreamEnded(f"HTTP {response.status_code}: {response.text[:200]}")
            self._response = response
            parser, lines = Parser(), Lines()
            try:
                for chunk in response.iter_text():
                    for line in lines.feed(chunk):
                        if self.stop.is_set():
                            return
                        event = parser.line(line)
                        if event is not None and self._handle(event.event, event.data):
                            return
            finally:
                self._response = None
                self.connected.clear()

    def _handle(self, name: str, data: str) -> bool:
        """Apply one frame; True when the stream is over (``bye``: reconnect at once)."""
        if name == "change":
            self.replica.apply(self.agent_id, json.loads(data))
        elif name == "ready":
            self.connected.set()
        elif name == "gap":
            self.replica.gap(self.agent_id)
        elif name == "error":
            raise StreamEnded(data[:200])
        return name == "bye"

    def halt(self) -> None:
        """Stop now: a read blocked on the socket is woken by shutting the socket down."""
        self.stop.set()
        response = self._response
        stream: Any = response.extensions.get("network_stream") if response is not None else None
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)


class Periodic(threading.Thread):
    """``run()`` every ``interval_s`` until ``stop`` is set; a failure is logged, never raised
    (the sync records it in the status it reports)."""

    def __init__(self, interval_s: float, run: Callable[[], Any], stop: threading.Event) -> None:
        super().__init__(name="vcm-sync", daemon=True)
        self.interval_s = interval_s
        self.task = run
        self.stop = stop

    def run(self) -> None:
        while not self.stop.wait(self.interval_s):
            try:
                self.task()
            except Exception as exc:  # the status says error; the next period tries again
                log.warning("periodic sync failed: %s: %s", type(exc).__name__, exc)


__all__ = ["Follower", "Periodic", "StreamEnded"]
