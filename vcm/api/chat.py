"""Talking to an agent through vcm: what the chat routes (:mod:`vcm.api.routes.chat`) take and
answer, the upstream model, and the OpenAI wire format of the proxy route.

Both chat routes call the model configured in ``[chat]`` with the context builder's prompt
(:mod:`vcm.service.context`): the hot context plus identity, state, sticky facts, relevant memory
and skills. While the model generates, the in-process cold path waits (:data:`vcm.dispatch.COLD_PATH`).

``/v1/chat/completions``: the agent is the bearer token's (or, with the admin token, the one the
``X-VCM-Agent`` header names). The client sends its whole conversation each time, as OpenAI
clients do; vcm lands it in the agent's memory by the history rule (:mod:`vcm.api.proxy`) and
the upstream model sees vcm's assembled context instead of the raw history. Its tools and every
option vcm does not own (``model``, ``messages``, ``stream``, ``tools``) are passed through, and
the upstream's answer, chunks and errors come back as the upstream sent them, but for the
memory tags (vcm runs only its own tools, in ``/chat``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.background import BackgroundTask

from vcm import jsontext
from vcm.agent.loop import TurnResult
from vcm.api.auth import Principal
from vcm.api.models import ERROR_RESPONSES, ErrorOut, RequestBody
from vcm.errors import LlmRejected, LlmUnavailable, NotFound, ValidationError, VcmError
from vcm.facts.capture import TagFilter, shown
from vcm.hotpath.turns import Turn
from vcm.llm import ChatClient, ChatError, arguments_text, new_call_id
from vcm.llm_anthropic import MessagesClient
from vcm.settings import ChatSettings


class ChatIn(RequestBody):
    message: str = Field(min_length=1, description="the user's message")
    name: str | None = Field(None, max_length=64, description="the user's name, as the FIFO records it")
    stream: bool = Field(False, description="answer as server-sent events: delta, tool_result, done (or error)")
    idempotency_key: str | None = Field(
        None,
        description="Same as the Idempotency-Key header: a retry with the same key answers the first turn's result "
        "(replayed, the model not called again); a retry of a turn that failed runs it without appending the "
        "message twice.",
    )


class ChatOut(BaseModel):
    agent_id: str
    reply: str | None = Field(description="the model's last text (null when the turn ended on tool calls)")
    stop: str = Field(description="answer | yield | heartbeat_end | max_steps")
    steps: int
    depth: int = Field(description="heartbeats run in this turn")
    heartbeat_end: str | None
    usage: dict[str, int] = Field(description="token usage the model reported, summed over the steps")
    tool_calls: list[dict[str, Any]] = Field(description="the tool calls the turn made, with their results")
    replayed: bool = Field(False, description="the recorded answer of an earlier turn under the same idempotency key")

    @classmethod
    def of(cls, agent_id: str, r: TurnResult) -> ChatOut:
        return cls(
            agent_id=agent_id, reply=r.final, stop=r.stop, steps=r.steps, depth=r.depth,
            heartbeat_end=r.heartbeat_end, usage=dict(r.usage), tool_calls=[t.as_dict() for t in r.tool_results],
            replayed=r.replayed,
        )  # fmt: skip


class CompletionIn(RequestBody):
    """An OpenAI chat-completions request; options vcm does not use are passed through. Strict as
    every request body is (``"stream": "yes"`` is no boolean), and what it passes on must be JSON
    (no NaN, no lone surrogate): the upstream could not be sent it."""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field("", max_length=200)
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=10_000)
    stream: bool = False
    tools: list[dict[str, Any]] | None = None


class CompletionOut(BaseModel):
    """The OpenAI chat-completion object."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, Any] | None = None


class StatsOut(BaseModel):
    agent_id: str
    model: str
    window: int
    tokens: int
    tokens_by_layer: dict[str, int]
    fifo_messages: int
    messages_stored: int
    archival_chunks: int
    evictions: int = Field(description="eviction batches committed to the store")
    pending_batches: int = Field(description="eviction batches begun and not yet committed")
    facts: dict[str, Any]
    state_keys: int
    last_activity: float | None = Field(description="time of the newest message in the FIFO")


class Upstream:
    """The configured model, built on first use (a server without one still serves the rest)."""

    def __init__(self, settings: ChatSettings, factory: Callable[[ChatSettings], ChatClient] | None = None) -> None:
        self.settings = settings
        self._factory = factory or _client_of
        self._client: ChatClient | None = None
        self._messages: MessagesClient | None = None

    def client(self) -> ChatClient:
        if not self.settings.base_url:
            raise LlmUnavailable("no model is configured: set [chat] base_url (VCM_CHAT__BASE_URL)")
        if self._client is None:
            self._client = self._factory(self.settings)
        return self._client

    def messages_client(self) -> MessagesClient:
        """The Anthropic-compatible endpoint of ``/v1/messages``."""
        if not self.settings.anthropic_base_url:
            raise LlmUnavailable(
                "no Anthropic-compatible model is configured: set [chat] anthropic_base_url"
                " (VCM_CHAT__ANTHROPIC_BASE_URL)"
            )
        if self._messages is None:
            import os

            s = self.settings
            self._messages = MessagesClient(
                s.anthropic_base_url, api_key=os.environ.get(s.anthropic_api_key_env, ""), version=s.anthropic_version,
                timeout_s=s.timeout_s, max_retries=s.max_retries,
            )  # fmt: skip
        return self._messages


def _client_of(settings: ChatSettings) -> ChatClient:
    import os

    return ChatClient(
        settings.base_url,
        api_key=os.environ.get(settings.api_key_env, ""),
        timeout_s=settings.timeout_s,
        max_retries=settings.max_retries,
    )


def coded(exc: ChatError) -> VcmError:
    """The model's failure as vcm's coded error."""
    if exc.retryable:
        return LlmUnavailable(exc.message, upstream_status=exc.status, attempts=exc.attempts)
    return LlmRejected(exc.message, upstream_status=exc.status)


# The chat routes also answer the model's failures.
ERRORS: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    409: {"model": ErrorOut, "description": "CONFLICT: a turn of this agent is still running (waited turn_wait_s)"},
    502: {"model": ErrorOut, "description": "LLM_REJECTED: the model refused the request or answered garbage"},
    503: {"model": ErrorOut, "description": "LLM_UNAVAILABLE (no model configured, or it failed), STORE_UNAVAILABLE"},
}


def sse(event: str, data: Mapping[str, Any]) -> str:
    # line_safe: a client reading lines with str.splitlines (httpx's iter_lines) cut a frame whose
    # text held U+2028 in two.
    return f"event: {event}\ndata: {jsontext.line_safe(json.dumps(data, ensure_ascii=False))}\n\n"


def streamed(
    body: Generator[str, None, None], held: Turn, headers: Mapping[str, str] | None = None
) -> StreamingResponse:
    """Server-sent events from ``body``, which holds the agent's turn while it runs. After the
    response (sent, failed, or the client gone) the generator is closed, which ends the turn under
    its lock, and the turn is freed; one still running in its thread frees it when it ends."""

    def finish() -> None:
        try:
            body.close()
        except ValueError:  # "generator already executing": its own ``with`` releases the turn
            return
        held.release()

    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", **(headers or {})},
        background=BackgroundTask(finish),
    )


def agent_named(who: Principal, header: str | None) -> str:
    """The agent of a ``/v1/chat/completions`` request: the token's, or the admin's choice."""
    if who.admin:
        if not header:
            raise ValidationError("with the admin token, name the agent in the X-VCM-Agent header", field="X-VCM-Agent")
        return header
    if header is not None and header != who.agent_id:
        raise NotFound(f"agent {header!r} not found", resource="agent")
    assert who.agent_id is not None
    return who.agent_id


# --- the OpenAI wire format: the upstream's answer as the client gets it ------------------------------
def shown_completion(
    raw: Mapping[str, Any], model: str, calls: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The upstream's chat completion relayed as it came (every choice, logprobs, usage, the
    fields vcm does not know), but for each message's memory tags, the model the client named,
    and ``calls``: choice 0's tool calls as memory keeps them (an endpoint that left out an id
    or sent arguments as an object gets the API's form), so the client's echo is recognised."""
    out = {"id": "chatcmpl-vcm-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
           **{k: v for k, v in raw.items()}, "model": model}  # fmt: skip
    choices = []
    for i, choice in enumerate(raw.get("choices") or []):
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if isinstance(message, Mapping) and isinstance(message.get("content"), str):
            message = {**message, "content": shown(message["content"])}
        if isinstance(message, Mapping) and i == 0 and calls and message.get("tool_calls"):
            message = {**message, "tool_calls": [dict(c) for c in calls]}
        if isinstance(message, Mapping):
            choice = {**choice, "message": message}
        choices.append(choice)
    out["choices"] = choices
    return out


class ChunkRelay:
    """Streamed chunks relayed as they came but for the memory tags in their content, taken out
    per choice (a tag cut across deltas included, held back until it is known). What choice 0
    showed is kept: the reply is stored under the key the client's next request will carry."""

    def __init__(self, cid: str, created: int, model: str) -> None:
        self.head = {"id": cid, "created": created, "model": model}
        self.tags: dict[int, TagFilter] = {}
        self.shown: list[str] = []  # choice 0's text, as the client got it
        self.call_ids: dict[int, str] = {}  # choice 0's tool call ids, as the client got them

    def relay(self, chunk: Mapping[str, Any]) -> dict[str, Any]:
        out = {**chunk, **self.head}
        choices = chunk.get("choices")
        if isinstance(choices, list):
            out["choices"] = [self._choice(c) if isinstance(c, Mapping) else c for c in choices]
        return out

    def _choice(self, choice: Mapping[str, Any]) -> Mapping[str, Any]:
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            return choice
        index = choice.get("index", 0)
        index = index if isinstance(index, int) else 0
        if index == 0 and isinstance(delta.get("tool_calls"), list):
            delta = {
                **delta,
                "tool_calls": [self._call(p) if isinstance(p, Mapping) else p for p in delta["tool_calls"]],
            }
            choice = {**choice, "delta": delta}
        tags = self.tags.setdefault(index, TagFilter())
        text = delta.get("content")
        if not isinstance(text, str) and not choice.get("finish_reason"):
            return choice
        shown_text = tags.feed(text) if isinstance(text, str) else ""
        if choice.get("finish_reason"):
            shown_text += tags.end()  # the choice ends: what was held back is no tag
        if index == 0:
            self.shown.append(shown_text)
        if not isinstance(text, str) and not shown_text:
            return choice
        return {**choice, "delta": {**delta, "content": shown_text}}

    def _call(self, piece: Mapping[str, Any]) -> Mapping[str, Any]:
        """A tool call piece of choice 0 as the client gets it: the call's first piece carries an
        id (one is made up when the endpoint sent none, and later pieces keep to it), and
        arguments are JSON text. The stored reply carries the same, so the echo is recognised."""
        index = piece.get("index", len(self.call_ids))
        if not isinstance(index, int):
            return piece  # the accumulator refuses it
        out = dict(piece)
        fn = piece.get("function")
        if isinstance(fn, Mapping) and "arguments" in fn and not isinstance(fn["arguments"], str):
            out["function"] = {**fn, "arguments": arguments_text(fn["arguments"])}
        given = piece.get("id")
        if index not in self.call_ids:
            self.call_ids[index] = given if isinstance(given, str) and given.strip() else new_call_id()
            out["id"] = self.call_ids[index]
        elif given is not None:
            out["id"] = self.call_ids[index]
        return out

    def rest(self) -> dict[str, Any] | None:
        """A last chunk with what is still held back, when the stream ended without a finish reason."""
        held = {i: t.end() for i, t in self.tags.items()}
        choices = [{"index": i, "delta": {"content": text}} for i, text in sorted(held.items()) if text]
        if not choices:
            return None
        self.shown.append(held.get(0, ""))
        return {"object": "chat.completion.chunk", **self.head, "choices": choices}


def answer_of(out: Mapping[str, Any], headers: Mapping[str, str]) -> JSONResponse:
    """The upstream's answer as the client gets it, rendered before anything of it is kept: an
    answer JSON cannot carry (NaN, Infinity, which Python's reader takes) is the model's garbage,
    LLM_REJECTED, not a failure of vcm's."""
    try:
        return JSONResponse(out, headers=dict(headers))
    except ValueError:
        raise LlmRejected("the model's answer holds NaN or Infinity, which JSON cannot carry") from None


def no_stream() -> LlmRejected:
    """A streamed answer without a single chunk (a 200 that is not a stream at all)."""
    return LlmRejected("the model's streamed answer held no event", upstream_status=200)


def relayed_error(exc: ChatError) -> Response:
    """The upstream's refusal as the client would have had it from the upstream itself: its
    status and body. A failure without an answer (timeout, network) is vcm's coded error."""
    if exc.status is None or exc.body is None:
        raise coded(exc) from None
    if isinstance(exc.body, bytes):
        return Response(exc.body, status_code=exc.status, media_type=exc.media_type or "text/plain")
    return JSONResponse(exc.body, status_code=exc.status)
