"""POST /v1/agents/{id}/tools/{name} through the real ToolExecutor, and how the app maps what an
executor raises (RATE_LIMITED, STORE_UNAVAILABLE, a bug) onto coded responses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import api_settings, executor_for, new_agent, state
from vcm.api.app import ToolOutcome, create_app
from vcm.dispatch import RecordingDispatcher
from vcm.errors import RateLimited, StoreUnavailable
from vcm.service import MemoryService


@pytest.fixture
def me(client: TestClient, service: MemoryService) -> dict[str, str]:
    if executor_for(service) is None:
        pytest.skip("vcm.tools.executor is not in this tree yet")
    return new_agent(client, "alice")


def call(client: TestClient, me: dict[str, str], name: str, headers: dict[str, str] | None = None,
         **arguments: Any) -> dict[str, Any]:  # fmt: skip
    r = client.post(
        f"/v1/agents/alice/tools/{name}",
        json={"arguments": {"request_heartbeat": False, **arguments}, "tool_call_id": "call-1"},
        headers={**me, **(headers or {})},
    )
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_tool_calls_run_through_the_executor(client: TestClient, me: dict[str, str]) -> None:
    stored = call(client, me, "store_core", block_id="persona", content="I like tea.", idempotency_key="s1")
    assert stored["ok"] is True and stored["name"] == "store_core" and stored["tool_call_id"] == "call-1"
    assert stored["message"]["role"] == "tool" and stored["message"]["tool_call_id"] == "call-1"
    rev = stored["payload"]["_rev"]
    fetched = call(client, me, "fetch_core", block_id="persona")
    assert fetched["ok"] and fetched["payload"]["_rev"] == rev and fetched["payload"]["token_estimate"] > 0
    appended = call(client, me, "append_fifo", role="user", content="hello", idempotency_key="a1")
    assert appended["ok"]
    ctx = client.get("/v1/agents/alice/context", headers=me).json()
    assert ctx["messages"][-1]["content"] == "hello"
    assert any("I like tea." in m["content"] for m in ctx["messages"])


def test_the_idempotency_key_header_reaches_the_tool(client: TestClient, me: dict[str, str]) -> None:
    key = {"Idempotency-Key": "hdr-1"}
    first = call(client, me, "append_fifo", headers=key, role="user", content="once")
    again = call(client, me, "append_fifo", headers=key, role="user", content="once")
    assert first["ok"] and again["ok"] and again["payload"].get("replayed") is True
    users = [m for m in client.get("/v1/agents/alice/context", headers=me).json()["messages"] if m["role"] == "user"]
    assert [m["content"] for m in users] == ["once"]
    clash = client.post(
        "/v1/agents/alice/tools/append_fifo",
        json={"arguments": {"role": "user", "content": "x", "idempotency_key": "other", "request_heartbeat": False}},
        headers={**me, **key},
    )
    assert clash.status_code == 422 and clash.json()["error"]["field"] == "idempotency_key"


def test_bad_arguments_are_a_result_for_the_model_and_change_no_memory(
    client: TestClient, me: dict[str, str], service: MemoryService, dispatcher: RecordingDispatcher
) -> None:
    def memory() -> dict[str, Any]:
        # The heartbeat chain does move (a failed call asks for a heartbeat so the model can read the
        # error; a chain that starts or ends is audited), and a failed call leaves its `error` row:
        # leave the chain's key and these request rows out.
        snap = state(service, dispatcher)
        snap["redis"] = {k: v for k, v in snap["redis"].items() if not k.endswith(":heartbeat")}
        snap["store"].pop("events")
        requests = ("heartbeat_end", "hb_start", "error")
        snap["events"] = [e.kind for e in service.events("alice").items if e.kind not in requests]
        return snap

    before = memory()
    for args in ({"role": "user"}, {"role": "robot", "content": "x"}, {"content": 5}, {"nonsense": True}):
        out = call(client, me, "append_fifo", **args)
        assert out["ok"] is False and out["payload"]["error"]["code"] == "VALIDATION_ERROR", out
    assert memory() == before


class _Raising:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def execute(
        self,
        agent_id: str,
        name: str,
        arguments: Mapping[str, Any],
        *,
        tool_call_id: str | None = None,
        actor: str = "agent",
        idempotency_key: str | None = None,
    ) -> ToolOutcome:
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "status", "code", "headers"),
    [
        (RateLimited("heartbeats too fast", retry_after_s=2.2), 429, "RATE_LIMITED", {"retry-after": "3"}),
        (RateLimited("heartbeats too fast"), 429, "RATE_LIMITED", {"retry-after": "1"}),
        (StoreUnavailable("the store is down"), 503, "STORE_UNAVAILABLE", {"retry-after": "1"}),
        (RuntimeError("a bug with a secret inside"), 500, "INTERNAL_ERROR", {}),
    ],
)
def test_what_an_executor_raises_is_coded(
    service: MemoryService, exc: Exception, status: int, code: str, headers: dict[str, str]
) -> None:
    settings = api_settings()
    app = create_app(service, _Raising(exc), settings=settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        me = new_agent(client, "alice")
        r = client.post("/v1/agents/alice/tools/fetch_core", json={"arguments": {}}, headers=me)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code
    for name, value in headers.items():
        assert r.headers[name] == value
    assert "secret" not in r.text


def test_without_an_executor_tool_calls_are_refused(service: MemoryService) -> None:
    with TestClient(create_app(service, None, settings=api_settings())) as client:
        me = new_agent(client, "alice")
        r = client.post("/v1/agents/alice/tools/fetch_core", json={"arguments": {}}, headers=me)
        assert r.status_code == 422 and "not configured" in r.json()["error"]["message"]
