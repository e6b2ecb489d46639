"""What every resource's bodies share: strict, closed request bodies, the coded error answer, the
error responses every /v1 route documents, and the parts several resources answer with.

Request bodies are strict (``"true"`` is not a boolean, ``"5"`` not a number) and closed (an unknown
field is an error, so a typo never silently drops a setting). Lengths, roles and ids are checked by
:mod:`vcm.validation` behind the service, so the limits live in one place; here a body is only
refused for what no layer below can represent: lone UTF-16 surrogates and non-finite numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field, model_validator

from vcm.types import BatchInfo

MAX_JSON_DEPTH = 64
IDEMPOTENCY_FIELD = Field(
    None,
    description="Same as the Idempotency-Key header: a retry with the same key returns the first result.",
)


def _representable(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` cannot be stored and sent on (None when it can)."""
    if depth > MAX_JSON_DEPTH:
        return f"nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains text that is not valid UTF-8 (a lone surrogate)"
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return "contains NaN or Infinity, which JSON cannot carry"
    if isinstance(value, Mapping):
        for key, item in value.items():
            why = _representable(key, depth + 1) or _representable(item, depth + 1)
            if why:
                return why
    elif isinstance(value, list | tuple):
        for item in value:
            why = _representable(item, depth + 1)
            if why:
                return why
    return None


class RequestBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _json_safe(cls, data: Any) -> Any:
        why = _representable(data)
        if why:
            raise ValueError(f"the body {why}")
        return data


Role = Literal["system", "user", "assistant", "tool"]


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


# The error answers every /v1 route documents (OpenAPI), and the agent id of its path.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description}
    for status, description in [
        (401, "UNAUTHORIZED: missing or invalid bearer token"),
        (404, "NOT_FOUND: no such agent (or not yours), block or route"),
        (422, "VALIDATION_ERROR, TOKEN_BUDGET_EXCEEDED, PIN_LIMIT_EXCEEDED, IDEMPOTENCY_MISMATCH"),
        (503, "STORE_UNAVAILABLE"),
    ]
}


# What a route that writes documents besides: a revision or state conflict, and an If-Match that fails.
WRITE_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    409: {"model": ErrorOut, "description": "REV_CONFLICT or CONFLICT"},
    412: {"model": ErrorOut, "description": "REV_CONFLICT: If-Match does not name the current _rev"},
}


AgentId = Annotated[str, Path(description="the agent's id", max_length=128)]


class BatchOut(BaseModel):
    id: int
    count: int
    tokens: int
    placeholder: int
    message_ids: list[str]

    @classmethod
    def of(cls, batch: BatchInfo | None) -> BatchOut | None:
        if batch is None:
            return None
        return cls(
            id=batch.id,
            count=batch.count,
            tokens=batch.tokens,
            placeholder=batch.placeholder,
            message_ids=list(batch.message_ids),
        )


class RemovedOut(BaseModel):
    agent_id: str
    removed: dict[str, int] = Field(description="what went, by kind (counts only)")
