"""What the tool executor and its handlers share: one call's context, a handler's reply, the
token allowances around a result, and small pure helpers (argument checks, reply fields)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema.exceptions import ValidationError as SchemaError

from vcm.errors import ValidationError
from vcm.hotpath.tokens import TokenCounter
from vcm.tools.chains import ChainEnd, HeartbeatOutcome
from vcm.types import AgentInfo, BatchInfo

# Tokens kept free around a page for the fields the executor adds (gauges, heartbeat, rehydration
# report) and the tool message's framing.
ENVELOPE_TOKENS = 96
# Below this many tokens of room (after the envelope) no result could fit: stop paging at once.
MIN_ROOM = 32
HEARTBEAT_FIELD_TOKENS = 48  # the heartbeat report added to every result (and record_heartbeat's own)
PREVIEW_TOKENS = 64  # of a spooled output
SPOOL_FLOOR = 160  # smaller outputs are never spooled: a preview would not save room
SPOOL_CHUNK_CHARS = 100_000  # per recall note; well under budget.max_content_chars
DEFAULT_LIMIT = 10


@dataclass(frozen=True)
class ToolCall:
    agent: AgentInfo
    args: dict[str, Any]
    actor: str
    counter: TokenCounter
    govern: bool


@dataclass
class Reply:
    body: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # envelope fields, outside the page bound
    note: str | None = None  # recorded with the chain end this call's heartbeat decision makes
    # record_heartbeat reports the decision itself: its body is written once the governor decided.
    report: Callable[[HeartbeatOutcome, ChainEnd | None], dict[str, Any]] | None = None


# --- small pure helpers -----------------------------------------------------------------------------------
def field_of(error: SchemaError, args: Mapping[str, Any]) -> str:
    """The argument a schema error is about, as the model named it."""
    if error.validator == "required" and not error.absolute_path:
        missing = [p for p in error.validator_value if p not in args]
        return str(missing[0]) if missing else "arguments"
    if error.validator == "additionalProperties" and not error.absolute_path:
        known = set(error.schema.get("properties", {})) if isinstance(error.schema, Mapping) else set()
        extra = sorted(k for k in args if k not in known)
        return str(extra[0]) if extra else "arguments"
    return ".".join(str(p) for p in error.absolute_path) or "arguments"


# The largest integer a tool argument may hold: floats reach ~1.8e308, and every number vcm
# takes (times, counts, sizes, vector items) is far below.
MAX_INTEGER = 10**300


def check_finite(value: Any, where: str) -> None:
    """JSON allows NaN and Infinity as Python reads it, and integers of any length; no tool
    argument means them (an integer past the float range would crash the arithmetic on it)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"{where} must be a finite number", field=where)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INTEGER:
        raise ValidationError(f"{where} is too large a number", field=where)
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_finite(v, str(k) if where == "arguments" else f"{where}.{k}")
    elif isinstance(value, list):
        for v in value:
            check_finite(v, where)


def mark_replayed(body: dict[str, Any], replayed: bool) -> dict[str, Any]:
    return body | {"replayed": True} if replayed else body


def batch_fields(batch: BatchInfo | None) -> dict[str, Any]:
    """An eviction the write began (the context crossed flush)."""
    if batch is None:
        return {}
    return {"evicted": {"batch_id": batch.id, "messages": batch.count, "tokens": batch.tokens}}
