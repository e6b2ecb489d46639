"""A small client for any OpenAI-compatible ``/v1/chat/completions`` endpoint (httpx).

Retries with exponential backoff and jitter on 429, 5xx, timeouts and connection failures
(honouring ``Retry-After``, capped); any other 4xx is the request's fault and is raised at once.
The base URL and API key default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` from the
environment. The one I/O seam is the httpx transport, which tests may replace; the loop's own
tests use a real local HTTP server instead.

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

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
        args = fn.get("arguments", "{}")
        # Some servers send arguments as an object, some leave out call ids; normalise both.
        text = args if isinstance(args, str) else json.dumps(args)
        call_id = raw.get("id") or "call_" + uuid.uuid4().hex[:24]
        calls.append(ToolCall(str(call_id), fn["name"], text))
    return Completion(content, calls, choice.get("finish_reason"), data)


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
        for attempt in range(self.max_retries + 1):
            wait: float | None = None
            try:
                response = self._http.post(self.url, json=body)
            except httpx.TimeoutException as exc:
                error = ChatError(f"the endpoint timed out ({type(exc).__name__})", retryable=True)
            except httpx.TransportError as exc:
                error = ChatError(f"the endpoint could not be reached: {exc}", retryable=True)
            else:
                if response.is_success:
                    try:
                        return parse_completion(response.json())
                    except ValueError:
                        raise ChatError("the endpoint's answer is not JSON", status=response.status_code) from None
                status = response.status_code
                retryable = status == 429 or status >= 500
                error = ChatError(f"the endpoint answered HTTP {status}: {response.text[:300]}", status=status)
                error.retryable = retryable
                if not retryable:
                    raise error
                wait = retry_after_s(response)
            error.attempts = attempt + 1
            if attempt == self.max_retries:
                raise error
            delay = backoff_s(attempt, self.backoff_base_s, self.backoff_max_s, self._rand)
            self._sleep(min(self.retry_after_max_s, wait) if wait is not None else delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
