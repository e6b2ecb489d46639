"""The injection log (seed 002's episodic record of what was actually used): each prompt built
for a model call records which facts, messages, skills and state keys its injected layers held,
as ids only (never content), in an ``injection`` audit row of the agent. A look at the prompt
(``record_use`` off: GET /context, the viewer) records nothing, as it uses nothing.

Read back per agent, oldest first as the audit log pages (:meth:`Injections.injections`; ``GET
/v1/agents/{id}/injections``, client ``injections``, the viewer's context panel).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vcm.prompt.layers import Layer
from vcm.service.core import Core
from vcm.store.audit_names import Actor, EventKind
from vcm.store.types import MemoryEvent

# Ids kept per kind and prompt, at most (a prompt's layers hold far fewer).
MAX_IDS = 200
# Source kinds of the injected layers, and the payload field each goes to.
FIELDS = {"fact": "facts", "message": "messages", "skill": "skills", "state": "state"}


@dataclass(frozen=True)
class Injection:
    """One built prompt's injected ids."""

    event_id: str
    created_at: float
    facts: tuple[str, ...]
    messages: tuple[str, ...]
    skills: tuple[str, ...]
    state: tuple[str, ...]
    layers: dict[str, int]  # layer name -> tokens

    @classmethod
    def of(cls, row: MemoryEvent) -> Injection:
        p = row.payload
        facts, messages, skills, state = (tuple(str(i) for i in p.get(f) or ()) for f in FIELDS.values())
        layers = {str(k): int(v) for k, v in (p.get("layers") or {}).items()}
        return cls(row.event_id, row.created_at, facts, messages, skills, state, layers)


def payload(layers: Sequence[Layer]) -> dict[str, Any]:
    """The row of one build: the ids each source kind contributed, and each layer's tokens."""
    ids: dict[str, dict[str, None]] = {f: {} for f in FIELDS.values()}
    for layer in layers:
        for source in layer.sources:
            field = FIELDS.get(str(source.get("kind")))
            if field is not None and source.get("id") is not None:
                ids[field].setdefault(str(source["id"]), None)
    return {
        **{f: list(found)[:MAX_IDS] for f, found in ids.items()},
        "layers": {layer.name: layer.tokens for layer in layers},
    }


class Injections:
    """record_injection (the builder's), injections."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def record_injection(self, agent_id: str, layers: Sequence[Layer], actor: str = Actor.SYSTEM) -> None:
        self.core.audit(agent_id, EventKind.INJECTION, payload(layers), actor)

    def injections(
        self, agent_id: str, *, since: float | None = None, limit: int = 100, cursor: str | None = None
    ) -> tuple[list[Injection], str | None]:
        """The agent's recorded prompts from ``since`` on (unix seconds), oldest first, as the
        audit log pages, and the cursor of the next page (None: the last)."""
        self.core.agent(agent_id)
        page = self.core.store.query_events(agent_id, [EventKind.INJECTION], since=since, limit=limit, cursor=cursor)
        return [Injection.of(r) for r in page.items], page.next_cursor
