"""Bearer tokens: 401 without a valid one, admin-only routes, and agent isolation on every agent
route (another agent's memory answers exactly like a missing agent, and nothing changes)."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, ADMIN_TOKEN, bearer, new_agent, state
from vcm.api import auth
from vcm.api.app import create_app
from vcm.dispatch import RecordingDispatcher
from vcm.errors import ConfigError
from vcm.hotpath import keys
from vcm.service import MemoryService, doc_id_for, ingest_job_id, tokens
from vcm.settings import load_settings

BOB_DOC = "bob's secret document"
# The route matrices run on real Redis only: tokens are checked above the hot path, whose Redis
# flavours (fakeredis, Redis, Cluster) the route suites cover; three legs tripled their time.
ONE_REDIS = pytest.mark.parametrize("redis_client", ["redis"], indirect=True)
# The job of bob's document (ingested below): the same content always maps to this id.
BOB_JOB = ingest_job_id("bob", doc_id_for(BOB_DOC), BOB_DOC, "", {})

# (method, path under /v1/agents/{id}, json body, query params): one valid request per agent route.
AGENT_ROUTES: list[tuple[str, str, Any, dict[str, Any] | None]] = [
    ("GET", "", None, None),
    ("POST", "/messages", {"role": "user", "content": "let me in"}, None),
    ("GET", "/context", None, None),
    ("GET", "/blocks", None, None),
    ("GET", "/blocks/persona", None, None),
    ("PUT", "/blocks/persona", {"content": "overwritten", "_rev": "REV"}, None),
    ("DELETE", "/blocks/persona", None, {"_rev": "REV"}),
    ("POST", "/evictions", {"count": 1}, None),
    ("POST", "/recall", {"content": "planted", "idempotency_key": "k"}, None),
    ("GET", "/recall", None, {"query": "secret"}),
    ("POST", "/archival", {"text": "planted document"}, None),
    ("POST", "/archival/search", {"query": "secret"}, None),
    ("GET", f"/archival/jobs/{BOB_JOB}", None, None),
    ("POST", "/tools/fetch_core", {"arguments": {"request_heartbeat": False}}, None),
    ("GET", "/events", None, None),
]
ADMIN_ROUTES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/agents", {"agent_id": "mallory"}),
    ("GET", "/v1/agents", None),
    ("POST", "/v1/agents/alice/token", None),
    ("GET", "/v1/events", None),
    ("GET", "/v1/report", None),
]
EVERY_V1 = [(m, "/v1/agents/alice" + p, b, q) for m, p, b, q in AGENT_ROUTES] + [
    (m, p, b, None) for m, p, b in ADMIN_ROUTES
] + [("GET", "/v1/tools", None, None)]  # fmt: skip


def _fill(value: Any, rev: str) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, rev) for k, v in value.items()}
    return rev if value == "REV" else value


def _send(client: TestClient, method: str, path: str, body: Any, params: Any, headers: dict[str, str]) -> Any:
    return client.request(method, path, json=body, params=params, headers=headers)


@pytest.fixture
def two_agents(client: TestClient) -> tuple[dict[str, str], dict[str, str], str]:
    """alice and bob, bob with a block, a note and a document; alice's headers, bob's, bob's block rev."""
    alice = new_agent(client, "alice")
    bob = new_agent(client, "bob")
    rev = client.put("/v1/agents/bob/blocks/persona", json={"content": "bob's secret"}, headers=bob).json()["_rev"]
    client.post("/v1/agents/bob/messages", json={"role": "user", "content": "bob's secret message"}, headers=bob)
    client.post("/v1/agents/bob/recall", json={"content": "bob's secret note", "idempotency_key": "n"}, headers=bob)
    client.post("/v1/agents/bob/archival", json={"text": BOB_DOC}, headers=bob)
    return alice, bob, rev


@ONE_REDIS
@pytest.mark.parametrize(
    ("method", "path", "body", "params"), AGENT_ROUTES, ids=[f"{m} {p}" for m, p, _, _ in AGENT_ROUTES]
)
def test_an_agent_token_gets_nothing_of_another_agent(
    client: TestClient,
    service: MemoryService,
    dispatcher: RecordingDispatcher,
    two_agents: tuple[dict[str, str], dict[str, str], str],
    method: str,
    path: str,
    body: Any,
    params: Any,
) -> None:
    alice, bob, rev = two_agents
    body, params = _fill(body, rev), _fill(params, rev)
    before = state(service, dispatcher)
    r = _send(client, method, "/v1/agents/bob" + path, body, params, alice)
    assert r.status_code == 404, r.text
    assert r.json() == {"error": {"code": "NOT_FOUND", "message": "unknown agent 'bob'; create it first",
                                  "agent_id": "bob"}}  # fmt: skip
    assert "secret" not in r.text
    assert state(service, dispatcher) == before
    # Indistinguishable from an agent that does not exist, asked by the admin or by alice.
    ghost = _send(client, method, "/v1/agents/ghost" + path, body, params, alice)
    ghost_admin = _send(client, method, "/v1/agents/ghost" + path, body, params, ADMIN)
    assert ghost.status_code == ghost_admin.status_code == 404
    assert (
        ghost.json()
        == ghost_admin.json()
        == {"error": {"code": "NOT_FOUND", "message": "unknown agent 'ghost'; create it first", "agent_id": "ghost"}}
    )
    assert ghost.headers.keys() == r.headers.keys()
    # The same request is valid: bob (or the admin) gets through.
    own = _send(client, method, "/v1/agents/bob" + path, body, params, bob)
    assert own.status_code not in (401, 404), own.text


@ONE_REDIS
@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", "Basic YWRtaW46YWRtaW4=", "Bearer nope", "Bearer " + ADMIN_TOKEN + "x",
     "bearer vcm_Z2hvc3Q.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "Bearer vcm_%%%.x", "Bearer " + "a" * 600],
    ids=["none", "empty", "no-token", "blank", "basic", "garbage", "admin+x", "ghost-agent", "bad-b64", "huge"],
)  # fmt: skip
def test_no_valid_token_is_401_on_every_route(
    client: TestClient, service: MemoryService, dispatcher: RecordingDispatcher, authorization: str | None
) -> None:
    new_agent(client, "alice")
    before = state(service, dispatcher)
    headers = {} if authorization is None else {"Authorization": authorization}
    for method, path, body, params in EVERY_V1:
        r = _send(client, method, path, _fill(body, "1"), _fill(params, "1"), headers)
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["error"]["code"] == "UNAUTHORIZED"
        assert r.headers["WWW-Authenticate"] == 'Bearer realm="vcm"'
    assert state(service, dispatcher) == before


def test_tampered_and_transplanted_tokens_are_refused(client: TestClient) -> None:
    alice = new_agent(client, "alice")["Authorization"].removeprefix("Bearer ")
    new_agent(client, "bob")
    prefix, secret = alice.split(".")
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    bob_id = tokens.agent_token("bob").split(".")[0]  # bob's id with alice's secret
    for token in (f"{prefix}.{flipped}", f"{bob_id}.{secret}", alice + ".x", alice[:-1]):
        r = client.get("/v1/agents/alice", headers=bearer(token))
        assert r.status_code == 401, token
    assert client.get("/v1/agents/alice", headers=bearer(alice)).status_code == 200


@ONE_REDIS
@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ROUTES)
def test_admin_routes_refuse_agent_tokens(
    client: TestClient, service: MemoryService, dispatcher: RecordingDispatcher, method: str, path: str, body: Any
) -> None:
    alice = new_agent(client, "alice")
    before = state(service, dispatcher)
    r = client.request(method, path, json=body, headers=alice)
    assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"
    assert "admin" in r.json()["error"]["message"]
    assert state(service, dispatcher) == before


Agents = tuple[dict[str, str], dict[str, str], str]


def test_the_admin_reaches_every_agent(client: TestClient, two_agents: Agents) -> None:
    for agent in ("alice", "bob"):
        assert client.get(f"/v1/agents/{agent}/context", headers=ADMIN).status_code == 200
    assert client.get("/v1/agents/bob/blocks/persona", headers=ADMIN).json()["content"] == "bob's secret"


def test_tokens_are_stored_only_as_hashes(client: TestClient, service: MemoryService) -> None:
    r = client.post("/v1/agents", json={"agent_id": "alice"}, headers=ADMIN)
    token = r.json()["token"]
    assert token.startswith("vcm_") and len(token.split(".")[1]) >= 43
    redis = service.hot.redis
    assert redis.get(keys.key("alice", keys.TOKEN)) == hashlib.sha256(token.encode()).hexdigest()
    for k in redis.scan_iter(match="*"):
        dumped = redis.dump(k) or b""
        assert token.encode() not in dumped and token.split(".")[1].encode() not in dumped
    # Shown once: nothing returns it again.
    for path in ("/v1/agents/alice", "/v1/agents/alice/events", "/v1/agents/alice/context"):
        assert token not in client.get(path, headers=ADMIN).text


def test_secrets_never_reach_the_log(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    token = client.post("/v1/agents", json={"agent_id": "alice"}, headers=ADMIN).json()["token"]
    client.get("/v1/agents/alice", headers=bearer(token))
    client.get("/v1/agents/alice", headers=bearer(token + "x"))
    client.get("/v1/agents/alice", headers=bearer(ADMIN_TOKEN[:-1]))
    text = "\n".join(f"{r.getMessage()} {r.args!r} {r.exc_text or ''}" for r in caplog.records)
    assert token not in text and token.split(".")[1] not in text and ADMIN_TOKEN not in text


def test_the_admin_token_is_a_secret_setting() -> None:
    settings = load_settings({"api": {"admin_token": ADMIN_TOKEN}}, environ={})
    assert ADMIN_TOKEN not in repr(settings) and ADMIN_TOKEN not in str(settings.model_dump())
    with pytest.raises(ConfigError) as err:
        load_settings(environ={"VCM_API__ADMIN_TOKEN": "short-secret"})
    assert "short-secret" not in str(err.value) and "VCM_API__ADMIN_TOKEN" in str(err.value)


def test_no_app_without_an_admin_token(service: MemoryService) -> None:
    empty = load_settings(environ={})
    with pytest.raises(ConfigError, match="admin_token"):
        create_app(service, None, settings=empty)
    settings, generated = auth.with_admin_token(empty)
    assert generated is not None and len(generated) >= 40
    assert settings.api.admin_token.get_secret_value() == generated
    assert auth.with_admin_token(settings) == (settings, None)  # a configured token is kept
    with TestClient(create_app(service, None, settings=settings)) as c:
        assert c.get("/v1/agents", headers=bearer(generated)).status_code == 200
        assert c.get("/v1/agents", headers=ADMIN).status_code == 401


@pytest.mark.parametrize("agent_id", ["a", "alice", "agent.v2", "x-y_z", "A" * 128, "0"])
def test_agent_tokens_name_their_agent(agent_id: str) -> None:
    token = tokens.agent_token(agent_id)
    assert auth.agent_of(token) == agent_id
    assert auth.agent_of(token.replace(".", "")) is None


@pytest.mark.parametrize("token", ["", "vcm_", "vcm_.", "vcm_!!.x", "xyz_YWxpY2U.x", "vcm_YWxpY2U.x.y", "vcm_LmJhZA.x"])
def test_malformed_agent_tokens_name_nobody(token: str) -> None:
    assert auth.agent_of(token) is None


def test_a_retried_token_rotation_answers_with_the_same_token_and_revokes_nothing(client: TestClient) -> None:
    old = new_agent(client, "alice")
    rotate = {**ADMIN, "Idempotency-Key": "rotate-1"}
    first = client.post("/v1/agents/alice/token", headers=rotate)
    again = client.post("/v1/agents/alice/token", headers=rotate)
    assert first.status_code == again.status_code == 200
    token = first.json()["token"]
    assert again.json()["token"] == token
    assert client.get("/v1/agents/alice", headers=bearer(token)).status_code == 200
    assert client.get("/v1/agents/alice", headers=old).status_code == 401
    # A later rotation wins; retrying the earlier one answers as it did but does not undo it.
    newer = client.post("/v1/agents/alice/token", headers=ADMIN).json()["token"]
    late = client.post("/v1/agents/alice/token", headers=rotate)
    assert late.json()["token"] == token
    assert client.get("/v1/agents/alice", headers=bearer(newer)).status_code == 200
    assert client.get("/v1/agents/alice", headers=bearer(token)).status_code == 401
