"""Users and domains of the ArangoDB store: one ``core_memory`` document per principal (kind
``principal``), keyed and sharded by its holder id as an agent's record is by its agent id; the
principal's shared facts are ``agent_longterm_memory`` documents whose ``agent_id`` is that holder
id (:mod:`vcm.store.principals`), so they share one shard key value and a delete removes them with
one query per collection."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from vcm.errors import NotFound, RevConflict, ValidationError
from vcm.store import validation
from vcm.store.arango import names
from vcm.store.arango.agents import AGENT_KIND, agent_key
from vcm.store.arango.agents import record as agent_record
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import principals as aql_principals
from vcm.store.arango.base import ArangoBase, fence_key
from vcm.store.arango.lifecycle import count_of
from vcm.store.principals import PRINCIPAL_KINDS, Principal, holder_id, is_holder, principal_of
from vcm.store.types import FACT_EDGE_KINDS, AgentRecord

_TRIES = 5
_BACKOFF_S = 0.05


def _kind(kind: str) -> str:
    if kind not in PRINCIPAL_KINDS:
        raise ValidationError(f"kind must be one of {', '.join(PRINCIPAL_KINDS)}", field="kind")
    return kind


def _principal(d: Mapping[str, Any]) -> Principal:
    kind, name = principal_of(holder_id(str(d["principal_kind"]), str(d["name"])))
    return Principal(kind, name, str(d.get("incarnation") or ""), float(d.get("created_at", 0.0)))


class PrincipalOps(ArangoBase):
    """``put_principal``, ``get_principal``, ``list_principals``, ``delete_principal`` and
    ``set_agent_principals``."""

    def put_principal(self, principal: Principal) -> Principal:
        kind = _kind(principal.kind)
        validation.identifier("name", principal.name)
        validation.identifier("incarnation", principal.incarnation)
        holder = holder_id(kind, principal.name)
        with self._transaction((names.CORE,), "put_principal") as txn:
            core = txn.collection(names.CORE)
            current = core.get(fence_key(holder))
            if current is not None:
                return _principal(current)
            doc = {
                "_key": fence_key(holder),
                "kind": aql_principals.PRINCIPAL_KIND,
                "agent_id": holder,  # the shard key of core_memory
                "principal_kind": kind,
                "name": principal.name,
                "incarnation": principal.incarnation,
                "created_at": self._clock(),
            }
            core.insert(doc)
        return _principal(doc)

    def get_principal(self, kind: str, name: str) -> Principal:
        validation.identifier("name", name)
        doc = self._get(self._ro, names.CORE, fence_key(holder_id(_kind(kind), name)), "get_principal")
        if doc is None or doc.get("kind") != aql_principals.PRINCIPAL_KIND:
            raise NotFound(f"unknown {kind} {name!r}", **{kind: name})
        return _principal(doc)

    def list_principals(self, kind: str) -> list[Principal]:
        found = self._run(self._ro, aql_principals.list_principals(_kind(kind)), "list_principals")
        return [_principal(d) for d in found]

    def delete_principal(self, kind: str, name: str) -> int:
        validation.identifier("name", name)
        holder = holder_id(_kind(kind), name)
        # The record first: from then on every write to its memory fails its fence (a write in
        # flight holds the record until its short transaction ends: the removal retries).
        query = aql_common.remove_documents(names.CORE, [f"{names.CORE}/{fence_key(holder)}"])
        for attempt in range(_TRIES):
            try:
                self._run(self._rw, query, "delete_principal")
                break
            except RevConflict:
                if attempt == _TRIES - 1:
                    raise
                time.sleep(_BACKOFF_S * (attempt + 1))
        removed = count_of(self._run(self._rw, aql_common.remove_of_agent(names.FACTS, holder), "delete_principal"))
        for collection in (names.STATE, *FACT_EDGE_KINDS):
            self._run(self._rw, aql_common.remove_of_agent(collection, holder), "delete_principal")
        self._run(self._rw, aql_principals.detach_agents(kind, name), "delete_principal")
        return removed

    def set_agent_principals(self, agent_id: str, *, user_id: str | None, domain: str | None) -> AgentRecord:
        validation.identifier("agent_id", agent_id)
        if is_holder(agent_id):
            raise ValidationError("agent_id names no agent", field="agent_id")
        with self._transaction((names.CORE,), "set_agent_principals") as txn:
            core = txn.collection(names.CORE)
            for kind, name in (("user", user_id), ("domain", domain)):
                if name is not None and core.get(fence_key(holder_id(kind, validation.identifier(kind, name)))) is None:
                    raise NotFound(f"unknown {kind} {name!r}", **{kind: name})
            current = core.get(agent_key(agent_id))
            if current is None or current.get("kind") != AGENT_KIND:
                raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
            updated = {**current, "user_id": user_id, "domain": domain, "updated_at": self._clock()}
            core.replace(updated)  # the record read in this transaction, its rev checked
        return agent_record(updated)
