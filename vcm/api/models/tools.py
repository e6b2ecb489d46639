"""The LLM tools and one tool call (:mod:`vcm.api.routes.tools`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vcm.api.models.common import RequestBody


class ToolCall(RequestBody):
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments (its JSON schema)")
    tool_call_id: str | None = Field(None, max_length=256)


class ToolList(BaseModel):
    tools: list[dict[str, Any]]


class ToolCallOut(BaseModel):
    """:meth:`vcm.tools.results.ToolResult.as_dict`: ``payload`` is what the model reads (with
    ``{"error": {...}}`` when ``ok`` is false); ``message`` is the chat message carrying it."""

    model_config = ConfigDict(extra="allow")

    ok: bool
    payload: dict[str, Any]
    name: str | None = None
    tool_call_id: str | None = None
    message: dict[str, Any] | None = None
    tokens: int | None = None
    heartbeat: dict[str, Any] | None = None
