"""An agent's state keys through the façade: JSON values under keys, with optional lifetimes and
optimistic revisions; writes pass the policy guard and publish to the change feed."""

from __future__ import annotations

import json
from typing import Any

from vcm.errors import ValidationError
from vcm.service.core import Core
from vcm.store import validation as store_validation
from vcm.store.audit_names import Actor, EventKind
from vcm.store.types import StateEntry


class StateKeys:
    """set_state, get_state, list_state, delete_state."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def set_state(
        self,
        agent_id: str,
        key: str,
        value: Any,
        *,
        ttl_s: int | None = None,
        expected_rev: str | None = None,
        justification: str | None = None,
        actor: str = Actor.SYSTEM,
    ) -> StateEntry:
        self.core.agent(agent_id)
        store_validation.identifier("key", key)
        text = store_validation.json_value("value", value)
        if len(text) > self.core.settings.facts.max_value_chars:
            raise ValidationError(
                f"value is longer than {self.core.settings.facts.max_value_chars} characters as JSON", field="value"
            )
        if ttl_s is not None and (isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 1):
            raise ValidationError("ttl_s must be a positive number of seconds (omit it: no expiry)", field="ttl_s")
        self.core.guard(agent_id, "set_state", f"{key} {text}", justification, actor, key=key)
        entry = self.core.store.put_state(
            agent_id,
            key,
            json.loads(text),
            expires_at=self.core.clock() + ttl_s if ttl_s else None,
            expected_rev=expected_rev,
        )
        self.core.changed(agent_id, "state", key, entry.rev)
        self.core.audit(agent_id, EventKind.STATE_SET, {"key": key, "rev": entry.rev, "bytes": len(text)}, actor)
        return entry

    def get_state(self, agent_id: str, key: str) -> StateEntry:
        self.core.agent(agent_id)
        return self.core.store.get_state(agent_id, key, self.core.clock())

    def list_state(self, agent_id: str) -> list[StateEntry]:
        self.core.agent(agent_id)
        return self.core.store.list_state(agent_id, self.core.clock())

    def delete_state(
        self, agent_id: str, key: str | None, *, expected_rev: str | None = None, actor: str = Actor.SYSTEM
    ) -> int:
        """Delete one key, or every key (``key`` None: clear)."""
        self.core.agent(agent_id)
        removed = self.core.store.delete_state(agent_id, key, expected_rev)
        if removed:
            self.core.changed(
                agent_id, "state", "*" if key is None else key, None, "clear" if key is None else "delete"
            )
        self.core.audit(agent_id, EventKind.STATE_DELETED, {"key": key, "removed": removed}, actor)
        return removed
