"""Audit events (:mod:`vcm.api.routes.events`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from vcm.store.types import MemoryEvent


class EventOut(BaseModel):
    event_id: str
    agent_id: str
    kind: str
    payload: dict[str, Any]
    created_at: float
    actor: str
    idempotency_key: str | None

    @classmethod
    def of(cls, ev: MemoryEvent) -> EventOut:
        return cls(
            event_id=ev.event_id,
            agent_id=ev.agent_id,
            kind=ev.kind,
            payload=dict(ev.payload),
            created_at=ev.created_at,
            actor=ev.actor,
            idempotency_key=ev.idempotency_key,
        )


class EventPage(BaseModel):
    items: list[EventOut]
    next_cursor: str | None


class InjectionOut(BaseModel):
    """One built prompt's injected ids (content-free)."""

    event_id: str
    created_at: float
    facts: list[str]
    messages: list[str]
    skills: list[str]
    state: list[str]
    layers: dict[str, int]

    @classmethod
    def of(cls, i: Any) -> InjectionOut:
        return cls(
            event_id=i.event_id, created_at=i.created_at, facts=list(i.facts), messages=list(i.messages),
            skills=list(i.skills), state=list(i.state), layers=dict(i.layers),
        )  # fmt: skip


class InjectionPage(BaseModel):
    items: list[InjectionOut]
    next_cursor: str | None
