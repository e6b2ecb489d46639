"""Audit rows: who wrote, under which idempotency key, and the write's diff footprint. Pure.

Every audited write becomes one ``memory_events`` row built by :func:`event`, the one place that
attaches the actor and the idempotency key. Its payload is the write's own identifying fields
(block id, batch id, message id, ...) plus ``footprint`` (:mod:`vcm.obs.footprint`): never the
content itself.

Actors name the caller, most specific last:

===========================  ==========================================================
``api:admin``                the operator's bearer token on the HTTP API
``api:agent:<id>``           an agent's own bearer token on the HTTP API
``mcp:agent:<id>``           an agent's own bearer token on an MCP session (``vcm mcp``)
``mcp:admin``                the operator's token on a stdio MCP session (``--agent``)
``agent:<id>``               an agent's tool call run in process (the executor's default)
``<caller>/tool:<name>``     a write done by tool ``<name>`` for that caller
``cli``                      the ``vcm`` command line
``worker:<task>``            a cold-path task (``worker:spool``, ``worker:evict_batch``, ...)
``system``                   library use with no caller named
===========================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vcm.obs.footprint import Footprint, eviction_begun
from vcm.store.audit_names import Actor, EventKind, audit_id
from vcm.store.types import MemoryEvent

SYSTEM = Actor.SYSTEM
CLI = Actor.CLI
API_ADMIN = Actor.API_ADMIN
MCP_ADMIN = Actor.MCP_ADMIN
ALL_AGENTS = "*"  # agent_id of rows about no single agent (a retention sweep)
MAX_ACTOR_CHARS = 200


def agent(agent_id: str) -> str:
    return f"agent:{agent_id}"


def api_agent(agent_id: str) -> str:
    return f"api:agent:{agent_id}"


def mcp_agent(agent_id: str) -> str:
    return f"mcp:agent:{agent_id}"


def tool(caller: str, name: str) -> str:
    return f"{caller}/tool:{name}"


def worker(task: str) -> str:
    return f"worker:{task}"


def event(
    agent_id: str,
    kind: EventKind,
    footprint: Footprint | None,
    *,
    actor: str,
    event_id: str,
    idempotency_key: str | None = None,
    created_at: float = 0.0,
    details: Mapping[str, Any] | None = None,
) -> MemoryEvent:
    """The audit row of one write. ``details`` are the write's identifiers and outcome; the
    footprint goes under ``footprint`` so every row reads the same way."""
    payload: dict[str, Any] = dict(details or {})
    if footprint is not None:
        payload["footprint"] = dict(footprint)
    return MemoryEvent(
        agent_id,
        kind,
        payload,
        event_id=event_id,
        created_at=created_at,
        actor=(actor or SYSTEM)[:MAX_ACTOR_CHARS],
        idempotency_key=idempotency_key,
    )


def flush_event(
    agent_id: str,
    batch_id: int,
    *,
    messages: int,
    tokens: int,
    total_after: int | None,
    actor: str,
    created_at: float = 0.0,
    idempotency_key: str | None = None,
) -> MemoryEvent:
    """The one ``flush`` row of an eviction batch, whoever writes it first: the request that
    began the batch, the worker whose summary install began it, or the commit of the batch (for
    a writer that died before its row). The id is fixed per batch, so the others add nothing."""
    payload: dict[str, Any] = {"batch_id": batch_id, "messages": messages, "tokens": tokens}
    if total_after is not None:
        payload["total_after"] = total_after
    return event(
        agent_id,
        EventKind.FLUSH,
        eviction_begun(messages, tokens, total_after),
        actor=actor,
        event_id=audit_id(agent_id, "flush", batch_id),
        idempotency_key=idempotency_key,
        created_at=created_at,
        details=payload,
    )
