"""The memory proxy in the Anthropic Messages wire format: ``POST /v1/messages``. Any Anthropic
SDK client gets the agent's virtual context without code changes: its base URL is vcm, its API
key the agent's token (sent as ``x-api-key``, or as a bearer token); with the admin token the
``X-VCM-Agent`` header names the agent. The upstream is the Anthropic-compatible endpoint of
``[chat] anthropic_base_url``. The history rule and the memory tags are :mod:`vcm.api.proxy`'s,
the wire format :mod:`vcm.api.anthropic`'s.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

import itertools
from collections.abc import Generator, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Header
from pydantic import BaseModel, ConfigDict, Field

from vcm.agent.loop import wire_messages
from vcm.api.anthropic import EventRelay, assistant_message, convert, request_of, shown_message, written_text
from vcm.api.auth import Principal
from vcm.api.chat import ERRORS, Upstream, agent_named, answer_of, no_stream, relayed_error, sse, streamed
from vcm.api.deps import AnyoneByApiKey, ServiceDep, UpstreamDep
from vcm.api.models import RequestBody
from vcm.api.proxy import keep_reply, reconcile, reply_key
from vcm.dispatch import COLD_PATH
from vcm.hotpath.turns import Turn
from vcm.llm import ChatError
from vcm.llm_anthropic import MessagesClient
from vcm.service import MemoryService

router = APIRouter(tags=["chat"])
# Request headers the upstream needs to read the request as the client meant it.
FORWARDED = ("anthropic-beta",)


class MessagesIn(RequestBody):
    """A Messages API request; every field vcm does not use is passed through. Strict, and JSON
    all through, as :class:`vcm.api.chat.CompletionIn` is."""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = Field(min_length=1, max_length=200)
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=10_000)
    system: str | list[dict[str, Any]] | None = Field(
        None, description="left out, as an OpenAI client's system messages are: the agent's own prompt rules"
    )
    stream: bool = False
    tools: list[dict[str, Any]] | None = None


class MessageOut(BaseModel):
    """The Messages API message, as the upstream answered it (memory tags taken out)."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: str = "message"
    role: str = "assistant"
    model: str
    content: list[dict[str, Any]]


@router.post("/v1/messages", response_model=MessageOut, responses=ERRORS)
def messages(
    body: MessagesIn,
    who: AnyoneByApiKey,
    service: ServiceDep,
    upstream: UpstreamDep,
    x_vcm_agent: Annotated[str | None, Header(max_length=128)] = None,
    anthropic_beta: Annotated[str | None, Header(max_length=1000)] = None,
) -> Any:
    """Anthropic Messages over the agent's virtual context (see the module)."""
    agent_id = agent_named(who, x_vcm_agent)
    service.agent(agent_id)
    client = upstream.messages_client()
    held = service.turn(agent_id)
    headers = {"anthropic-beta": anthropic_beta} if anthropic_beta else {}
    try:  # until the turn is handed to the response, any failure frees it
        return _answer(service, upstream, agent_id, body, who, client, held, headers)
    except BaseException:
        held.release()
        raise


def _answer(
    service: MemoryService,
    upstream: Upstream,
    agent_id: str,
    body: MessagesIn,
    who: Principal,
    client: MessagesClient,
    held: Turn,
    headers: Mapping[str, str],
) -> Any:
    history = convert(body.messages)
    kept = reconcile(service, agent_id, history.messages, who.actor, upstream.settings.max_message_chars, prefix="ant")
    context = service.build_context(agent_id, query=kept.query)
    system, turns = request_of(wire_messages(context.messages), history.raw)
    model = upstream.settings.anthropic_model or body.model
    request: dict[str, Any] = {**(body.model_extra or {}), "model": model, "messages": turns}
    if system:
        request["system"] = system
    if body.tools is not None:
        request["tools"] = body.tools

    def keep(written: str, blocks: list[Any]) -> None:
        reply = assistant_message([b for b in blocks if isinstance(b, Mapping)])
        key = reply_key(history.messages, reply, prefix="ant")
        keep_reply(service, agent_id, written, reply.get("tool_calls"), key, who.actor)

    if not body.stream:
        with held:
            try:
                with COLD_PATH.generating():
                    answer = client.create(request, headers)
            except ChatError as exc:
                return relayed_error(exc)
            out = shown_message(answer, body.model)
            response = answer_of(out, kept.header)
            keep(written_text(answer), out["content"])
        return response

    relay = EventRelay(body.model)
    stream = client.stream(request, headers)
    try:  # the first event before the 200: a refused request is relayed with its status and body
        with COLD_PATH.generating():
            first: list[tuple[str, dict[str, Any]]] = [next(stream)]
    except ChatError as exc:
        held.release()
        return relayed_error(exc)
    except StopIteration:
        raise no_stream() from None

    def events() -> Generator[str, None, None]:
        with held:
            with COLD_PATH.generating():
                try:
                    for name, data in itertools.chain(first, stream):
                        for event, relayed in relay.relay(name, data):
                            yield sse(event, relayed)
                except ChatError as exc:
                    yield sse("error", {"type": "error", "error": {"type": "api_error", "message": exc.message}})
                    return
            keep("".join(relay.written), relay.message())

    return streamed(events(), held, headers=kept.header)
