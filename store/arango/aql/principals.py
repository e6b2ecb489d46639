"""Users and domains (:mod:`vcm.store.principals`): their records are ``core_memory`` documents of
kind ``principal`` keyed (and sharded) by the holder id, as an agent's record is by its agent id;
their shared facts are ``agent_longterm_memory`` documents whose ``agent_id`` (the shard key) is
that holder id."""

from __future__ import annotations

from vcm.store.arango import names
from vcm.store.arango.aql.common import AqlQuery

PRINCIPAL_KIND = "principal"


def list_principals(kind: str) -> AqlQuery:
    text = (
        f"FOR p IN {names.CORE}\n  FILTER p.kind == @doc_kind AND p.principal_kind == @kind\n"
        "  SORT p.name ASC\n  RETURN p"
    )
    return AqlQuery(text, {"doc_kind": PRINCIPAL_KIND, "kind": kind})


def fence_holder(key: str, incarnation: str | None, now: float) -> AqlQuery:
    """The fence of a write to shared memory, first in its stream transaction: the principal's
    record still exists (holding ``incarnation`` when given) and is write-locked until the
    transaction ends (``fenced_at``), so a concurrent delete, which removes the record first,
    conflicts with it. Returns the holder id, or nothing (the caller aborts)."""
    text = (
        f"FOR p IN {names.CORE}\n"
        "  FILTER p._key == @key AND p.kind == @doc_kind AND (@incarnation == null OR p.incarnation == @incarnation)\n"
        f"  UPDATE p WITH {{ fenced_at: @now }} IN {names.CORE}\n"
        "  RETURN NEW.agent_id"
    )
    return AqlQuery(text, {"key": key, "doc_kind": PRINCIPAL_KIND, "incarnation": incarnation, "now": now})


def detach_agents(kind: str, name: str) -> AqlQuery:
    """Every agent record naming the principal stops naming it; returns how many."""
    attribute = "user_id" if kind == "user" else "domain"
    text = (
        f"FOR a IN {names.CORE}\n"
        f'  FILTER a.kind == "agent" AND a.{attribute} == @name\n'
        f"  UPDATE a WITH {{ {attribute}: null }} IN {names.CORE} OPTIONS {{ keepNull: true }}\n"
        "  COLLECT WITH COUNT INTO n\n  RETURN n"
    )
    return AqlQuery(text, {"name": name})
