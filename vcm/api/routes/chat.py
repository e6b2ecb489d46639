"""Talking to an agent through vcm: ``POST /v1/agents/{id}/chat`` (one turn of the agent loop,
with vcm's memory tools and heartbeats), the OpenAI-compatible ``POST /v1/chat/completions`` (any
OpenAI SDK client gets virtual context without code changes) and ``GET /v1/agents/{id}/stats``.

What they take and answer, the upstream model and the reconciling of an OpenAI client's history
with the agent's memory are :mod:`vcm.api.chat`'s.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

import itertools
import json
import time
import uuid
from collections.abc import Generator, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Header

from vcm.agent.loop import AgentLoop, wire_messages
from vcm.api.auth import Principal
from vcm.api.chat import (
    ERRORS,
    ChatIn,
    ChatOut,
    ChunkRelay,
    CompletionIn,
    CompletionOut,
    StatsOut,
    Upstream,
    agent_named,
    answer_of,
    coded,
    no_stream,
    relayed_error,
    shown_completion,
    sse,
    streamed,
)
from vcm.api.deps import Agent, Anyone, ExecutorDep, IdemHeader, ServiceDep, ToolRunner, UpstreamDep, one_key
from vcm.api.models import ERROR_RESPONSES, AgentId
from vcm.api.proxy import keep_reply, reconcile, reply_key
from vcm.dispatch import COLD_PATH
from vcm.errors import LlmUnavailable, ValidationError, VcmError
from vcm.facts.capture import shown
from vcm.hotpath.turns import Turn
from vcm.llm import ChatClient, ChatError, StreamAccumulator
from vcm.service import MemoryService
from vcm.tools.executor import ToolExecutor

router = APIRouter(tags=["chat"])


@router.post("/v1/agents/{agent_id}/chat", response_model=ChatOut, responses=ERRORS)
def chat(
    agent_id: AgentId,
    body: ChatIn,
    who: Agent,
    service: ServiceDep,
    executor: ExecutorDep,
    upstream: UpstreamDep,
    idem: IdemHeader = None,
) -> Any:
    """One turn of the agent loop: the message is appended, the model answers over the built
    context with vcm's memory tools (heartbeats chain further steps), the reply is appended
    and its memory tags are kept. ``stream``: server-sent events as the model writes.
    ``Idempotency-Key``: a retry answers the first turn's result (``replayed``; streamed, as
    its ``done`` event alone), see :meth:`AgentLoop.claim`."""
    limit = upstream.settings.max_message_chars
    if len(body.message) > limit:
        raise ValidationError(f"message is longer than {limit} characters", field="message", limit=limit)
    key = one_key(idem, body.idempotency_key)
    loop = _loop(service, executor, upstream, who)
    if not body.stream:
        try:
            with service.turn(agent_id), COLD_PATH.generating():
                claimed = loop.claim(agent_id, body.message, name=body.name, idempotency_key=key) if key else None
                result = loop.run_turn(agent_id, body.message, name=body.name, claimed=claimed)
        except ChatError as exc:
            raise coded(exc) from None
        return ChatOut.of(agent_id, result)
    held = service.turn(agent_id)  # before the 200: a busy agent is a CONFLICT, not an event
    try:  # so is a key used for another message
        claimed = loop.claim(agent_id, body.message, name=body.name, idempotency_key=key) if key else None
    except BaseException:
        held.release()
        raise

    def events() -> Generator[str, None, None]:
        with held, COLD_PATH.generating():
            turn = loop.turn(agent_id, body.message, name=body.name, stream=True, claimed=claimed)
            try:
                while True:
                    try:
                        event = next(turn)
                    except StopIteration as end:
                        yield sse("done", ChatOut.of(agent_id, end.value).model_dump())
                        return
                    yield sse(str(event["type"]), {k: v for k, v in event.items() if k != "type"})
            except ChatError as exc:
                yield sse("error", coded(exc).to_dict())
            except VcmError as exc:
                yield sse("error", exc.to_dict())
            finally:
                turn.close()  # a client gone mid-turn: the turn ends here, under its lock

    return streamed(events(), held)


@router.get("/v1/agents/{agent_id}/stats", response_model=StatsOut, responses=ERROR_RESPONSES)
def stats(agent_id: AgentId, who: Agent, service: ServiceDep) -> StatsOut:
    """Tokens by layer, counts, evictions, facts and last activity of one agent."""
    return StatsOut.model_validate(service.agent_stats(agent_id))


@router.post("/v1/chat/completions", response_model=CompletionOut, responses=ERRORS)
def completions(
    body: CompletionIn,
    who: Anyone,
    service: ServiceDep,
    upstream: UpstreamDep,
    x_vcm_agent: Annotated[str | None, Header(max_length=128)] = None,
) -> Any:
    """OpenAI-compatible chat completions over the agent's virtual context (see :mod:`vcm.api.chat`
    and the history rule of :mod:`vcm.api.proxy`)."""
    agent_id = agent_named(who, x_vcm_agent)
    service.agent(agent_id)
    client = upstream.client()
    held = service.turn(agent_id)
    try:  # until the turn is handed to the response, any failure frees it
        return _complete(service, upstream, agent_id, body, who, client, held)
    except BaseException:
        held.release()
        raise


def _loop(service: MemoryService, executor: ToolRunner | None, upstream: Upstream, who: Principal) -> AgentLoop:
    # The loop runs vcm's tools through the executor proper (heartbeats governed per step), which
    # a stand-in runner does not offer.
    if not isinstance(executor, ToolExecutor):
        raise LlmUnavailable("this server runs no tool executor, so it cannot run agent turns")
    return AgentLoop(service, executor, upstream.client(), model=upstream.settings.model or None, actor=who.actor)


def _complete(
    service: MemoryService,
    upstream: Upstream,
    agent_id: str,
    body: CompletionIn,
    who: Principal,
    client: ChatClient,
    held: Turn,
) -> Any:
    history = reconcile(service, agent_id, body.messages, who.actor, upstream.settings.max_message_chars)
    context = service.build_context(agent_id, query=history.query)
    options = dict(body.model_extra or {})  # every option vcm does not own goes upstream as given
    model = upstream.settings.model or body.model or service.agent(agent_id).model
    request_model = body.model or model
    messages = wire_messages(context.messages)
    tools = body.tools or ()
    if not body.stream:
        with held:
            try:
                with COLD_PATH.generating():
                    completion = client.complete(model=model, messages=messages, tools=tools, **options)
            except ChatError as exc:
                return relayed_error(exc)
            calls = [c.wire() for c in completion.tool_calls]
            answer = answer_of(shown_completion(completion.raw, request_model, calls), history.header)
            reply = {"role": "assistant", "content": shown(completion.content or ""), "tool_calls": calls}
            key = reply_key(body.messages, reply)
            keep_reply(service, agent_id, completion.content, calls, key, who.actor)
        return answer

    relay = ChunkRelay("chatcmpl-vcm-" + uuid.uuid4().hex[:24], int(time.time()), request_model)
    stream = client.stream(model=model, messages=messages, tools=tools, **options)
    try:  # the first chunk before the 200: a refused request is relayed with its status and body
        with COLD_PATH.generating():
            first: Mapping[str, Any] = next(stream)
    except ChatError as exc:
        held.release()
        return relayed_error(exc)
    except StopIteration:
        raise no_stream() from None

    def chunks() -> Generator[str, None, None]:
        with held:
            with COLD_PATH.generating():
                acc = StreamAccumulator()
                try:
                    for chunk in itertools.chain([first], stream):
                        acc.add(chunk)
                        yield "data: " + json.dumps(relay.relay(chunk)) + "\n\n"
                except ChatError as exc:
                    yield "data: " + json.dumps({"error": coded(exc).to_dict()}) + "\n\n"
                    return
                rest = relay.rest()
                if rest is not None:
                    yield "data: " + json.dumps(rest) + "\n\n"
            completion = acc.completion(relay.call_ids)
            calls = [c.wire() for c in completion.tool_calls]
            reply = {"role": "assistant", "content": "".join(relay.shown), "tool_calls": calls}
            keep_reply(service, agent_id, completion.content, calls, reply_key(body.messages, reply), who.actor)
        yield "data: [DONE]\n\n"

    return streamed(chunks(), held, headers=history.header)
