"""Principals above agents (pure): users and domains, the holders of shared memory.

An agent may belong to one user (``user_id``) and one domain (a named group of agents of one
deployment: a team, a product). Memory written with scope ``user`` or ``domain`` is held by that
principal, not by the agent that wrote it, and every agent of the principal reads it.

In the store such memory is keyed by a **holder id** where agent memory is keyed by the agent id:
``user:<user_id>`` or ``domain:<name>``. An agent id never holds a ``:`` (``vcm.validation``), so
a holder id can never name an agent, and the store's per-agent operations (facts, their edges)
work unchanged on a holder: the ``agent_id`` column (ArangoDB: attribute and shard key) of a shared
fact is its holder id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vcm.errors import ValidationError

PrincipalKind = Literal["user", "domain"]
PRINCIPAL_KINDS: tuple[PrincipalKind, ...] = ("user", "domain")
# A fact's scope and the principal that holds it ("agent": the agent itself).
SHARED_SCOPES: tuple[PrincipalKind, ...] = PRINCIPAL_KINDS


@dataclass(frozen=True)
class Principal:
    """A user or a domain. ``incarnation`` is chosen when it is created (a re-created name gets a
    new one): a write to its memory begun before a delete is fenced by it."""

    kind: PrincipalKind
    name: str
    incarnation: str = ""
    created_at: float = 0.0

    @property
    def holder(self) -> str:
        return holder_id(self.kind, self.name)


def holder_id(kind: str, name: str) -> str:
    """The key shared memory of this principal is stored under."""
    if kind not in PRINCIPAL_KINDS:
        raise ValidationError(f"kind must be one of {', '.join(PRINCIPAL_KINDS)}", field="kind")
    return f"{kind}:{name}"


def is_holder(agent_id: str) -> bool:
    """Whether a store key names a principal's memory rather than an agent's."""
    return ":" in agent_id


def principal_of(holder: str) -> tuple[PrincipalKind, str]:
    """``(kind, name)`` of a holder id; VALIDATION_ERROR for anything else."""
    kind, _, name = holder.partition(":")
    for known in PRINCIPAL_KINDS:
        if kind == known and name:
            return known, name
    raise ValidationError("not a holder id of a user or a domain", field="holder")
