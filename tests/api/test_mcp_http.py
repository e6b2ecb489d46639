"""``vcm mcp`` over streamable HTTP: the official MCP client against the MCP app on a real uvicorn
server (in a thread, on a free loopback port), next to the HTTP API on the same service. The same
tool calls through both must give the same payloads (the MCP call first, then the route: a write
repeated under its idempotency key is a replay of the MCP one), the resources read as the API's
JSON, and a wrong token never gets in."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from tests.api.conftest import ADMIN_TOKEN, LiveServer, new_agent
from vcm.api.auth import TokenAuthority, admin_digest
from vcm.errors import VcmError
from vcm.mcp.http import http_app
from vcm.mcp.server import Session, session_for
from vcm.service import MemoryService
from vcm.settings import Settings
from vcm.tools.executor import ToolExecutor
from vcm.tools.schemas import TOOL_NAMES, schema_of

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def mcp_url(service: MemoryService, settings: Settings) -> Any:
    authority = TokenAuthority(service.hot.tokens, admin_digest(settings), rebuild=service.rebuild)
    with LiveServer(http_app(service, ToolExecutor(service), authority), lifespan="on") as live:
        yield f"{live.url}/mcp"


def token_of(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


def with_session(url: str, token: str, body: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await body(session)

    return asyncio.run(run())


def settled(payload: dict[str, Any]) -> dict[str, Any]:
    """A payload without its hits' BM25 scores: the text index takes in new messages in the
    background, and until it has, they are scored apart (same hits, same order, other scores)."""
    if "results" not in payload:
        return payload
    return {**payload, "results": [{k: v for k, v in hit.items() if k != "score"} for hit in payload["results"]]}


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, as the SDK's task groups raise them."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in leaves(e)]
    return [exc]


def route(client: TestClient, headers: dict[str, str], agent: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    r = client.post(f"/v1/agents/{agent}/tools/{name}", json={"arguments": args}, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


# (tool, arguments, whether the route's repeat under the same key says "replayed": write_recall's
# result is the first note's either way).
CALLS: list[tuple[str, dict[str, Any], bool]] = [
    ("append_fifo", {"role": "user", "content": "The ferry to Porto leaves at six.", "idempotency_key": "a1"}, True),
    ("write_recall", {"content": "Porto harbour timetable changes in winter.", "idempotency_key": "n1"}, False),
    ("store_core", {"block_id": "plan", "content": "Take the early ferry.", "idempotency_key": "s1"}, True),
    ("search_recall", {"query": "Porto ferry", "mode": "text"}, False),
    ("fetch_core", {}, False),
]


def test_tool_calls_over_mcp_match_the_tool_route(client: TestClient, service: MemoryService, mcp_url: str) -> None:
    me = new_agent(client, "alice")

    async def calls(session: ClientSession) -> dict[str, Any]:
        listed = await session.list_tools()
        out: dict[str, Any] = {"tools": listed.tools, "results": [], "routes": []}
        for name, args, _ in CALLS:  # each call over MCP, then at once the same call through the route
            out["results"].append(await session.call_tool(name, {"request_heartbeat": False, **args}))
            out["routes"].append(route(client, me, "alice", name, {"request_heartbeat": False, **args}))
        # request_heartbeat may be left out over MCP: it means false.
        out["bare"] = await session.call_tool("search_recall", {"query": "Porto ferry", "mode": "text"})
        return out

    got = with_session(mcp_url, token_of(me), calls)

    # The tool list is vcm.tools.schemas', request_heartbeat optional.
    assert [t.name for t in got["tools"]] == list(TOOL_NAMES)
    for tool in got["tools"]:
        schema = schema_of(tool.name)
        assert tool.input_schema["properties"] == schema["properties"]
        assert tool.input_schema["required"] == [r for r in schema["required"] if r != "request_heartbeat"]

    for (name, _, replays), result, via_route in zip(CALLS, got["results"], got["routes"], strict=True):
        assert result.is_error is False, (name, result.structured_content)
        payload = result.structured_content
        assert json.loads(result.content[0].text) == payload  # the text block is the same payload
        # The route repeats each write under its key: the MCP call's result comes back, replayed.
        assert via_route["ok"] is True
        assert settled(via_route["payload"]) == settled({**payload, "replayed": True} if replays else payload), name
    appended, noted, stored, found, fetched = (r.structured_content for r in got["results"])
    assert [h["id"] for h in found["results"]] == [appended["message_id"], noted["message_id"]]
    assert fetched["blocks"][0]["_rev"] == stored["_rev"]
    assert settled(got["bare"].structured_content) == settled(found)
    users = [m for m in client.get("/v1/agents/alice/context", headers=me).json()["messages"] if m["role"] == "user"]
    assert [m["content"] for m in users] == ["The ferry to Porto leaves at six."]  # once, whichever entry point


def test_coded_errors_over_mcp_are_the_routes(client: TestClient, mcp_url: str) -> None:
    me = new_agent(client, "alice")
    route(client, me, "alice", "store_core", {"block_id": "plan", "content": "v1", "idempotency_key": "s1",
                                              "request_heartbeat": False})  # fmt: skip
    stale = {"block_id": "plan", "content": "v2", "_rev": "99", "idempotency_key": "s2", "request_heartbeat": False}
    bad = {"role": "user", "idempotency_key": "x", "request_heartbeat": False}  # no content

    async def calls(session: ClientSession) -> list[Any]:
        return [await session.call_tool("store_core", stale), await session.call_tool("append_fifo", bad)]

    results = with_session(mcp_url, token_of(me), calls)
    for (name, args), result in zip([("store_core", stale), ("append_fifo", bad)], results, strict=True):
        assert result.is_error is True
        via_route = route(client, me, "alice", name, args)
        assert via_route["ok"] is False
        # A failed call asks for a heartbeat (its depth moves on from call to call): compare the rest.
        mcp_payload = {k: v for k, v in result.structured_content.items() if k != "heartbeat"}
        assert {k: v for k, v in via_route["payload"].items() if k != "heartbeat"} == mcp_payload
    assert results[0].structured_content["error"]["code"] == "REV_CONFLICT"
    assert results[0].structured_content["error"]["current_rev"] == "1"
    invalid = results[1].structured_content["error"]
    assert (invalid["code"], invalid["field"]) == ("VALIDATION_ERROR", "content")

    async def unknown(session: ClientSession) -> MCPError | None:
        try:
            await session.call_tool("no_such_tool", {})
        except MCPError as exc:  # a protocol error, as MCP has it for an unknown tool
            return exc
        return None

    err = with_session(mcp_url, token_of(me), unknown)
    assert err is not None and err.code == INVALID_PARAMS and "no_such_tool" in err.message


def test_resources_read_as_the_api_does(client: TestClient, service: MemoryService, mcp_url: str) -> None:
    me = new_agent(client, "alice", system_prompt="You keep notes about the harbour.")
    new_agent(client, "bob")
    route(client, me, "alice", "store_core", {"block_id": "plan", "content": "Take the early ferry.",
                                              "idempotency_key": "s1", "request_heartbeat": False})  # fmt: skip
    route(client, me, "alice", "append_fifo", {"role": "user", "content": "hello", "idempotency_key": "a1",
                                               "request_heartbeat": False})  # fmt: skip
    service.remember("alice", "Alice prefers the early ferry", type="preference")

    async def reads(session: ClientSession) -> dict[str, Any]:
        listed = await session.list_resources()
        templates = await session.list_resource_templates()
        out: dict[str, Any] = {
            "uris": [r.uri for r in listed.resources],
            "templates": [t.uri_template for t in templates.resource_templates],
        }
        for what in ("context", "blocks", "blocks/plan", "facts"):
            contents = (await session.read_resource(f"vcm://agents/alice/{what}")).contents[0]
            assert contents.mime_type == "application/json"
            out[what] = json.loads(contents.text)  # type: ignore[union-attr]
        out["refused"] = []
        for uri in ("vcm://agents/bob/context", "vcm://agents/nobody/blocks", "vcm://agents/alice/blocks/none",
                    "vcm://agents/alice/secrets"):  # fmt: skip
            try:
                await session.read_resource(uri)
                out["refused"].append(None)
            except MCPError as exc:
                out["refused"].append((exc.code, (exc.data or {}).get("error", {}).get("code")))
        return out

    got = with_session(mcp_url, token_of(me), reads)
    assert got["uris"] == [f"vcm://agents/alice/{k}" for k in ("context", "blocks", "facts", "prompt")]
    assert "vcm://agents/{agent_id}/blocks/{block_id}" in got["templates"]
    assert got["context"] == client.get("/v1/agents/alice/context", headers=me).json()
    assert got["blocks"] == client.get("/v1/agents/alice/blocks", headers=me).json()
    assert got["blocks/plan"] == client.get("/v1/agents/alice/blocks/plan", headers=me).json()
    assert [f["value"] for f in got["facts"]["facts"]] == ["Alice prefers the early ferry"]
    assert "embedding" not in got["facts"]["facts"][0]
    # Bob's context reads exactly like a missing agent's; an unknown block is NOT_FOUND too.
    assert got["refused"] == [
        (INVALID_PARAMS, "NOT_FOUND"), (INVALID_PARAMS, "NOT_FOUND"), (INVALID_PARAMS, "NOT_FOUND"),
        (INVALID_PARAMS, None),
    ]  # fmt: skip


def initialize(url: str, headers: dict[str, str]) -> httpx.Response:
    body = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }  # fmt: skip
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    return httpx.post(url, json=body, headers={**accept, **headers}, timeout=30)


def test_a_wrong_token_is_refused(client: TestClient, mcp_url: str) -> None:
    me = new_agent(client, "alice")
    bob = new_agent(client, "bob")
    forged = "vcm_" + base64.urlsafe_b64encode(b"alice").decode().rstrip("=") + ".not-the-secret"
    for headers in ({}, {"Authorization": "Bearer nonsense"}, {"Authorization": f"Bearer {forged}"},
                    {"Authorization": f"Bearer {ADMIN_TOKEN}"}, {"Authorization": "Basic abc"}):  # fmt: skip
        r = initialize(mcp_url, headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.json()["error"]["code"] == "UNAUTHORIZED" and r.headers["WWW-Authenticate"].startswith("Bearer")
        assert "mcp-session-id" not in r.headers

    async def nothing(session: ClientSession) -> None:
        return None

    with pytest.raises(Exception) as refused:  # the SDK client cannot even initialize
        with_session(mcp_url, forged, nothing)
    assert any(isinstance(e, MCPError) for e in leaves(refused.value)), refused.value

    # A session belongs to the agent that opened it: bob's token cannot use alice's session.
    opened = initialize(mcp_url, me)
    assert opened.status_code == 200 and opened.headers["mcp-session-id"]
    session_id = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    common = {"Accept": "application/json, text/event-stream", "mcp-session-id": session_id,
              "mcp-protocol-version": "2025-06-18"}  # fmt: skip
    hijack = httpx.post(mcp_url, json=listing, headers={**common, **bob}, timeout=30)
    assert hijack.status_code == 404


def test_a_stdio_session_serves_the_agent_of_its_token(client: TestClient, service: MemoryService,
                                                       settings: Settings) -> None:  # fmt: skip
    alice = token_of(new_agent(client, "alice"))
    new_agent(client, "bob")
    authority = TokenAuthority(service.hot.tokens, admin_digest(settings), rebuild=service.rebuild)
    assert session_for(authority, service, alice) == Session("alice", "mcp:agent:alice")
    assert session_for(authority, service, alice, "alice") == Session("alice", "mcp:agent:alice")
    assert session_for(authority, service, ADMIN_TOKEN, "bob") == Session("bob", "mcp:admin")
    refused = [
        (alice + "x", None), ("nonsense", None), (alice, "bob"),  # another agent reads like a missing one
        (ADMIN_TOKEN, None), (ADMIN_TOKEN, "nobody"), (ADMIN_TOKEN, "../bob"),
    ]  # fmt: skip
    codes = []
    for token, agent in refused:
        with pytest.raises(VcmError) as err:
            session_for(authority, service, token, agent)
        codes.append(err.value.code)
    assert codes == ["UNAUTHORIZED", "UNAUTHORIZED", "NOT_FOUND", "VALIDATION_ERROR", "NOT_FOUND", "VALIDATION_ERROR"]
