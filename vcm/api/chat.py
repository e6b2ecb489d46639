"""Talking to an agent through vcm: what the chat routes (:mod:`vcm.api.routes.chat`) take and
answer, the upstream model, and the OpenAI-compatible route's reconciling of the client's history
with the agent's memory.

Both chat routes call the model configured in ``[chat]`` with the context builder's prompt
(:mod:`vcm.service.context`): the hot context plus identity, state, sticky facts, relevant memory
and skills. While the model generates, the in-process cold path waits (:data:`vcm.dispatch.COLD_PATH`).

``/v1/chat/completions``: the agent is the bearer token's (or, with the admin token, the one the
``X-VCM-Agent`` header names). The client sends its whole conversation each time, as OpenAI
clients do; vcm appends each of its messages to the agent once — keyed by a fingerprint of the
message and how many identical messages precede it, so a resent history appends nothing twice —
and the upstream model sees vcm's assembled context instead of the raw history. The client's
``system`` messages are left out (the agent's own system prompt and blocks rule), its tools are
passed through and their calls come back to it (vcm runs only its own tools, in ``/chat``). The
reply is appended to the agent under the key the client's next request will carry for it.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any

from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.background import BackgroundTask

from vcm.agent.loop import TurnResult
from vcm.api.auth import Principal
from vcm.api.models import ERROR_RESPONSES, ErrorOut
from vcm.errors import LlmRejected, LlmUnavailable, NotFound, ValidationError, VcmError
from vcm.hotpath.turns import Turn
from vcm.llm import ChatClient, ChatError, Completion
from vcm.service import MemoryService
from vcm.settings import ChatSettings

# Request options passed through to the upstream model as the client gave them.
PASSTHROUGH = ("temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "tool_choice",
               "parallel_tool_calls", "response_format", "presence_penalty", "frequency_penalty", "user")  # fmt: skip


class ChatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, description="the user's message")
    name: str | None = Field(None, max_length=64, description="the user's name, as the FIFO records it")
    stream: bool = Field(False, description="answer as server-sent events: delta, tool_result, done (or error)")


class ChatOut(BaseModel):
    agent_id: str
    reply: str | None = Field(description="the model's last text (null when the turn ended on tool calls)")
    stop: str = Field(description="answer | yield | heartbeat_end | max_steps")
    steps: int
    depth: int = Field(description="heartbeats run in this turn")
    heartbeat_end: str | None
    usage: dict[str, int] = Field(description="token usage the model reported, summed over the steps")
    tool_calls: list[dict[str, Any]] = Field(description="the tool calls the turn made, with their results")

    @classmethod
    def of(cls, agent_id: str, r: TurnResult) -> ChatOut:
        return cls(
            agent_id=agent_id, reply=r.final, stop=r.stop, steps=r.steps, depth=r.depth,
            heartbeat_end=r.heartbeat_end, usage=dict(r.usage), tool_calls=[t.as_dict() for t in r.tool_results],
        )  # fmt: skip


class CompletionIn(BaseModel):
    """An OpenAI chat-completions request; options vcm does not use are passed through or ignored."""

    model_config = ConfigDict(extra="allow")

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

    def client(self) -> ChatClient:
        if not self.settings.base_url:
            raise LlmUnavailable("no model is configured: set [chat] base_url (VCM_CHAT__BASE_URL)")
        if self._client is None:
            self._client = self._factory(self.settings)
        return self._client


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
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def streamed(body: Generator[str, None, None], held: Turn) -> StreamingResponse:
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
        body, media_type="text/event-stream", headers={"Cache-Control": "no-store"}, background=BackgroundTask(finish)
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


# --- reconciling the client's history with the agent's memory (pure but for the appends) -------------
def fingerprint(message: Mapping[str, Any]) -> str:
    """What identifies a client message: role, name, content, tool call id and tool calls."""
    parts = [message.get("role"), message.get("name"), _text(message.get("content")), message.get("tool_call_id"),
             json.dumps(message.get("tool_calls") or [], sort_keys=True)]  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def keys_of(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """An idempotency key per message: its fingerprint and how many identical ones came before,
    so "ok" said twice is two messages, and the same history resent is the same keys."""
    seen: dict[str, int] = {}
    out = []
    for m in messages:
        fp = fingerprint(m)
        out.append(f"oai:{fp}:{seen.get(fp, 0)}")
        seen[fp] = seen.get(fp, 0) + 1
    return out


def reply_key(messages: Sequence[Mapping[str, Any]]) -> Callable[[Mapping[str, Any]], str]:
    """The key the reply will carry when the client sends it back in its next request."""

    def key(reply: Mapping[str, Any]) -> str:
        fp = fingerprint(reply)
        return f"oai:{fp}:{sum(1 for m in messages if fingerprint(m) == fp)}"

    return key


def reconcile(
    service: MemoryService, agent_id: str, messages: Sequence[Mapping[str, Any]], actor: str, limit: int
) -> str:
    """Append the client's messages the agent does not hold yet; the latest user text. Every
    message is checked before the first is appended, so a bad one changes nothing."""
    checked: list[tuple[Mapping[str, Any], str, str]] = []
    for m in messages:
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise ValidationError(f"unknown message role {role!r}", field="messages")
        content = _text(m.get("content"))
        if len(content) > limit:
            raise ValidationError(f"a message is longer than {limit} characters", field="messages", limit=limit)
        checked.append((m, str(role), content))
    latest = ""
    for (m, role, content), key in zip(checked, keys_of(messages), strict=True):
        if role in ("system", "developer"):
            continue  # the agent's own system prompt and blocks rule its context
        if role == "user":
            latest = content
        service.append(
            agent_id, role, content, name=m.get("name"), tool_call_id=m.get("tool_call_id"),
            tool_calls=m.get("tool_calls") or None, idempotency_key=key, actor=actor,
        )  # fmt: skip
    return latest


def keep_reply(
    service: MemoryService, agent_id: str, completion: Completion, key: Callable[[Mapping[str, Any]], str], actor: str
) -> None:
    message = _reply_message(completion)
    if not message.get("content") and not message.get("tool_calls"):
        return
    service.append(
        agent_id, "assistant", str(message.get("content") or ""), tool_calls=message.get("tool_calls"),
        idempotency_key=key(message), actor=actor,
    )  # fmt: skip


def _reply_message(completion: Completion) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": completion.content}
    if completion.tool_calls:
        message["tool_calls"] = [c.wire() for c in completion.tool_calls]
    return message


def completion_json(completion: Completion, model: str) -> dict[str, Any]:
    finish = completion.finish_reason or ("tool_calls" if completion.tool_calls else "stop")
    out: dict[str, Any] = {
        "id": "chatcmpl-vcm-" + uuid.uuid4().hex[:24],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": _reply_message(completion), "finish_reason": finish}],
    }
    usage = completion.raw.get("usage")
    if isinstance(usage, Mapping):
        out["usage"] = dict(usage)
    return out


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    raise ValidationError("message content must be text or a list of content parts", field="messages")
