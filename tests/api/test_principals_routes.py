"""Users and domains over the HTTP API and MCP (issue 37): the admin creates them and names an
agent's; a user's fact reaches the built prompt of each of its agents and no other user's agent; a
domain's reaches its agents only; an agent's shared write stays shadow until promoted; deleting the
user takes its facts out of every agent's view. Real uvicorn servers, the httpx client and the
official MCP client."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.api.conftest import ADMIN, LiveServer
from vcm.api.auth import TokenAuthority, admin_digest
from vcm.mcp.http import http_app
from vcm.service import MemoryService
from vcm.settings import Settings
from vcm.tools.executor import ToolExecutor

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def api(live: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=30) as client:
        yield client


@pytest.fixture
def mcp_url(service: MemoryService, settings: Settings) -> Iterator[str]:
    authority = TokenAuthority(service.hot.tokens, admin_digest(settings), rebuild=service.rebuild)
    with LiveServer(http_app(service, ToolExecutor(service), authority), lifespan="on") as server:
        yield f"{server.url}/mcp"


def mcp(url: str, token: str, calls: list[tuple[str, dict[str, Any]]], resource: str | None = None) -> list[Any]:
    """Tool calls (their JSON payloads) and, last, a resource read, in one MCP session."""

    async def run() -> list[Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            out: list[Any] = []
            for name, args in calls:
                result = await session.call_tool(name, {"request_heartbeat": False, **args})
                out.append(json.loads(result.content[0].text))  # type: ignore[union-attr]
            if resource is not None:
                out.append(json.loads((await session.read_resource(resource)).contents[0].text))  # type: ignore[union-attr]
            return out

    return asyncio.run(run())


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    return r.json()


@pytest.fixture
def tokens(api: httpx.Client) -> dict[str, str]:
    """ann and bob of user alice and domain support; cat of user carol; their tokens."""
    out = {}
    for agent in ("ann", "bob", "cat"):
        out[agent] = ok(api.post("/v1/agents", json={"agent_id": agent}, headers=ADMIN), 201)["token"]
    assert ok(api.post("/v1/users", json={"user_id": "alice"}, headers=ADMIN), 201)["kind"] == "user"
    ok(api.post("/v1/users", json={"user_id": "carol"}, headers=ADMIN), 201)
    ok(api.post("/v1/domains", json={"domain": "support"}, headers=ADMIN), 201)
    for agent, user, domain in (("ann", "alice", "support"), ("bob", "alice", "support"), ("cat", "carol", None)):
        body = ok(api.put(f"/v1/agents/{agent}/principals", json={"user_id": user, "domain": domain}, headers=ADMIN))
        assert body == {"agent_id": agent, "user_id": user, "domain": domain}
    return out


def as_agent(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def built(api: httpx.Client, agent: str, token: str, query: str = "") -> str:
    params = {"built": "true", **({"query": query} if query else {})}
    body = ok(api.get(f"/v1/agents/{agent}/context", params=params, headers=as_agent(token)))
    return "\n".join(str(m["content"]) for m in body["messages"])


def test_a_users_fact_reaches_its_agents_prompts_over_http_and_mcp_and_no_other_users(
    api: httpx.Client, tokens: dict[str, str], mcp_url: str
) -> None:
    fact = ok(api.post("/v1/agents/ann/facts", headers=ADMIN, json={
        "value": "Alice wants answers in French", "type": "sticky", "scope": "user"}))["fact"]  # fmt: skip
    assert (fact["scope"], fact["status"]) == ("user", "active")  # the admin's word: no promotion needed
    for agent in ("ann", "bob"):
        assert f"Alice wants answers in French [fact {fact['fact_id']}, user]" in built(api, agent, tokens[agent])
    assert "French" not in built(api, "cat", tokens["cat"])
    # MCP: ann's and bob's built prompts (the prompt resource), tools and facts resource see it,
    # marked; cat's see nothing of it.
    for agent in ("ann", "bob"):
        [prompt] = mcp(mcp_url, tokens[agent], [], f"vcm://agents/{agent}/prompt")
        said = "\n".join(str(m["content"]) for m in prompt["messages"])
        assert f"Alice wants answers in French [fact {fact['fact_id']}, user]" in said
    searched, listed = mcp(mcp_url, tokens["bob"], [("search_facts", {"query": "answers French"})],
                           "vcm://agents/bob/facts")  # fmt: skip
    assert [(f["fact_id"], f["scope"]) for f in searched["facts"]] == [(fact["fact_id"], "user")]
    assert [f["fact_id"] for f in listed["facts"]] == [fact["fact_id"]]
    [prompt] = mcp(mcp_url, tokens["cat"], [], "vcm://agents/cat/prompt")
    assert "French" not in "\n".join(str(m["content"]) for m in prompt["messages"])
    searched, listed = mcp(mcp_url, tokens["cat"], [("search_facts", {"query": "answers French"})],
                           "vcm://agents/cat/facts")  # fmt: skip
    assert searched["facts"] == [] and listed["facts"] == []
    # Exists-but-not-yours reads as missing.
    foreign = api.get(f"/v1/agents/cat/facts/{fact['fact_id']}", headers=as_agent(tokens["cat"]))
    missing = api.get("/v1/agents/cat/facts/f000000000000000000000", headers=as_agent(tokens["cat"]))
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"]["code"] == missing.json()["error"]["code"] == "NOT_FOUND"


def test_a_domain_fact_reaches_every_agent_of_the_domain_and_none_outside(
    api: httpx.Client, tokens: dict[str, str]
) -> None:
    ok(api.post("/v1/agents/bob/facts", headers=ADMIN, json={
        "value": "Refunds above 500 EUR need a manager", "type": "sticky", "scope": "domain"}))  # fmt: skip
    assert "Refunds above 500 EUR" in built(api, "ann", tokens["ann"])
    assert "Refunds above 500 EUR" in built(api, "bob", tokens["bob"])
    assert "Refunds" not in built(api, "cat", tokens["cat"])


def test_an_agents_shared_write_stays_shadow_until_promoted(
    api: httpx.Client, tokens: dict[str, str], mcp_url: str
) -> None:
    args = {"value": "Alice is allergic to peanuts", "type": "sticky", "scope": "user", "idempotency_key": "k1"}
    [wrote] = mcp(mcp_url, tokens["ann"], [("remember_fact", args)])
    fact = wrote["fact"]
    assert (fact["status"], fact["scope"]) == ("shadow", "user")  # an agent's word on what all believe
    assert "peanuts" not in built(api, "bob", tokens["bob"], "peanuts allergy")
    settled = ok(api.post(f"/v1/agents/bob/facts/{fact['fact_id']}/settle", json={"action": "promote"}, headers=ADMIN))
    assert settled["fact"]["status"] == "active"
    assert "Alice is allergic to peanuts" in built(api, "bob", tokens["bob"], "peanuts allergy")
    assert "peanuts" not in built(api, "cat", tokens["cat"], "peanuts allergy")


def test_deleting_the_user_removes_its_facts_from_every_agents_view(api: httpx.Client, tokens: dict[str, str]) -> None:
    ok(api.post("/v1/agents/ann/facts", headers=ADMIN, json={
        "value": "Alice's locker code is 4711", "type": "sticky", "scope": "user"}))  # fmt: skip
    assert "4711" in built(api, "bob", tokens["bob"])
    assert ok(api.delete("/v1/users/alice", headers=ADMIN)) == {
        "kind": "user",
        "name": "alice",
        "removed": {"facts": 1},
    }
    for agent in ("ann", "bob"):
        assert "4711" not in built(api, agent, tokens[agent])
        assert ok(api.get(f"/v1/agents/{agent}/facts", headers=as_agent(tokens[agent])))["facts"] == []
        assert ok(api.get(f"/v1/agents/{agent}/principals", headers=as_agent(tokens[agent])))["user_id"] is None
    assert [p["name"] for p in ok(api.get("/v1/users", headers=ADMIN))["principals"]] == ["carol"]


def test_principal_routes_are_admin_only_and_refuse_bad_input(api: httpx.Client, tokens: dict[str, str]) -> None:
    agent = as_agent(tokens["ann"])
    assert api.post("/v1/users", json={"user_id": "mallory"}, headers=agent).status_code == 401
    assert (
        api.put("/v1/agents/ann/principals", json={"user_id": "carol", "domain": None}, headers=agent).status_code
        == 401
    )
    assert api.delete("/v1/users/carol", headers=agent).status_code == 401
    refused = [
        api.post("/v1/users", json={"user_id": "a:b"}, headers=ADMIN),
        api.post("/v1/users", json={"user_id": "x", "role": "boss"}, headers=ADMIN),  # unknown parameter
        api.put("/v1/agents/ann/principals", json={"user_id": "alice"}, headers=ADMIN),  # both fields, always
    ]
    assert [(r.status_code, r.json()["error"]["code"]) for r in refused] == [(422, "VALIDATION_ERROR")] * 3
    assert api.post("/v1/users", json={"user_id": "alice"}, headers=ADMIN).json()["error"]["code"] == "CONFLICT"
    unknown = api.put("/v1/agents/ann/principals", json={"user_id": "nobody", "domain": None}, headers=ADMIN)
    assert unknown.status_code == 404
    assert ok(api.get("/v1/agents/ann/principals", headers=agent)) == {
        "agent_id": "ann", "user_id": "alice", "domain": "support"}  # fmt: skip
    assert [p["name"] for p in ok(api.get("/v1/users", headers=ADMIN))["principals"]] == ["alice", "carol"]


def test_a_users_state_key_set_by_the_admin_is_read_by_its_agents_only(
    api: httpx.Client, tokens: dict[str, str]
) -> None:
    put = ok(api.put("/v1/agents/ann/state/plan", json={"value": "gold", "scope": "user"}, headers=ADMIN))
    assert (put["value"], put["scope"]) == ("gold", "user")
    got = ok(api.get("/v1/agents/bob/state/plan", headers=as_agent(tokens["bob"])))
    assert (got["value"], got["scope"]) == ("gold", "user")
    assert api.get("/v1/agents/cat/state/plan", headers=as_agent(tokens["cat"])).status_code == 404
    refused = api.put("/v1/agents/bob/state/plan", json={"value": "free", "scope": "user"},
                      headers=as_agent(tokens["bob"]))  # fmt: skip
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "UNAUTHORIZED"
    gone = ok(api.delete("/v1/agents/ann/state/plan", params={"scope": "user"}, headers=ADMIN))
    assert gone["removed"] == {"state": 1}
    assert api.get("/v1/agents/bob/state/plan", headers=as_agent(tokens["bob"])).status_code == 404


def test_an_agent_created_with_its_user_says_so_and_an_unknown_user_creates_nothing(
    api: httpx.Client, tokens: dict[str, str]
) -> None:
    made = ok(api.post("/v1/agents", json={"agent_id": "dee", "user_id": "alice"}, headers=ADMIN), 201)
    assert (made["agent"]["user_id"], made["agent"]["domain"]) == ("alice", None)
    fact = ok(api.post("/v1/agents/ann/facts", headers=ADMIN, json={
        "value": "Alice's badge is blue", "type": "sticky", "scope": "user"}))["fact"]  # fmt: skip
    assert "Alice's badge is blue" in built(api, "dee", made["token"])
    assert ok(api.get("/v1/agents/bob", headers=as_agent(tokens["bob"])))["domain"] == "support"
    unknown = api.post("/v1/agents", json={"agent_id": "eve", "user_id": "nobody"}, headers=ADMIN)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "NOT_FOUND"
    assert "eve" not in ok(api.get("/v1/agents", headers=ADMIN))["agents"]
    assert fact["fact_id"] in {f["fact_id"] for f in ok(api.get("/v1/agents/dee/facts", headers=ADMIN))["facts"]}
