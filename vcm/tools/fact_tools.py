"""The structured-memory tools (remember_fact, recall_fact, search_facts, forget_fact, get_state,
set_state): arguments already validated against their schemas, results as small JSON bodies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vcm.errors import ValidationError
from vcm.service import MemoryService
from vcm.store.types import Fact, FactQuery, StateEntry

VALUE_PREVIEW = 400


def fact_item(f: Fact) -> dict[str, Any]:
    value = f.value if len(f.value) <= VALUE_PREVIEW else f.value[: VALUE_PREVIEW - 1] + "…"
    item: dict[str, Any] = {"fact_id": f.fact_id, "type": f.type, "value": value, "status": f.status}
    if f.scope != "agent":  # shared with the agent's user or domain (or so labelled)
        item["scope"] = f.scope
    if f.key:
        item["key"] = f.key
    if f.conflict_with:
        item["conflict_with"] = list(f.conflict_with)
    return item


def state_item(e: StateEntry) -> dict[str, Any]:
    return {"key": e.key, "value": e.value, "_rev": e.rev, "expires_at": e.expires_at}


def remember(service: MemoryService, agent_id: str, a: Mapping[str, Any], actor: str) -> dict[str, Any]:
    res = service.remember(
        agent_id,
        a["value"],
        type=a["type"],
        key=a.get("key"),
        scope=a.get("scope", "agent"),
        category=a.get("category", ""),
        tags=a.get("tags", ()),
        importance=a.get("importance", 0.5),
        evidence=[{"kind": "message", "id": m} for m in a.get("evidence_message_ids", ())],
        justification=a.get("justification"),
        actor=actor,  # the executor holds the idempotency key (vcm.tools.executor._keyed)
        source="tool:remember_fact",  # an explicit call: a fact without evidence lands shadow
    )
    body: dict[str, Any] = {"decision": res.decision, "fact": fact_item(res.fact)}
    if res.conflicts:
        body["conflicts"] = [fact_item(f) for f in res.conflicts]
    return body


def recall(service: MemoryService, agent_id: str, a: Mapping[str, Any]) -> dict[str, Any]:
    found = service.recall_fact(agent_id, a["key"], scope=a.get("scope"))
    return {"facts": [fact_item(f) for f in found], "conflict": len({f.value for f in found}) > 1}


def search(service: MemoryService, agent_id: str, a: Mapping[str, Any]) -> dict[str, Any]:
    query = FactQuery(types=a.get("types") or None, tags=a.get("tags") or None, limit=a.get("limit", 5))
    hits = service.search_facts(agent_id, a["query"], filters=query)
    return {"facts": [fact_item(h.fact) | {"score": round(h.score, 4)} for h in hits]}


def forget(service: MemoryService, agent_id: str, a: Mapping[str, Any], actor: str) -> dict[str, Any]:
    return {"fact_id": a["fact_id"], "deleted": service.forget_fact(agent_id, a["fact_id"], actor=actor)}


def get_state(service: MemoryService, agent_id: str, a: Mapping[str, Any]) -> dict[str, Any]:
    if a.get("key"):
        return state_item(service.get_state(agent_id, a["key"]))
    return {"state": [state_item(e) for e in service.list_state(agent_id)]}


def set_state(service: MemoryService, agent_id: str, a: Mapping[str, Any], actor: str) -> dict[str, Any]:
    if a.get("delete"):
        removed = service.delete_state(agent_id, a["key"], expected_rev=a.get("_rev"), actor=actor)
        return {"key": a["key"], "deleted": removed > 0}
    if "value" not in a:
        raise ValidationError("set_state needs a value (or delete: true)", field="value")
    entry = service.set_state(
        agent_id, a["key"], a["value"], ttl_s=a.get("ttl_s"), expected_rev=a.get("_rev"), actor=actor
    )
    return state_item(entry)
