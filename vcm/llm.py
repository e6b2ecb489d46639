"""A small client for any OpenAI-compatible ``/v1/chat/completions`` endpoint (httpx).

Retries with exponential backoff and jitter on 429, 5xx, timeouts and connection failures
(honouring ``Retry-After``, capped); any other 4xx is the request's fault and is raised at once.
The base URL and API key default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` from the
environment. :meth:`ChatClient.stream` asks for server-sent events and yields each chunk as it
arrives (retrying, like ``complete``, only until the first byte of an answer), then returns the
whole :class:`Completion` that :class:`StreamAccumulator` put together from the chunks. The one
I/O seam is the httpx transport, which tests may replace; the tests use a real local HTTP server.

Errors::

    ChatError              the endpoint failed or answered something unusable
      code LLM_UNAVAILABLE   retryable failure that outlasted the retries (429/5xx/timeout/network)
      code LLM_REJECTED      the endpoint refused the request (4xx) or its answer was malformed
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from vcm import jsontext

R = TypeVar("R")
Y = TypeVar("Y")
# Called after a failed attempt: raises the error on the last attempt, else sleeps its backoff.
Retry = Callable[[int, "ChatError", float | None], None]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
BASE_URL_ENV = "OPENAI_BASE_URL"
API_KEY_ENV = "OPENAI_API_KEY"


class ChatError(Exception):
    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False, attempts: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retryable = retryable
        self.attempts = attempts
        # The endpoint's answer to a refused request (parsed JSON, else bytes), for a proxy to relay.
        self.body: Any = None
        self.media_type: str | None = None

    @classmethod
    def answered(cls, response: httpx.Response) -> ChatError:
        """The endpoint's refusal: its status (429 and 5xx retryable) and its body."""
        status = response.status_code
        error = cls(f"the endpoint answered HTTP {status}: {response.text[:300]}", status=status)
        error.retryable = status == 429 or status >= 500
        error.media_type = response.headers.get("content-type")
        try:
            error.body = response.json()
        except ValueError:
            error.body = response.content
        return error

    @property
    def code(self) -> str:
        return "LLM_UNAVAILABLE" if self.retryable else "LLM_REJECTED"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "status": self.status, "attempts": self.attempts}


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it (the executor parses and validates it)

    def wire(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class Completion:
    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)


def endpoint(base_url: str) -> str:
    """``.../v1`` (the OpenAI SDK convention) or a bare host both work."""
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")


def backoff_s(attempt: int, base_s: float, cap_s: float, rand: Callable[[], float]) -> float:
    """Exponential backoff with jitter in [50 %, 100 %] of the step, so clients do not retry in step."""
    return min(cap_s, base_s * float(2**attempt)) * (0.5 + rand() / 2)


def retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(str(value))
    except ValueError:
        return None  # an HTTP date; the computed backoff will do
    return max(0.0, seconds)


def _transport_error(exc: httpx.TransportError) -> ChatError:
    if isinstance(exc, httpx.TimeoutException):
        return ChatError(f"the endpoint timed out ({type(exc).__name__})", retryable=True)
    return ChatError(f"the endpoint could not be reached: {exc}", retryable=True)


def _refusal(response: httpx.Response) -> tuple[ChatError, float | None]:
    """The error an unsuccessful answer means (raised at once when retrying cannot help), and
    how long the endpoint asked to wait."""
    error = ChatError.answered(response)
    if not error.retryable:
        raise error
    return error, retry_after_s(response)


def post_retrying(
    http: httpx.Client,
    url: str,
    body: Mapping[str, Any],
    *,
    attempts: int,
    retry: Retry,
    parse: Callable[[httpx.Response], R],
    headers: Mapping[str, str] | None = None,
) -> R:
    """POST ``body`` until an attempt succeeds (``parse`` reads the answer) or ``retry`` gives up:
    the one retry loop of both chat clients (OpenAI and Anthropic wire formats)."""
    for attempt in range(attempts):
        wait: float | None = None
        try:
            response = http.post(url, json=dict(body), headers=dict(headers or {}))
        except httpx.TransportError as exc:
            error = _transport_error(exc)
        else:
            if response.is_success:
                return parse(response)
            error, wait = _refusal(response)
        retry(attempt, error, wait)
    raise AssertionError("unreachable: the last attempt returns or raises")


def stream_retrying(
    http: httpx.Client,
    url: str,
    body: Mapping[str, Any],
    *,
    attempts: int,
    retry: Retry,
    read: Callable[[httpx.Response], Generator[Y, None, R]],
    headers: Mapping[str, str] | None = None,
) -> Generator[Y, None, R]:
    """:func:`post_retrying` for a streamed answer: retried until its first byte, never after
    (``read`` raises a stream cut off mid-answer, part of which was delivered)."""
    for attempt in range(attempts):
        wait: float | None = None
        try:
            with http.stream("POST", url, json=dict(body), headers=dict(headers or {})) as response:
                if response.is_success:
                    return (yield from read(response))
                response.read()
                error, wait = _refusal(response)
        except httpx.TransportError as exc:
            error = _transport_error(exc)
        retry(attempt, error, wait)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _event_data(lines: Iterator[str]) -> Iterator[str]:
    """The ``data:`` payloads of a server-sent event stream (comments and other fields skipped;
    a multi-line data field joined with newlines, as the SSE format says)."""
    buffer: list[str] = []
    for line in lines:
        if not line:
            if buffer:
                yield "\n".join(buffer)
                buffer = []
            continue
        if line.startswith("data:"):
            buffer.append(line[5:].removeprefix(" "))
    if buffer:
        yield "\n".join(buffer)


def _completion(response: httpx.Response) -> Completion:
    try:
        return parse_completion(response.json())
    except ValueError:
        raise ChatError("the endpoint's answer is not JSON", status=response.status_code) from None


def new_call_id() -> str:
    """An id for a tool call the endpoint sent without one (the API's own form)."""
    return "call_" + uuid.uuid4().hex[:24]


def arguments_text(args: Any) -> str:
    """A tool call's arguments as the JSON text the API carries (some servers send an object)."""
    if args is None:
        return ""
    return args if isinstance(args, str) else json.dumps(args)


def parse_completion(data: Any) -> Completion:
    """The first choice of a chat-completions response; ChatError when it has no usable shape."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError):
        raise ChatError("the endpoint's answer has no choices[0].message") from None
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    if content is not None and not isinstance(content, str):
        raise ChatError("the endpoint's message content is neither text nor parts")
    calls = []
    for raw in message.get("tool_calls") or []:
        fn = raw.get("function") if isinstance(raw, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ChatError("the endpoint returned a tool call without a function name")
        # Some servers send arguments as an object, some leave out call ids; normalise both (the
        # proxy shows the client the normalised calls, so its echo matches what memory keeps).
        text = arguments_text(fn.get("arguments", "{}"))
        call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw["id"].strip() else new_call_id()
        calls.append(ToolCall(str(call_id), fn["name"], text))
    return Completion(content, calls, choice.get("finish_reason"), data)


@dataclass
class StreamAccumulator:
    """A streamed answer put back together: content pieces joined, tool calls by ``index``
    (id and name from their first chunk, arguments concatenated), the last finish reason and
    the usage chunk some servers send at the end. Pure."""

    content: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    model: str | None = None

    def add(self, chunk: Mapping[str, Any]) -> str:
        """Take one chunk; the content text it adds ('' for none)."""
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = chunk["usage"]
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        choices = chunk.get("choices") or []
        # The first choice only (with ``n`` > 1 the others' chunks are interleaved with it).
        choice = next((c for c in choices if isinstance(c, Mapping) and c.get("index", 0) == 0), None)
        if choice is None:
            return ""
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta") or {}
        if not isinstance(delta, Mapping):
            raise ChatError("a stream chunk's delta is not an object")
        pieces = delta.get("tool_calls") or []
        if not isinstance(pieces, list):
            raise ChatError("a stream chunk's tool_calls is not a list")
        for raw in pieces:
            # A malformed piece is the endpoint's garbage (a ChatError the caller answers for),
            # not an AttributeError that cuts a relayed stream off without a word.
            index = raw.get("index", len(self.calls)) if isinstance(raw, Mapping) else None
            fn = (raw.get("function") or {}) if isinstance(raw, Mapping) else None
            if not isinstance(index, int) or isinstance(index, bool) or not isinstance(fn, Mapping):
                raise ChatError("a stream chunk's tool call is not an object with an integer index")
            call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
            call["id"] = raw.get("id") or call["id"]
            call["name"] = call["name"] or str(fn.get("name") or "")
            call["arguments"] += arguments_text(fn.get("arguments"))
        text = delta.get("content")
        if isinstance(text, str) and text:
            self.content.append(text)
            return text
        return ""

    def completion(self, ids: Mapping[int, str] | None = None) -> Completion:
        """The answer; ``ids``: the call ids the client was shown, by index (those it was shown win,
        and one the endpoint never sent is made up)."""
        calls = []
        for index, c in sorted(self.calls.items()):
            if not c["name"]:
                raise ChatError("the endpoint streamed a tool call without a function name")
            call_id = (ids or {}).get(index) or c["id"] or new_call_id()
            calls.append(ToolCall(str(call_id), c["name"], c["arguments"] or "{}"))
        raw: dict[str, Any] = {"usage": dict(self.usage)} if self.usage else {}
        if self.model:
            raw["model"] = self.model
        content = "".join(self.content) if self.content else None
        return Completion(content, calls, self.finish_reason, raw)


class ChatClient:
    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        retry_after_max_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        base = base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV, "")
        self.url = endpoint(base)
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.retry_after_max_s = retry_after_max_s
        self._sleep = sleep
        self._rand = rand
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s), headers=headers, transport=transport
        )

    def complete(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] = (),
        **options: Any,
    ) -> Completion:
        body: dict[str, Any] = {"model": model, "messages": list(messages), **options}
        if tools:
            body["tools"] = list(tools)
        return post_retrying(
            self._http, self.url, body, attempts=self.max_retries + 1, retry=self._retry, parse=_completion
        )

    def _retry(self, attempt: int, error: ChatError, wait: float | None) -> None:
        error.attempts = attempt + 1
        if attempt == self.max_retries:
            raise error
        delay = backoff_s(attempt, self.backoff_base_s, self.backoff_max_s, self._rand)
        self._sleep(min(self.retry_after_max_s, wait) if wait is not None else delay)

    def stream(
        self,
        *,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] = (),
        **options: Any,
    ) -> Generator[Mapping[str, Any], None, Completion]:
        """Yield each chunk of a streamed answer; return the whole completion."""
        body: dict[str, Any] = {"model": model, "messages": list(messages), "stream": True, **options}
        if tools:
            body["tools"] = list(tools)
        return (
            yield from stream_retrying(
                self._http, self.url, body, attempts=self.max_retries + 1, retry=self._retry, read=self._chunks
            )
        )

    @staticmethod
    def _chunks(response: httpx.Response) -> Generator[Mapping[str, Any], None, Completion]:
        acc = StreamAccumulator()
        try:
            for line in _event_data(response.iter_lines()):
                if line == "[DONE]":
                    break
                try:
                    chunk = jsontext.loads(line)
                except ValueError:
                    raise ChatError("a stream chunk is not JSON") from None
                if not isinstance(chunk, Mapping):
                    raise ChatError("a stream chunk is not an object")
                acc.add(chunk)
                yield chunk
        except httpx.HTTPError as exc:  # cut off mid-answer: not retried, part of it was delivered
            raise ChatError(f"the endpoint's stream broke off: {exc}", retryable=True) from None
        return acc.completion()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
