"""Users and domains through the façade: the principals above agents whose memory their agents share.

An agent may belong to one user and one domain (a named group of agents of a deployment: a team,
a product). Facts written with scope ``user`` or ``domain`` are held by that principal, under its
holder id (:mod:`vcm.store.principals`), and every agent of the principal reads them beside its
own; scope ``agent`` stays private. Creating, listing and deleting principals and naming an
agent's are admin operations (entry points check who asks); each is an audit row (principals
under agent ``*``, as agent deletes are; an agent's change under the agent).

Isolation: the principals an agent reads are those its store record names, read on every call
(never a cache another process could hold stale), so an agent never reaches another user's or
domain's memory, and a fact id of one answers NOT_FOUND exactly as a missing one does. Deleting a
principal removes its record, its memory and its name from every agent in one store transaction;
a write to its memory begun before is fenced (the store checks the principal's record inside the
write), so nothing of it is left or written after.
"""

from __future__ import annotations

import uuid
from typing import Any

from vcm import validation
from vcm.errors import Conflict, NotFound, ValidationError
from vcm.service.core import Core
from vcm.store.audit_names import Actor, EventKind
from vcm.store.principals import PRINCIPAL_KINDS, Principal, PrincipalKind, holder_id
from vcm.store.types import AgentRecord

SYSTEM_AGENT = "*"  # the audit trail of what belongs to no agent (vcm.service.lifecycle's)


def kind_of(kind: str) -> PrincipalKind:
    for known in PRINCIPAL_KINDS:
        if kind == known:
            return known
    raise ValidationError(f"kind must be one of {', '.join(PRINCIPAL_KINDS)}", field="kind")


def name_of(kind: str, name: Any) -> str:
    """A user id or domain name: the agent id's alphabet (no ':', so never a holder id)."""
    if not isinstance(name, str) or not validation.AGENT_ID.match(name):
        field = "user_id" if kind == "user" else "domain"
        raise ValidationError(
            f"{field} must be 1-128 characters of letters, digits, '_', '.', '-' (starting with a letter or digit)",
            field=field,
        )
    return name


class Principals:
    """create_principal, list_principals, delete_principal, set_agent_principals,
    agent_principals; and the holders an agent reads (:meth:`holders`) for the other parts."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def create_principal(self, kind: str, name: str, *, actor: str = Actor.SYSTEM) -> Principal:
        """A new user or domain; CONFLICT when it exists."""
        k = kind_of(kind)
        name_of(k, name)
        wanted = uuid.uuid4().hex
        stored = self.core.store.put_principal(Principal(k, name, wanted))
        if stored.incarnation != wanted:
            raise Conflict(f"{k} {name!r} exists", **{k if k == "domain" else "user_id": name})
        self.core.audit(SYSTEM_AGENT, EventKind.PRINCIPAL_CREATED, {"kind": k, "name": name}, actor)
        return stored

    def list_principals(self, kind: str) -> list[Principal]:
        return self.core.store.list_principals(kind_of(kind))

    def get_principal(self, kind: str, name: str) -> Principal:
        k = kind_of(kind)
        return self.core.store.get_principal(k, name_of(k, name))

    def delete_principal(self, kind: str, name: str, *, actor: str = Actor.SYSTEM) -> dict[str, int]:
        """Remove the principal and all its memory; its agents stop naming it. Idempotent: an
        unknown name removes nothing and says so."""
        k = kind_of(kind)
        name_of(k, name)
        facts = self.core.store.delete_principal(k, name)
        removed = {"facts": facts} if facts else {}
        self.core.audit(SYSTEM_AGENT, EventKind.PRINCIPAL_DELETED, {"kind": k, "name": name, "removed": removed}, actor)
        return removed

    def set_agent_principals(
        self, agent_id: str, *, user_id: str | None, domain: str | None, actor: str = Actor.SYSTEM
    ) -> AgentRecord:
        """Name the agent's user and domain (None: none); NOT_FOUND for an unknown one. The
        audit row says what it was and what it is."""
        validation.agent_id(agent_id)
        if user_id is not None:
            name_of("user", user_id)
        if domain is not None:
            name_of("domain", domain)
        self.core.agent(agent_id)
        before = self.core.store.get_agent(agent_id)
        after = self.core.store.set_agent_principals(agent_id, user_id=user_id, domain=domain)
        payload = {"user_id": [before.user_id, after.user_id], "domain": [before.domain, after.domain]}
        self.core.audit(agent_id, EventKind.AGENT_PRINCIPALS, payload, actor)
        return after

    def agent_principals(self, agent_id: str) -> dict[str, str | None]:
        self.core.agent(agent_id)
        record = self._record(agent_id)
        return {
            "user_id": None if record is None else record.user_id,
            "domain": None if record is None else record.domain,
        }

    def holders(self, agent_id: str) -> dict[str, str]:
        """``{scope: holder id}`` of the shared memory the agent reads (its user's, its domain's),
        from its store record now."""
        record = self._record(agent_id)
        out: dict[str, str] = {}
        if record is not None and record.user_id:
            out["user"] = holder_id("user", record.user_id)
        if record is not None and record.domain:
            out["domain"] = holder_id("domain", record.domain)
        return out

    def holder(self, agent_id: str, scope: str) -> str:
        """Where a fact of ``scope`` written by the agent lives: the agent itself, or its user or
        domain (VALIDATION_ERROR when it has none)."""
        if scope == "agent":
            return agent_id
        found = self.holders(agent_id).get(scope)
        if found is None:
            raise ValidationError(
                f"agent {agent_id!r} belongs to no {scope}: a {scope} fact has nowhere to live", field="scope"
            )
        return found

    def _record(self, agent_id: str) -> AgentRecord | None:
        try:
            return self.core.agent_record(agent_id)
        except NotFound:  # an agent the hot state holds from before its record: no principals
            return None
