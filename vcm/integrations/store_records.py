"""Pure rules of the LangGraph store (:mod:`vcm.integrations.langgraph`): how an item is held
in vcm (a state key and its record), which text its fact holds, and LangGraph's namespace
matching and value filters."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

Json = dict[str, Any]

# State keys of the store's items start with this (the agent's other state keys are not items).
PREFIX = "lg:"
# Tag of the facts that index items: searches ask for it, so other facts are never hits.
TAG = "langgraph"
# Facts index items under this type (a type vcm knows; the store sets each fact's own lifetime).
FACT_TYPE = "learned"


def state_key(namespace: Sequence[str], key: str) -> str:
    """The state key of an item: a digest, since namespaces and keys are free text and a state
    key is short (its record names both)."""
    return PREFIX + hashlib.sha256(json.dumps([list(namespace), key]).encode()).hexdigest()[:40]


def record(
    namespace: Sequence[str], key: str, value: Mapping[str, Any], created_at: float, fact_id: str | None
) -> Json:
    return {
        "namespace": list(namespace),
        "key": key,
        "value": dict(value),
        "created_at": created_at,
        "fact_id": fact_id,
    }


def is_record(entry: Mapping[str, Any]) -> bool:
    value = entry.get("value")
    return str(entry.get("key", "")).startswith(PREFIX) and isinstance(value, dict) and "namespace" in value


def leaves(value: Any) -> list[str]:
    """The text of a value: its strings, depth first (numbers and flags are data to filter on,
    not words to search for)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in leaves(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in leaves(v)]
    return []


def index_text(
    value: Mapping[str, Any], fields: Sequence[str] | None, at_path: Callable[[Any, str], list[str]], limit: int
) -> str:
    """What the item's fact holds: the text at ``fields`` (LangGraph's path syntax), or all of the
    value's text; at most ``limit`` characters."""
    texts = [t for f in fields for t in at_path(value, f)] if fields else leaves(value)
    return "\n".join(t for t in texts if t.strip())[:limit]


def matches_path(namespace: Sequence[str], path: Sequence[str], *, suffix: bool) -> bool:
    """LangGraph's prefix or suffix match, ``*`` matching any one label."""
    if len(path) > len(namespace):
        return False
    part = namespace[len(namespace) - len(path) :] if suffix else namespace[: len(path)]
    return all(p in ("*", n) for p, n in zip(path, part, strict=True))


def list_namespaces(
    namespaces: Iterable[Sequence[str]],
    conditions: Iterable[tuple[str, Sequence[str]]],
    max_depth: int | None,
    limit: int,
    offset: int,
) -> list[tuple[str, ...]]:
    """The distinct namespaces that meet every (match type, path) condition, cut at ``max_depth``,
    sorted, paged."""
    conditions = list(conditions)
    found = {
        tuple(ns[:max_depth] if max_depth is not None else ns)
        for ns in namespaces
        if all(matches_path(ns, path, suffix=kind == "suffix") for kind, path in conditions)
    }
    return sorted(found)[offset : offset + limit]


OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": lambda a, b: bool(a == b),
    "$ne": lambda a, b: bool(a != b),
    "$gt": lambda a, b: bool(a > b),
    "$gte": lambda a, b: bool(a >= b),
    "$lt": lambda a, b: bool(a < b),
    "$lte": lambda a, b: bool(a <= b),
}


def passes(value: Mapping[str, Any], conditions: Mapping[str, Any] | None) -> bool:
    """LangGraph's search filter: each key equals its value, or meets its ``{"$op": x}``
    comparisons (a missing key or uncomparable values fail)."""
    for field, wanted in (conditions or {}).items():
        if field not in value:
            return False
        have = value[field]
        if isinstance(wanted, Mapping) and wanted and all(str(k).startswith("$") for k in wanted):
            for op, operand in wanted.items():
                if op not in OPERATORS:
                    raise ValueError(f"unsupported filter operator {op!r} (supported: {', '.join(OPERATORS)})")
                try:
                    if not OPERATORS[op](have, operand):
                        return False
                except TypeError:
                    return False
        elif have != wanted:
            return False
    return True
