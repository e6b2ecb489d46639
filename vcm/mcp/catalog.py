"""vcm's tools and memory as MCP sees them: tool definitions, call results and resource URIs. Pure.

The tool list is built from :mod:`vcm.tools.schemas` at every call, so a tool added there is
served with no change here. Each MCP tool's input schema is the tool's own JSON schema, with one
difference: ``request_heartbeat`` is optional (an MCP host does not chain inference on request;
absent means false, and the executor still governs a chain when a client asks for one).

A call's result carries the executor's payload twice, as MCP asks of structured results: as
``structuredContent`` and, serialised exactly as the model reads it in a tool message, as the one
text block. ``isError`` is set when the payload is a coded error (``{"error": {"code", ...}}``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from vcm.tools import schemas

HEARTBEAT_ARG = "request_heartbeat"
SCHEME = "vcm"
MIME = "application/json"

# What a session can read of its agent's memory (``{agent_id}`` is the session's agent).
CONTEXT = "context"
BLOCKS = "blocks"
FACTS = "facts"
PROMPT = "prompt"
_RESOURCES: dict[str, tuple[str, str]] = {
    CONTEXT: (
        "main context",
        "The agent's main context as the model sees it (system, working blocks, summary, FIFO), with "
        "token gauges; the JSON of GET /v1/agents/{id}/context.",
    ),
    BLOCKS: (
        "working blocks",
        "The agent's working (core) memory blocks with their _rev; the JSON of GET /v1/agents/{id}/blocks.",
    ),
    FACTS: ("facts", "The agent's structured facts (active and shadow), most recently updated first."),
    PROMPT: (
        "built prompt",
        "The prompt the model sees next: the main context with the layers vcm injects (identity, state, "
        "sticky facts, relevant memory: the agent's own and its user's and domain's, each marked with its "
        "scope); the JSON of GET /v1/agents/{id}/context?built=true. Reading it changes nothing.",
    ),
}
BLOCK_TEMPLATE = SCHEME + "://agents/{agent_id}/blocks/{block_id}"
_URI = re.compile(r"^vcm://agents/(?P<agent>[^/?#]+)/(?P<kind>context|blocks|facts|prompt)(?:/(?P<block>[^/?#]+))?$")


def tool_names() -> tuple[str, ...]:
    return tuple(t["function"]["name"] for t in schemas.tool_schemas())


def mcp_tools() -> list[types.Tool]:
    """Every tool of :mod:`vcm.tools.schemas`, as an MCP tool definition."""
    return [_tool(spec["function"]) for spec in schemas.tool_schemas()]


def input_schema(name: str) -> dict[str, Any] | None:
    """The MCP input schema of one tool; None for a name vcm does not serve."""
    for spec in schemas.tool_schemas():
        if spec["function"]["name"] == name:
            return _relaxed(spec["function"]["parameters"])
    return None


def _tool(function: dict[str, Any]) -> types.Tool:
    return types.Tool(
        name=function["name"],
        title=function["name"].replace("_", " "),
        description=function.get("description"),
        input_schema=_relaxed(function["parameters"]),
    )


def _relaxed(parameters: dict[str, Any]) -> dict[str, Any]:
    out = dict(parameters)
    out["required"] = [r for r in parameters.get("required", []) if r != HEARTBEAT_ARG]
    return out


def arguments(given: dict[str, Any] | None) -> dict[str, Any]:
    """A call's arguments as the executor takes them: ``request_heartbeat`` false when absent."""
    args = dict(given or {})
    args.setdefault(HEARTBEAT_ARG, False)
    return args


def call_result(
    payload: dict[str, Any], text: str, *, ok: bool, meta: dict[str, Any] | None = None
) -> types.CallToolResult:
    """An MCP tool result: ``text`` is the payload as the model reads it (the tool message's
    content); ``meta`` rides in ``_meta`` under ``vcm``."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=payload,
        is_error=not ok,
        meta={"vcm": meta} if meta else None,
    )


def error_result(error: dict[str, Any]) -> types.CallToolResult:
    """A coded error (``VcmError.to_dict()``) raised around the executor, as a tool result."""
    payload = {"error": error}
    return call_result(payload, json.dumps(payload, ensure_ascii=False, separators=(",", ":")), ok=False)


# --- resources -----------------------------------------------------------------------------------------


def uri(agent_id: str, kind: str, block_id: str | None = None) -> str:
    base = f"{SCHEME}://agents/{agent_id}/{kind}"
    return f"{base}/{block_id}" if block_id is not None else base


@dataclass(frozen=True)
class Target:
    """What a resource URI names."""

    agent_id: str
    kind: str  # context | blocks | facts | prompt
    block_id: str | None = None


def parse(resource_uri: str) -> Target | None:
    """The target of a ``vcm://agents/{id}/...`` URI; None when it names nothing vcm serves."""
    m = _URI.match(resource_uri)
    if m is None or (m["block"] is not None and m["kind"] != BLOCKS):
        return None
    return Target(m["agent"], m["kind"], m["block"])


def resources(agent_id: str) -> list[types.Resource]:
    """The resources of one agent."""
    return [
        types.Resource(
            name=f"{agent_id} {_RESOURCES[k][0]}",
            title=_RESOURCES[k][0],
            uri=uri(agent_id, k),
            description=_RESOURCES[k][1],
            mime_type=MIME,
        )
        for k in _RESOURCES
    ]


def templates() -> list[types.ResourceTemplate]:
    out = [
        types.ResourceTemplate(
            name=_RESOURCES[k][0],
            uri_template=uri("{agent_id}", k),
            description=_RESOURCES[k][1],
            mime_type=MIME,
        )
        for k in _RESOURCES
    ]
    out.append(
        types.ResourceTemplate(
            name="working block",
            uri_template=BLOCK_TEMPLATE,
            description="One working block with its _rev; the JSON of GET /v1/agents/{id}/blocks/{block_id}.",
            mime_type=MIME,
        )
    )
    return out


def contents(resource_uri: str, data: Any) -> types.ReadResourceResult:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=resource_uri, mime_type=MIME, text=text)])
