"""vcm.mcp.catalog: MCP tool definitions built from vcm.tools.schemas (a tool added there is
served as it is), call arguments and results, resource URIs. Pure."""

from __future__ import annotations

import json

import pytest

from vcm.mcp import catalog
from vcm.tools import schemas


def test_every_schema_tool_is_an_mcp_tool_with_an_optional_heartbeat() -> None:
    tools = catalog.mcp_tools()
    assert [t.name for t in tools] == list(schemas.TOOL_NAMES)
    for tool in tools:
        spec = schemas.schema_of(tool.name)
        assert tool.description and tool.input_schema["properties"] == spec["properties"]
        assert "request_heartbeat" in spec["required"] and "request_heartbeat" not in tool.input_schema["required"]
        assert set(tool.input_schema["required"]) == set(spec["required"]) - {"request_heartbeat"}
        assert tool.input_schema["additionalProperties"] is False
        assert catalog.input_schema(tool.name) == tool.input_schema
    assert catalog.input_schema("nope") is None


def test_a_tool_added_to_the_schemas_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    added = schemas._tool("recall_fact", "Look up a fact by key.", {"key": {"type": "string"}}, ["key"])
    monkeypatch.setattr(schemas, "_TOOLS", [*schemas._TOOLS, added])
    assert catalog.tool_names()[-1] == "recall_fact"
    tool = catalog.mcp_tools()[-1]
    assert (tool.name, tool.input_schema["required"]) == ("recall_fact", ["key"])


def test_arguments_default_the_heartbeat_to_false() -> None:
    assert catalog.arguments(None) == {"request_heartbeat": False}
    assert catalog.arguments({"query": "x", "request_heartbeat": True}) == {"query": "x", "request_heartbeat": True}


def test_results_carry_the_payload_as_structured_content_and_text() -> None:
    ok = catalog.call_result({"a": 1}, '{"a":1}', ok=True, meta={"tokens": 5})
    assert ok.is_error is False and ok.structured_content == {"a": 1} and ok.content[0].text == '{"a":1}'
    assert ok.meta == {"vcm": {"tokens": 5}}
    err = catalog.error_result({"code": "RATE_LIMITED", "message": "slow down"})
    assert err.is_error is True and json.loads(err.content[0].text) == err.structured_content
    assert err.structured_content == {"error": {"code": "RATE_LIMITED", "message": "slow down"}}


def test_resource_uris() -> None:
    assert catalog.parse("vcm://agents/a1/context") == catalog.Target("a1", "context")
    assert catalog.parse("vcm://agents/a1/blocks") == catalog.Target("a1", "blocks")
    assert catalog.parse("vcm://agents/a1/blocks/plan") == catalog.Target("a1", "blocks", "plan")
    assert catalog.parse("vcm://agents/a1/facts") == catalog.Target("a1", "facts")
    for bad in ("vcm://agents/a1/context/x", "vcm://agents/a1/secrets", "vcm://agents//context", "http://x/y",
                "vcm://agents/a1/blocks/a/b", "vcm://agents/a1/facts/f1"):  # fmt: skip
        assert catalog.parse(bad) is None, bad
    kinds = ("context", "blocks", "facts", "prompt")
    for kind in kinds:
        assert catalog.parse(catalog.uri("a1", kind)) == catalog.Target("a1", kind)
    assert [r.uri for r in catalog.resources("a1")] == [f"vcm://agents/a1/{k}" for k in kinds]
    assert [t.uri_template for t in catalog.templates()] == [
        *(f"vcm://agents/{{agent_id}}/{k}" for k in kinds),
        "vcm://agents/{agent_id}/blocks/{block_id}",
    ]
