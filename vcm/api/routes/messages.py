"""The main context: append a message, read the assembled (or built) context, evict now.

The append is the hot path's busiest route: it runs on the event loop for a short message, with
its token checked inside its one Lua call (see :func:`append_message`).

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from vcm.api.deps import Agent, IdemHeader, ServiceDep, TokenChecked, one_key
from vcm.api.models import (
    ERROR_RESPONSES,
    WRITE_ERROR_RESPONSES,
    AgentId,
    AppendManyOut,
    AppendOut,
    BatchOut,
    ContextOut,
    EvictIn,
    EvictOut,
    MessageIn,
    MessagesIn,
)

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["memory"])

# Longest message content appended on the event loop (see append_message): ~4k tokens, about a
# millisecond of counting.
INLINE_APPEND_CHARS = 16_000


@router.post("/messages", response_model=AppendOut, responses=WRITE_ERROR_RESPONSES)
async def append_message(
    agent_id: AgentId, body: MessageIn, who: TokenChecked, service: ServiceDep, idem: IdemHeader = None
) -> AppendOut:
    """Append a message to the FIFO: one Redis round trip (the token check, the agent, the
    idempotency key and the budget decision are one Lua call); the cold-path work it starts
    is published in the background."""
    append = partial(
        service.append,
        agent_id,
        body.role,
        body.content,
        name=body.name,
        pinned=body.pinned,
        metadata=body.metadata,
        tool_call_id=body.tool_call_id,
        tool_calls=body.tool_calls,
        idempotency_key=one_key(idem, body.idempotency_key),
        actor=who.principal.actor,
        token_sha256=who.token_sha256,
        created_at=body.said_at(),
    )
    # A short message is appended on the event loop: counting it and the one Redis call take
    # a fraction of a millisecond, less than handing it to the thread pool and back (two
    # thread switches, which on a busy 2-core machine cost more than the append). A long
    # one (counting 400k characters takes ~20 ms) or one with tool calls goes to the pool,
    # so it cannot hold up the other requests of this process.
    inline = len(body.content) <= INLINE_APPEND_CHARS and not body.tool_calls
    res = append() if inline else await run_in_threadpool(append)
    return AppendOut.of(res)


@router.post("/messages/batch", response_model=AppendManyOut, responses=WRITE_ERROR_RESPONSES)
def append_messages(
    agent_id: AgentId, body: MessagesIn, who: TokenChecked, service: ServiceDep, idem: IdemHeader = None
) -> AppendManyOut:
    """Append a list of messages in order, each as ``POST .../messages`` does (an imported
    conversation, each with its ``created_at``). Every message is checked first: bad input appends
    nothing. With an idempotency key, message *i* is keyed ``<key>:<i>``, so a retry of the whole
    list replays what went in and goes on. A refusal past the checks (a message larger than the
    window) leaves those before it appended: its error says ``index``, ``appended`` and
    ``message_ids``."""
    results = service.append_many(
        agent_id,
        [m.fields() for m in body.messages],
        idempotency_key=one_key(idem, body.idempotency_key),
        actor=who.principal.actor,
        token_sha256=who.token_sha256,
        first_index=body.first_index,
    )
    return AppendManyOut(results=[AppendOut.of(r) for r in results])


@router.get("/context", response_model=ContextOut, responses=ERROR_RESPONSES)
def get_context(
    agent_id: AgentId,
    who: TokenChecked,
    service: ServiceDep,
    built: bool = False,
    query: Annotated[str | None, Query(max_length=4000)] = None,
    user: Annotated[str | None, Query(max_length=200)] = None,
) -> ContextOut:
    """The main context as the hot state holds it; ``built=true``: the prompt the model sees,
    with the builder's layers (identity, tools hint, state, sticky facts, relevant memory for
    ``query`` or the latest user message, skills), each with its tokens and sources. Looking
    changes nothing: the facts shown are not counted as used."""
    if built:
        ctx = service.build_context(agent_id, query=query, user=user, token_sha256=who.token_sha256, record_use=False)
        return ContextOut.built(agent_id, ctx)
    return ContextOut.of(agent_id, service.context(agent_id, token_sha256=who.token_sha256))


@router.post("/evictions", response_model=EvictOut, responses=WRITE_ERROR_RESPONSES)
def evict(agent_id: AgentId, body: EvictIn, who: Agent, service: ServiceDep, idem: IdemHeader = None) -> EvictOut:
    """Move the oldest ``count`` unpinned messages (fewer when fewer are unpinned) out of the
    context now. An eviction always frees room: when those messages hold no more tokens than
    the placeholder replacing them adds, the next oldest go too; when all unpinned messages
    cannot pay for it, the request is refused with ``TOKEN_BUDGET_EXCEEDED``."""
    total, batch = service.evict(
        agent_id, body.count, idempotency_key=one_key(idem, body.idempotency_key), actor=who.actor
    )
    return EvictOut(total=total, batch=BatchOut.of(batch))
