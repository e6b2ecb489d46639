"""A small client for any Anthropic-compatible Messages endpoint (``POST /v1/messages``, httpx),
the upstream of vcm's ``/v1/messages`` proxy route.

The request body is sent as given (the proxy builds it); :meth:`MessagesClient.create` answers
the endpoint's JSON message, :meth:`MessagesClient.stream` yields each server-sent event as
``(event, data)``. Retries with backoff as :class:`vcm.llm.ChatClient` does (429, 5xx, timeouts,
connection failures; a stream only until its first byte); any other refusal raises at once as a
:class:`~vcm.llm.ChatError` carrying the endpoint's status and body, for the proxy to relay.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

import httpx

from vcm import jsontext
from vcm.llm import ChatError, backoff_s, post_retrying, stream_retrying


def endpoint(base_url: str) -> str:
    """``https://host``, ``https://host/v1`` or the full ``.../v1/messages`` all work."""
    base = base_url.rstrip("/")
    if base.endswith("/messages"):
        return base
    return base + ("/messages" if base.endswith("/v1") else "/v1/messages")


def events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """``(event, data)`` of a server-sent event stream (a multi-line data field joined)."""
    name, data = "", list[str]()
    for line in lines:
        if not line:
            if data:
                yield name or "message", "\n".join(data)
            name, data = "", list[str]()
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield name or "message", "\n".join(data)


class MessagesClient:
    def __init__(
        self,
        base_url: str,
        *,
        api_key: str = "",
        version: str = "2023-06-01",
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 2,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.url = endpoint(base_url)
        self.max_retries = max_retries
        self._sleep = sleep
        self._rand = rand
        headers = {"anthropic-version": version, **({"x-api-key": api_key} if api_key else {})}
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s), headers=headers)

    def _retry(self, attempt: int, error: ChatError, wait: float | None) -> None:
        error.attempts = attempt + 1
        if attempt == self.max_retries:
            raise error
        self._sleep(min(30.0, wait) if wait is not None else backoff_s(attempt, 0.5, 8.0, self._rand))

    def create(self, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        return post_retrying(
            self._http, self.url, body, attempts=self.max_retries + 1, retry=self._retry, parse=_message,
            headers=headers,
        )  # fmt: skip

    def stream(
        self, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> Generator[tuple[str, dict[str, Any]], None, None]:
        """Each event of a streamed answer as ``(event, data)``."""
        yield from stream_retrying(
            self._http, self.url, {**body, "stream": True}, attempts=self.max_retries + 1, retry=self._retry,
            read=self._events, headers=headers,
        )  # fmt: skip

    @staticmethod
    def _events(response: httpx.Response) -> Generator[tuple[str, dict[str, Any]], None, None]:
        try:
            for name, data in events(response.iter_lines()):
                try:
                    parsed = jsontext.loads(data)
                except ValueError:
                    raise ChatError("a stream event is not JSON") from None
                if not isinstance(parsed, dict):
                    raise ChatError("a stream event is not an object")
                yield name, parsed
        except httpx.HTTPError as exc:  # cut off mid-answer: not retried, part of it was delivered
            raise ChatError(f"the endpoint's stream broke off: {exc}", retryable=True) from None

    def close(self) -> None:
        self._http.close()


def _message(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        raise ChatError("the endpoint's answer is not JSON", status=response.status_code) from None
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise ChatError("the endpoint's answer has no content list", status=response.status_code)
    return data
