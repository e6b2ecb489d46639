"""Retries across a restart replay: real embedded processes on one data directory.

``vcm serve`` acknowledges a keyed append and a keyed fact write and is SIGKILLed; ``vcm mcp``
over stdio (the official MCP client) makes two keyed tool calls on the same directory and
exits; a second ``vcm serve`` must answer every retry as the first call did (``replayed``, the
same ids) and hold one copy of each; it is SIGKILLed in turn and a second ``vcm mcp`` replays
the tool calls once more. The in-process hot state dies with each process: only the store keeps
the idempotency records."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.cli.test_restart import ADMIN, VCM, Server, _env, _up, free_port, wait_until
from vcm.client import VcmClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MODEL = "vcm-demo-2k"
APPEND = ("user", "Ana booked the ferry to Porto for six.")
FACT = "Ana's sister lives in Lyon."
TOOL_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("append_fifo", {"role": "user", "content": "The ferry leaves from pier 3.", "idempotency_key": "tool-a1"}),
    ("remember_fact", {"value": "Ana is allergic to peanuts.", "type": "preference", "idempotency_key": "tool-f1"}),
]


def _mcp(data_env: dict[str, str], token: str) -> list[dict[str, Any]]:
    """One ``vcm mcp`` process: the tool calls, answered as structured payloads."""
    params = StdioServerParameters(command=VCM[0], args=[*VCM[1:], "mcp"], env={**data_env, "VCM_TOKEN": token})

    async def session() -> list[dict[str, Any]]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            out = []
            for name, args in TOOL_CALLS:
                got = await s.call_tool(name, {"request_heartbeat": False, **args})
                assert not got.is_error, got.content
                out.append(json.loads(got.content[0].text))  # type: ignore[union-attr]
            return out

    return asyncio.run(session())


def _payload(reply: dict[str, Any]) -> dict[str, Any]:
    return dict(reply.get("payload", reply))


def test_keyed_writes_replay_after_sigkill_through_http_and_mcp(tmp_path: Path) -> None:
    port = free_port()
    env = {**_env(tmp_path), "VCM_WORKER__PRELOAD_EMBEDDER": "false"}
    server = Server(tmp_path, env, [*VCM, "serve", "--port", str(port)], "serve")
    admin = VcmClient(f"http://127.0.0.1:{port}", ADMIN)
    try:
        server.start()
        wait_until(_up(port), 90, "vcm serve")
        token = admin.create_agent("ana", model=MODEL)["token"]
        ana = VcmClient(f"http://127.0.0.1:{port}", token)
        first = ana.append("ana", *APPEND, idempotency_key="http-a1")
        fact = ana.remember("ana", FACT, type="preference", idempotency_key="http-f1")
        assert not first["replayed"] and fact["decision"] == "NEW"
        server.kill()  # SIGKILL: nothing but what reached the store survives

        tool_first = _mcp(env, token)  # vcm mcp on the same directory, ended in turn

        server.start()
        wait_until(_up(port), 90, "vcm serve after the kill")
        again = ana.append("ana", *APPEND, idempotency_key="http-a1")
        assert again["replayed"] and again["message_id"] == first["message_id"]
        fact_again = ana.remember("ana", FACT, type="preference", idempotency_key="http-f1")
        assert fact_again["decision"] == "REPLAYED" and fact_again["fact"]["fact_id"] == fact["fact"]["fact_id"]
        # The MCP calls retried through the tool route: the same executor, the same records.
        for (name, args), answered in zip(TOOL_CALLS, tool_first, strict=True):
            retried = _payload(ana.call_tool("ana", name, {"request_heartbeat": False, **args}))
            assert retried.get("replayed") is True, (name, retried)
            assert {k: v for k, v in retried.items() if k != "replayed"} == {
                k: v for k, v in answered.items() if k != "replayed"
            }
        contents = [m.get("content") for m in ana.context("ana")["messages"] if m.get("role") == "user"]
        assert contents.count(APPEND[1]) == 1 and contents.count(TOOL_CALLS[0][1]["content"]) == 1
        values = [f["value"] for f in ana.facts("ana")["facts"]]
        assert sorted(values) == sorted([FACT, TOOL_CALLS[1][1]["value"]])
        server.kill()

        tool_again = _mcp(env, token)  # a restarted vcm mcp replays too
        assert all(p.get("replayed") is True for p in tool_again), tool_again
        assert [p.get("message_id") for p in tool_again] == [p.get("message_id") for p in tool_first]
    except BaseException:
        print(server.log())
        raise
    finally:
        admin.close()
        server.kill()
