"""Agents through the façade: creation, the agent list, rebuilds at start, and what entry points
read about an agent or the deployment without reaching into the tiers (gauges, backlog, stats,
health, audit events, the chat turn lock)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from vcm.durable import agent_config
from vcm.hotpath.context import assemble
from vcm.hotpath.turns import Turn
from vcm.service.core import Core
from vcm.service.facts import Facts
from vcm.service.state import StateKeys
from vcm.store.audit_names import Actor, EventKind, audit_id
from vcm.store.types import MemoryEvent, Page
from vcm.types import AgentInfo, Gauges


class Agents:
    """create_agent, agents, rebuild_missing, gauges, pending_batches, agent_stats, health, stats,
    events, record_event, turn."""

    def __init__(self, core: Core, facts: Facts, state: StateKeys) -> None:
        self.core = core
        # agent_stats counts the agent's facts and state keys.
        self.facts = facts
        self.state = state

    def create_agent(
        self,
        agent_id: str,
        *,
        model: str | None = None,
        system_prompt: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        actor: str = Actor.SYSTEM,
    ) -> AgentInfo:
        self.core.rebuild(agent_id)  # an agent known to the store answers as it was, not anew
        # A new incarnation: the cold path's writes for an earlier agent of this id are fenced.
        info = self.core.hot.create_agent(
            agent_id, model=model, system_prompt=system_prompt, tools=tools, incarnation=uuid.uuid4().hex
        )
        self.core.durable.agent_created(agent_id, agent_config(info.model, system_prompt, tools))
        self.core.event(
            agent_id,
            EventKind.AGENT_CREATED,
            {"model": info.model, "window": info.window},
            actor,
            event_id=audit_id(agent_id, "created"),
            change={"op": "agent_create", "window": info.window, "system_chars": len(system_prompt)},
        )
        return info

    def agents(self) -> list[str]:
        """Every agent the store knows, and any the hot state holds that predate their record."""
        return sorted({r.agent_id for r in self.core.store.list_agents()} | set(self.core.hot.agents()))

    def rebuild_missing(self) -> list[str]:
        """Rebuild every stored agent whose hot state is missing (at start)."""
        return [agent_id for agent_id in self.core.durable.missing() if self.core.rebuild(agent_id)]

    def gauges(self, agent_id: str) -> Gauges:
        return self.core.hot_call(agent_id, self.core.hot.gauges, agent_id)

    def pending_batches(self, agent_id: str) -> list[int]:
        """The agent's eviction batches begun and not yet finished: its cold-path backlog."""
        return self.core.hot_call(agent_id, self.core.hot.pending_batches, agent_id)

    def agent_stats(self, agent_id: str) -> dict[str, Any]:
        """One agent at a glance (seed 004's /stats): tokens by layer of its main context, what
        the store holds of it, evictions, facts, pending cold-path work and its last activity."""
        snap = self.core.hot_call(agent_id, self.core.hot.snapshot, agent_id)
        ctx = assemble(snap)
        layers = ctx.layer_tokens()
        counts = self.core.store.stats(agent_id)
        last = max((m.appended for m in snap.fifo), default=None)  # when vcm took it (an import is activity now)
        return {
            "agent_id": agent_id,
            "model": self.core.agent(agent_id).model,
            "window": ctx.gauges.window,
            "tokens": ctx.gauges.total,
            "tokens_by_layer": layers,
            "fifo_messages": len(snap.fifo),
            "messages_stored": int(counts.get("messages", 0)),
            "archival_chunks": int(counts.get("archival_chunks", 0)),
            "evictions": int(counts.get("committed_batches", 0)),
            "pending_batches": len(self.core.hot.pending_batches(agent_id)),
            "facts": self.facts.fact_stats(agent_id),
            "state_keys": len(self.state.list_state(agent_id)),
            "last_activity": last,
        }

    def health(self) -> dict[str, Any]:
        """Whether the hot state answers, and the store's own health report."""
        try:
            redis_ok = bool(self.core.hot.redis.ping())
        except Exception:
            redis_ok = False
        try:
            store = self.core.store.health()
            store_ok, backend, details = store.ok, store.backend, dict(store.details)
        except Exception as exc:  # any failure means "not healthy"; the probe itself must not fail
            store_ok, backend, details = False, "unknown", {"error": type(exc).__name__}
        return {
            "ok": redis_ok and store_ok,
            "redis": redis_ok,
            "store": store_ok,
            "store_backend": backend,
            "store_details": details,
        }

    def stats(self, agent_id: str | None = None) -> dict[str, Any]:
        """The store's counts and index state (one agent's, or the deployment's)."""
        return dict(self.core.store.stats(agent_id))

    def events(
        self,
        agent_id: str | None,
        kinds: Sequence[str] | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
        actor: str | None = None,
        idempotency_key: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[MemoryEvent]:
        return self.core.store.query_events(
            agent_id,
            kinds,
            since=since,
            until=until,
            actor=actor,
            idempotency_key=idempotency_key,
            limit=limit,
            cursor=cursor,
        )

    def record_event(
        self, agent_id: str, kind: EventKind, payload: Mapping[str, Any], *, event_id: str, actor: str = Actor.SYSTEM
    ) -> None:
        """An audit row for something that happened outside the service's own writes (a heartbeat
        chain ending). Idempotent by ``event_id``; a store failure is logged, never raised."""
        self.core.event(agent_id, kind, payload, actor, event_id=event_id)

    def turn(self, agent_id: str) -> Turn:
        """Hold the agent's chat turn (one at a time across processes; see :mod:`vcm.hotpath.turns`):
        ``with service.turn(agent):`` or ``release()`` when the turn ends."""
        self.core.agent(agent_id)
        return self.core.hot.turns.acquire(agent_id)
