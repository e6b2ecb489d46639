"""What a fact write may carry: scopes, evidence pointers, scores, tags and lifetimes, checked
before anything is stored (VALIDATION_ERROR names the field)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vcm.errors import ValidationError
from vcm.store import validation as store_validation
from vcm.store.audit_names import Actor
from vcm.store.types import Fact

SCOPES = ("agent", "user", "domain")
# The statuses a listing shows when it names none: the facts that are the agent's memory now
# (expired and archived ones are kept, but no longer recalled or searched).
LIVE = ("active", "shadow")
STATUSES = ("shadow", "active", "expired", "archived")
EVIDENCE_KINDS = ("message", "tool_call", "document")
MAX_EVIDENCE = 64
MAX_SOURCE_CHARS = 200
# The callers that speak for the operator (the admin's token, the command line, library use with
# no caller named): their word is enough for an active fact. A tool call they make is theirs too.
OPERATORS = frozenset({Actor.SYSTEM, Actor.CLI, Actor.API_ADMIN, Actor.MCP_ADMIN})


@dataclass(frozen=True)
class RememberResult:
    decision: str  # MATCH | NEW | CONFLICT
    fact: Fact
    conflicts: tuple[Fact, ...] = ()
    replayed: bool = False


def unit(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= float(value) <= 1.0:
        raise ValidationError(f"{name} must be a number between 0 and 1", field=name)
    return float(value)


def evidence(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(items, str | bytes) or not isinstance(items, Sequence) or len(items) > MAX_EVIDENCE:
        raise ValidationError(f"evidence must be a list of at most {MAX_EVIDENCE} pointers", field="evidence")
    out: list[dict[str, Any]] = []
    for e in items:
        if not isinstance(e, Mapping) or e.get("kind") not in EVIDENCE_KINDS or not isinstance(e.get("id"), str):
            raise ValidationError(
                "each evidence pointer is {kind: message|tool_call|document, id: str, span?: [start, end]}",
                field="evidence",
            )
        pointer: dict[str, Any] = {"kind": e["kind"], "id": store_validation.identifier("evidence id", e["id"])}
        span = e.get("span")
        if span is not None:
            if not (isinstance(span, Sequence) and len(span) == 2 and all(isinstance(x, int) and x >= 0 for x in span)):
                raise ValidationError("evidence span must be [start, end] character offsets", field="evidence")
            pointer["span"] = [int(span[0]), int(span[1])]
        out.append(pointer)
    return out


def merge_evidence(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for e in [*a, *b]:
        seen.setdefault((str(e["kind"]), str(e["id"])), dict(e))
    return tuple(list(seen.values())[-MAX_EVIDENCE:])


def text(value: Any, name: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{name} must be a non-empty string", field=name)
    if len(value) > limit:
        raise ValidationError(f"{name} is longer than {limit} characters", field=name, limit=limit)
    return value.strip()


def tags(values: Sequence[str], max_tags: int) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Sequence) or len(values) > max_tags:
        raise ValidationError(f"tags must be a list of at most {max_tags} strings", field="tags")
    out = []
    for t in values:
        if not isinstance(t, str) or not t.strip() or len(t) > 64:
            raise ValidationError("each tag is a non-empty string of at most 64 characters", field="tags")
        out.append(t.strip())
    return list(dict.fromkeys(out))


def expiry(lifetimes: Mapping[str, int], type_: str, ttl_s: int | None, now: float) -> float | None:
    """When a fact of ``type_`` expires: ``ttl_s`` from now, or its type's default lifetime
    (``lifetimes``: ``[facts] types``); None: never."""
    if ttl_s is None:
        default = lifetimes[type_]
        return now + default if default else None
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s < 0:
        raise ValidationError("ttl_s must be >= 0 seconds (0: never expires); a past expiry is refused", field="ttl_s")
    return now + ttl_s if ttl_s else None


def source(value: Any) -> str | None:
    """Where a fact without evidence comes from, as its caller says (None: not said)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_SOURCE_CHARS:
        raise ValidationError(f"source is a non-empty string of at most {MAX_SOURCE_CHARS} characters", field="source")
    return value.strip()


def operator(actor: str) -> bool:
    """The caller speaks for the operator (``api:admin`` and its tool calls, ``cli``, ...)."""
    return actor.split("/", 1)[0] in OPERATORS


def online(actor: str) -> bool:
    """A write from an entry point (API, MCP, tools, CLI, library), not the cold path's workers:
    seed 002 keeps structure (entities, relations) read-only there until promotion."""
    return not actor.startswith("worker:")


def entry_point(actor: str) -> str:
    """The kind of entry point an actor names: api, mcp, tool, worker, cli, agent or system."""
    if "/tool:" in actor:
        return "tool"
    return actor.split(":", 1)[0]
