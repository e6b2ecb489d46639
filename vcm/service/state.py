"""An agent's state keys through the façade: JSON values under keys, with optional lifetimes and
optimistic revisions; writes pass the policy guard and publish to the change feed.

Scope (as facts', :mod:`vcm.service.principals`): a key of scope ``user`` or ``domain`` is held by
the agent's user or domain and read by every agent of it. A state key has no shadow status to wait
in, so only the operator writes or deletes shared keys (UNAUTHORIZED otherwise); agents read them.
On a read the agent's own key comes first, then its user's, then its domain's."""

from __future__ import annotations

import json
from typing import Any

from vcm.errors import NotFound, Unauthorized, ValidationError
from vcm.service import fact_input
from vcm.service.core import Core
from vcm.service.principals import Principals
from vcm.store import validation as store_validation
from vcm.store.audit_names import Actor, EventKind
from vcm.store.principals import is_holder
from vcm.store.types import StateEntry


class StateKeys:
    """set_state, get_state, list_state, delete_state."""

    def __init__(self, core: Core, principals: Principals) -> None:
        self.core = core
        self.principals = principals

    def set_state(
        self,
        agent_id: str,
        key: str,
        value: Any,
        *,
        ttl_s: int | None = None,
        expected_rev: str | None = None,
        justification: str | None = None,
        scope: str = "agent",
        actor: str = Actor.SYSTEM,
    ) -> StateEntry:
        self.core.agent(agent_id)
        store_validation.identifier("key", key)
        holder = self._writable(agent_id, scope, actor)
        text = store_validation.json_value("value", value)
        if len(text) > self.core.settings.facts.max_value_chars:
            raise ValidationError(
                f"value is longer than {self.core.settings.facts.max_value_chars} characters as JSON", field="value"
            )
        if ttl_s is not None and (isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1):
            raise ValidationError("ttl_s must be a positive number of seconds (omit it: no expiry)", field="ttl_s")
        self.core.guard(agent_id, "set_state", f"{key} {text}", justification, actor, key=key)
        entry = self.core.store.put_state(
            holder,
            key,
            json.loads(text),
            expires_at=self.core.clock() + ttl_s if ttl_s else None,
            expected_rev=expected_rev,
        )
        if holder == agent_id:  # shared keys have no agent's feed
            self.core.changed(agent_id, "state", key, entry.rev)
        payload = {"key": key, "rev": entry.rev, "bytes": len(text), **({"scope": scope} if holder != agent_id else {})}
        self.core.audit(agent_id, EventKind.STATE_SET, payload, actor)
        return entry

    def get_state(self, agent_id: str, key: str) -> StateEntry:
        """The agent's own key, else its user's, else its domain's (NOT_FOUND as the agent's own)."""
        self.core.agent(agent_id)
        now = self.core.clock()
        try:
            return self.core.store.get_state(agent_id, key, now)
        except NotFound as missing:
            for holder in self.principals.holders(agent_id).values():
                try:
                    return self.core.store.get_state(holder, key, now)
                except NotFound:
                    continue
            raise missing from None

    def list_state(self, agent_id: str) -> list[StateEntry]:
        """Every key the agent reads, by key: its own, and its user's and domain's it does not
        hold itself (the user's before the domain's)."""
        self.core.agent(agent_id)
        now = self.core.clock()
        seen: dict[str, StateEntry] = {}
        for holder in (agent_id, *self.principals.holders(agent_id).values()):
            for entry in self.core.store.list_state(holder, now):
                seen.setdefault(entry.key, entry)
        return [seen[k] for k in sorted(seen)]

    def delete_state(
        self,
        agent_id: str,
        key: str | None,
        *,
        expected_rev: str | None = None,
        scope: str = "agent",
        actor: str = Actor.SYSTEM,
    ) -> int:
        """Delete one key, or every key (``key`` None: clear) of the scope given."""
        self.core.agent(agent_id)
        holder = self._writable(agent_id, scope, actor)
        removed = self.core.store.delete_state(holder, key, expected_rev)
        if removed and holder == agent_id:
            self.core.changed(
                agent_id, "state", "*" if key is None else key, None, "clear" if key is None else "delete"
            )
        payload = {"key": key, "removed": removed, **({"scope": scope} if holder != agent_id else {})}
        self.core.audit(agent_id, EventKind.STATE_DELETED, payload, actor)
        return removed

    def _writable(self, agent_id: str, scope: str, actor: str) -> str:
        """Where a write of ``scope`` goes; a shared one only from the operator."""
        if scope not in fact_input.SCOPES:
            raise ValidationError(f"scope must be one of {', '.join(fact_input.SCOPES)}", field="scope")
        holder = self.principals.holder(agent_id, scope)
        if is_holder(holder) and not fact_input.operator(actor):
            raise Unauthorized(f"{scope} state keys are the operator's to write; agents read them")
        return holder
