"""``vcm mcp`` over stdio as a real process on an embedded data directory, driven by the official
MCP client (``mcp.client.stdio``), against a real ``vcm serve`` on a twin data directory: the
same agent created the same way in each, the same tool calls (each over MCP, then at once through
``POST /v1/agents/{id}/tools/{name}``) must give the same payloads. A wrong token is refused
before anything is served."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from vcm.tools.schemas import TOOL_NAMES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

VCM = str(Path(sys.executable).with_name("vcm"))
ADMIN = "mcp-stdio-admin-token-0123456789"


def env_for(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env |= {
        "VCM_DATA_DIR": str(data),
        "VCM_RECALL__VECTORS": "false",
        "VCM_WORKER__PRELOAD_EMBEDDER": "false",
        "VCM_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
    }
    return env


def create_agent(data: Path, agent: str) -> str:
    done = subprocess.run(
        [VCM, "agents", "create", agent, "--model", "vcm-demo-2k"],
        env=env_for(data), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return str(json.loads(done.stdout)["token"])


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A ``vcm serve`` on its own data directory holding agent ``ana``: (base URL, ana's token)."""
    data = tmp_path / "api"
    token = create_agent(data, "ana")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [VCM, "serve", "--host", "127.0.0.1", "--port", str(port)],
        env={**env_for(data), "VCM_API__ADMIN_TOKEN": ADMIN}, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.2)
        yield url, token
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("append_fifo", {"role": "user", "content": "The ferry to Porto leaves at six.", "idempotency_key": "a1"}),
    ("append_fifo", {"role": "assistant", "content": "Noted: leaving at six o'clock.", "idempotency_key": "a2"}),
    ("write_recall", {"content": "Porto harbour timetable changes in winter.", "idempotency_key": "n1"}),
    ("search_recall", {"query": "Porto ferry", "mode": "text"}),
    ("store_core", {"block_id": "plan", "content": "Take the early ferry.", "idempotency_key": "s1"}),
    ("fetch_core", {}),
    ("store_core", {"block_id": "plan", "content": "stale", "_rev": "7", "idempotency_key": "s2"}),  # REV_CONFLICT
]


def comparable(payload: Any) -> Any:
    """Leaves out what two runs cannot share however correct they are: the times of search hits
    (to the second) and their BM25 scores (the text index takes new rows in the background), and
    the random id of the heartbeat chain a failed call starts."""
    if isinstance(payload, dict):
        return {k: comparable(v) for k, v in payload.items() if k not in ("at", "score", "chain_id")}
    if isinstance(payload, list):
        return [comparable(v) for v in payload]
    return payload


def test_stdio_mcp_gives_the_tool_routes_results(tmp_path: Path, api: tuple[str, str]) -> None:
    url, api_token = api
    data = tmp_path / "mcp"
    token = create_agent(data, "ana")
    params = StdioServerParameters(command=VCM, args=["mcp"], env={**env_for(data), "VCM_TOKEN": token})
    headers = {"Authorization": f"Bearer {api_token}"}

    def route(name: str, args: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(f"{url}/v1/agents/ana/tools/{name}", json={"arguments": args}, headers=headers, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    async def session() -> dict[str, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            init = await s.initialize()
            out: dict[str, Any] = {"server": init.server_info.name, "tools": await s.list_tools(), "pairs": []}
            for name, args in CALLS:
                got = await s.call_tool(name, {"request_heartbeat": False, **args})
                out["pairs"].append((name, got, route(name, {"request_heartbeat": False, **args})))
            context = await s.read_resource("vcm://agents/ana/context")
            out["context"] = json.loads(context.contents[0].text)  # type: ignore[union-attr]
            out["api_context"] = httpx.get(f"{url}/v1/agents/ana/context", headers=headers, timeout=60).json()
            return out

    out = asyncio.run(session())
    assert out["server"] == "vcm"
    assert [t.name for t in out["tools"].tools] == list(TOOL_NAMES)
    for name, got, via_route in out["pairs"]:
        assert got.is_error is (not via_route["ok"]), (name, got.structured_content, via_route)
        assert json.loads(got.content[0].text) == got.structured_content
        assert comparable(got.structured_content) == comparable(via_route["payload"]), name
    payloads = [got.structured_content for _, got, _ in out["pairs"]]
    hits = [h["content"] for h in payloads[3]["results"]]
    assert hits == ["The ferry to Porto leaves at six.", "Porto harbour timetable changes in winter."]
    assert payloads[5]["blocks"][0]["content"] == "Take the early ferry."
    assert payloads[6]["error"]["code"] == "REV_CONFLICT"
    assert out["context"] == out["api_context"]
    assert [m["content"] for m in out["context"]["messages"] if m["role"] == "user"] == [CALLS[0][1]["content"]]


def test_a_wrong_token_is_refused_before_serving(tmp_path: Path) -> None:
    data = tmp_path / "mcp"
    create_agent(data, "ana")
    forged = "vcm_" + base64.urlsafe_b64encode(b"ana").decode().rstrip("=") + ".not-the-secret"
    for argv, code in ((["--token", forged], "UNAUTHORIZED"), ([], "VALIDATION_ERROR")):
        done = subprocess.run(
            [VCM, "mcp", *argv], env=env_for(data), stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr[-2000:]
        assert f"error {code}" in done.stderr and done.stdout == ""
        assert forged not in done.stderr
