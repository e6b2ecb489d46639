"""Seed 000's nine tools called with exactly its argument names through the HTTP tool route and
over MCP (the official ``mcp`` client over streamable HTTP, on a real uvicorn server), each
result checked for the seed's fields (tests/tools/seed_api.py holds the calls and the table)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.api.conftest import LiveServer, embed, new_agent
from tests.tools.seed_api import check_seed_run, run_seed_calls
from vcm.api.auth import TokenAuthority, admin_digest
from vcm.mcp.http import http_app
from vcm.service import MemoryService
from vcm.settings import Settings
from vcm.tools.executor import ToolExecutor

pytestmark = pytest.mark.timeout(120)


def test_the_seed_calls_through_the_tool_route(client: TestClient) -> None:
    me = new_agent(client, "alice")

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        r = client.post(f"/v1/agents/alice/tools/{name}", json={"arguments": args}, headers=me)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["name"] == name and body["ok"] is ("error" not in body["payload"])
        return body["payload"]  # type: ignore[no-any-return]

    check_seed_run(asyncio.run(run_seed_calls(call, embed)))


def test_the_seed_calls_over_mcp(client: TestClient, service: MemoryService, settings: Settings) -> None:
    me = new_agent(client, "bob")
    token = me["Authorization"].removeprefix("Bearer ")
    authority = TokenAuthority(service.hot.tokens, admin_digest(settings), rebuild=service.rebuild)

    async def over_mcp(url: str) -> dict[str, Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()

            async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
                result = await session.call_tool(name, args)
                payload = result.structured_content
                assert payload is not None and result.is_error is ("error" in payload), (name, payload)
                return payload

            return await run_seed_calls(call, embed)

    with LiveServer(http_app(service, ToolExecutor(service), authority), lifespan="on") as live:
        out = asyncio.run(over_mcp(f"{live.url}/mcp"))
    check_seed_run(out)
