"""A chat turn streamed through the HTTP API (``POST /v1/agents/{id}/chat`` with ``stream``): the
server-sent events come as they are written, so these calls are the clients' own rather than
:class:`~vcm.client.replies.Sender` operations (as the portable file's are)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from vcm import jsontext
from vcm.client.replies import Json, clean, error_from, idem
from vcm.errors import VcmError, from_payload
from vcm.sync.sse import Lines, Parser
from vcm.wire import seg


def _request(agent_id: str, message: str, name: str | None, idempotency_key: str | None) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": f"/v1/agents/{seg(agent_id)}/chat",
        "json": clean({"message": message, "name": name, "stream": True}),
        "headers": {"Accept": "text/event-stream", **idem(idempotency_key)},
    }


class _Frames:
    """The (event, data) pairs of one streamed turn, fed the body's text as it comes (pure). An
    unended last line completes no frame, so the body's end needs no feeding."""

    def __init__(self) -> None:
        self._parser = Parser()
        self._lines = Lines()
        self.done = False

    def feed(self, chunk: str) -> list[tuple[str, Json]]:
        """The frames ``chunk`` completes, up to the ``done`` frame (nothing after it)."""
        out = []
        for text in self._lines.feed(chunk):
            frame = self.line(text)
            if frame is not None:
                out.append(frame)
                if self.done:
                    break
        return out

    def line(self, text: str) -> tuple[str, Json] | None:
        event = self._parser.line(text)
        if event is None:
            return None
        try:
            data = jsontext.loads(event.data)
        except json.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            bad = VcmError(f"a {event.event!r} frame of the chat stream is not a JSON object")
            bad.code = "BAD_REPLY"
            raise bad
        if event.event == "error":  # the turn failed after it began: its coded error
            raise from_payload(data)
        self.done = event.event == "done"
        return event.event, data

    def end(self, status: int) -> None:
        if not self.done:
            cut = VcmError("the chat stream ended before its done frame")
            cut.code, cut.status = "BAD_REPLY", status
            raise cut


class ChatStreamOperations:
    _http: httpx.Client

    def chat_stream(
        self, agent_id: str, message: str, *, name: str | None = None, idempotency_key: str | None = None
    ) -> Iterator[tuple[str, Json]]:
        """One turn as the model writes it: ``("delta", {"content"})`` pieces of its text,
        ``("tool_result", {...})`` after each tool call the turn ran, then ``("done", result)``
        with what :meth:`chat` answers (a replayed turn: ``done`` alone). The request starts at
        the first ``next``: a refusal before the turn (a busy agent, a key used for another
        message) raises there, a failure during it (its ``error`` frame) where it comes. The
        client's ``timeout`` is the longest wait for the next frame. Leaving the loop early
        closes the stream, and so ends the turn on the server, when the generator is closed
        (at once here; in the async client wrap it in ``contextlib.aclosing``)."""
        with self._http.stream(**_request(agent_id, message, name, idempotency_key)) as response:
            if not response.is_success:
                response.read()
                raise error_from(response)
            frames = _Frames()
            for chunk in response.iter_text():
                yield from frames.feed(chunk)
                if frames.done:
                    return
            frames.end(response.status_code)


class AsyncChatStreamOperations:
    _http: httpx.AsyncClient

    async def chat_stream(
        self, agent_id: str, message: str, *, name: str | None = None, idempotency_key: str | None = None
    ) -> AsyncIterator[tuple[str, Json]]:
        """As :meth:`ChatStreamOperations.chat_stream`: ``async for event, data in client.chat_stream(a, m)``."""
        async with self._http.stream(**_request(agent_id, message, name, idempotency_key)) as response:
            if not response.is_success:
                await response.aread()
                raise error_from(response)
            frames = _Frames()
            async for chunk in response.aiter_text():
                for frame in frames.feed(chunk):
                    yield frame
                if frames.done:
                    return
            frames.end(response.status_code)
