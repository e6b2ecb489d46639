"""The Python client against a real uvicorn server on 127.0.0.1 (real HTTP), and its error mapping."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import httpx
import pytest

from tests.api.conftest import ADMIN_TOKEN, LiveServer, executor_for
from vcm import client as client_module
from vcm.client import AsyncVcmClient, VcmClient, tool_schemas
from vcm.errors import (
    ERRORS,
    Conflict,
    ErrorCode,
    IdempotencyMismatch,
    InternalError,
    NotFound,
    RateLimited,
    RevConflict,
    StoreUnavailable,
    TokenBudgetExceeded,
    Unauthorized,
    ValidationError,
    VcmError,
)
from vcm.service import MemoryService
from vcm.tools.schemas import tool_schemas as hotpath_tool_schemas


def test_every_operation_over_real_http(live: LiveServer, service: MemoryService) -> None:
    with VcmClient(live.url, ADMIN_TOKEN, timeout=10) as admin:
        created = admin.create_agent("alice", model="vcm-demo-4k", system_prompt="Be brief.")
        assert created["agent"]["window"] == 4096
        admin.create_agent("bob")
        assert admin.agents() == {"agents": ["alice", "bob"]}
        assert admin.health()["ok"] is True
        with pytest.raises(Conflict) as conflict:
            admin.create_agent("alice")
        assert conflict.value.code == "CONFLICT"

    with VcmClient(live.url, created["token"]) as me:
        assert me.agent("alice")["model"] == "vcm-demo-4k"
        first = me.append("alice", "user", "hello over http", idempotency_key="m-1", metadata={"via": "client"})
        assert me.append("alice", "user", "hello over http", idempotency_key="m-1", metadata={"via": "client"}) == {
            **first, "replayed": True,
        }  # fmt: skip
        with pytest.raises(IdempotencyMismatch):
            me.append("alice", "user", "something else", idempotency_key="m-1")
        me.append("alice", "assistant", "hi", name="bot")
        ctx = me.context("alice")
        assert [m["content"] for m in ctx["messages"][1:]] == ["hello over http", "hi"]
        assert ctx["gauges"]["total"] == sum(ctx["message_tokens"])

        rev = me.put_block("alice", "persona", "I like tea.", role="persona")["_rev"]
        assert me.block("alice", "persona")["_rev"] == rev
        with pytest.raises(RevConflict) as stale:
            me.put_block("alice", "persona", "I like coffee.", rev="999")
        assert stale.value.details["current_rev"] == rev
        rev2 = me.put_block("alice", "persona", "I like coffee.", rev=rev, pinned=True)["_rev"]
        assert [b["content"] for b in me.blocks("alice")["blocks"]] == ["I like coffee."]
        assert me.delete_block("alice", "persona", rev2, idempotency_key="d-1")["deleted"] is True
        with pytest.raises(NotFound):
            me.block("alice", "persona")

        # The two short messages above hold fewer tokens than the placeholder replacing them: an
        # eviction takes the next oldest too, until it frees room.
        before = me.append("alice", "user", "and a longer message, so that evicting up to it frees room")["total"]
        evicted = me.evict("alice", 1, idempotency_key="e-1")
        assert evicted["batch"]["message_ids"] == ["m1", "m2", "m3"] and evicted["total"] < before

        note = me.write_recall("alice", "the zebra crossed", idempotency_key="n-1")
        hits = me.search_recall("alice", "zebra", limit=5)
        assert [h["message"]["message_id"] for h in hits["items"]] == [note["message_id"]]
        assert me.search_recall("alice", "zebra", since=note["created_at"] + 10)["items"] == []

        job = me.ingest_archival("alice", "Dogs bark.\n\nCats purr.", source="pets", idempotency_key="i-1")
        assert job["job_id"].startswith("ing-") and job["status"] in ("queued", "running", "done")
        doc = me.wait_for_ingest("alice", job["job_id"], timeout=30)
        assert doc["status"] == "done" and doc["result"]["chunks"] == 2 and doc["chunks_done"] == 2
        assert me.ingest_job("alice", job["job_id"]) == doc
        found = me.search_archival("alice", "cats purr", k=1, filters={"source": "pets"})
        assert found["items"][0]["text"] == "Cats purr."
        more = me.search_archival("alice", "cats purr", k=1, filters={"source": "pets"}, cursor=found["next_cursor"])
        assert more["items"][0]["text"] == "Dogs bark."

        assert me.tools() == {"tools": tool_schemas()}
        if executor_for(service) is not None:
            out = me.call_tool("alice", "fetch_core", {"request_heartbeat": False}, tool_call_id="c-1")
            assert out["ok"] is True and out["tool_call_id"] == "c-1"
        kinds = [e["kind"] for e in me.events("alice", limit=100)["items"]]
        assert kinds[0] == "agent_created" and "core_write" in kinds and "archival_ingest" in kinds
        only = me.events("alice", kinds=["core_delete"])["items"]
        assert [e["payload"]["block_id"] for e in only] == ["persona"]

        # Nothing of bob's, and no admin routes.
        with pytest.raises(NotFound):
            me.context("bob")
        with pytest.raises(Unauthorized):
            me.agents()
        with pytest.raises(ValidationError) as bad:
            me.append("alice", "robot", "x")
        assert bad.value.details["field"] == "role"
        with pytest.raises(ValidationError):
            me.search_recall("alice", "zebra", cursor="garbage")

    with VcmClient(live.url, ADMIN_TOKEN) as admin:
        assert {e["agent_id"] for e in admin.all_events(kinds=["agent_created"])["items"]} == {"alice", "bob"}
        rotated = admin.rotate_token("alice")["token"]
    with VcmClient(live.url, created["token"]) as old, pytest.raises(Unauthorized):
        old.agent("alice")
    with VcmClient(live.url, rotated) as new:
        assert new.agent("alice")["agent_id"] == "alice"


def test_token_budget_errors_carry_the_headroom(live: LiveServer) -> None:
    with VcmClient(live.url, ADMIN_TOKEN) as admin:
        token = admin.create_agent("small", model="vcm-demo-2k")["token"]
    with VcmClient(live.url, token) as me, pytest.raises(TokenBudgetExceeded) as err:
        me.append("small", "user", "word " * 3000)
    assert err.value.details["required_headroom"] > 0
    assert err.value.to_dict()["code"] == "TOKEN_BUDGET_EXCEEDED"


def test_history_is_imported_with_the_times_it_was_said(live: LiveServer, service: MemoryService) -> None:
    """``created_at`` over real HTTP, as a datetime, seconds and a raw ISO 8601 string: the
    prompt's markers and the stored times are the caller's, the audit trail's vcm's own; a bad
    time is refused and changes nothing."""
    with VcmClient(live.url, ADMIN_TOKEN) as admin:
        token = admin.create_agent("importer", model="vcm-demo-4k")["token"]
    may8 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    with VcmClient(live.url, token) as me:
        first = me.append("importer", "user", "I went to a support group yesterday.", name="Caroline", created_at=may8)
        me.append("importer", "assistant", "How was it?", name="Melanie", created_at=may8.timestamp() + 60)
        raw = httpx.post(
            f"{live.url}/v1/agents/importer/messages",
            json={
                "role": "user",
                "content": "We adopted a dog!",
                "name": "Caroline",
                "created_at": "2023-05-20T10:00:00",
            },
            headers={"Authorization": f"Bearer {token}"},
        )
        assert raw.status_code == 200, raw.text
        before = me.context("importer")
        for bad in ("last tuesday", "2999-01-01T00:00:00Z"):
            with pytest.raises(ValidationError) as refused:
                me.append("importer", "user", "hello", created_at=bad)  # type: ignore[arg-type]
            assert refused.value.details["field"] == "created_at", refused.value.details
        assert me.context("importer") == before
    assert [m["content"] for m in before["messages"][1:]] == [
        "I went to a support group yesterday.", "How was it?", "[Sat 20 May 2023, 1 week later] We adopted a dog!",
    ]  # fmt: skip
    stored = service.store.get_messages("importer", [first["message_id"]])[0]
    assert stored.created_at == may8.timestamp()
    audit_row = next(e for e in service.store.query_events("importer", ["append"], limit=10).items
                     if e.payload.get("message_id") == first["message_id"])  # fmt: skip
    assert audit_row.created_at > may8.timestamp() + 365 * 86400  # when vcm took it: now


def test_a_conversation_is_imported_in_one_call(live: LiveServer, service: MemoryService) -> None:
    """``append_many`` over real HTTP: in order, with times; bad input appends nothing (the
    error names the message); the same list under its key again is a replay."""
    with VcmClient(live.url, ADMIN_TOKEN) as admin:
        token = admin.create_agent("bulk", model="vcm-demo-4k")["token"]
    chat = [
        {
            "role": "user",
            "content": "I moved to Porto.",
            "name": "Ann",
            "created_at": datetime(2023, 5, 8, 12, tzinfo=UTC),
        },
        {"role": "assistant", "content": "How is it?", "created_at": "2023-05-08T12:01:00Z"},
        {"role": "user", "content": "Sunny, every day.", "name": "Ann", "created_at": 1683806400.0},  # 11 May
    ]
    with VcmClient(live.url, token) as me:
        with pytest.raises(ValidationError) as refused:
            me.append_many("bulk", [*chat[:2], {**chat[2], "content": ["not", "text"]}])
        assert refused.value.details["field"] == "messages.2.content"
        assert me.context("bulk")["messages"][1:] == []
        done = me.append_many("bulk", chat, idempotency_key="import-1")["results"]
        assert [r["replayed"] for r in done] == [False] * 3
        again = me.append_many("bulk", chat, idempotency_key="import-1")["results"]
        assert [r["message_id"] for r in again] == [r["message_id"] for r in done] and all(r["replayed"] for r in again)
        said = [m["content"] for m in me.context("bulk")["messages"][1:]]
    assert said == ["I moved to Porto.", "How is it?", "[Thu 11 May 2023, 2 days later] Sunny, every day."]
    stored = service.store.get_messages("bulk", [r["message_id"] for r in done])
    assert sorted(m.created_at for m in stored) == [1683547200.0, 1683547260.0, 1683806400.0]


def test_the_async_client(live: LiveServer) -> None:
    async def run() -> None:
        async with AsyncVcmClient(live.url, ADMIN_TOKEN) as admin:
            token = (await admin.create_agent("alice"))["token"]
        async with AsyncVcmClient(live.url, token) as me:
            await asyncio.gather(*(me.append("alice", "user", f"m{i}", idempotency_key=f"k{i}") for i in range(5)))
            ctx = await me.context("alice")
            assert sorted(m["content"] for m in ctx["messages"][1:]) == [f"m{i}" for i in range(5)]
            with pytest.raises(NotFound):
                await me.block("alice", "nope")
            assert (await me.health())["ok"] is True

    asyncio.run(run())


def _mock(status: int, body: object, headers: dict[str, str] | None = None) -> VcmClient:
    def handler(request: httpx.Request) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.Response(status, content=content, headers=headers or {})

    return VcmClient("http://vcm.test", "t", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(
    ("status", "body", "headers", "cls", "code"),
    [
        (503, {"error": {"code": "STORE_UNAVAILABLE", "message": "down"}}, None, StoreUnavailable, "STORE_UNAVAILABLE"),
        (429, {"error": {"code": "RATE_LIMITED", "message": "slow"}}, {"Retry-After": "3"}, RateLimited,
         "RATE_LIMITED"),
        (500, {"error": {"code": "INTERNAL_ERROR", "message": "bug"}}, None, InternalError, "INTERNAL_ERROR"),
        (418, {"error": {"code": "TEAPOT", "message": "newer server"}}, None, VcmError, "TEAPOT"),
        (502, b"<html>bad gateway</html>", None, VcmError, "HTTP_502"),
        (404, {"detail": "not vcm"}, None, VcmError, "HTTP_404"),
    ],
)  # fmt: skip
def test_error_replies_become_typed_errors(
    status: int, body: object, headers: dict[str, str] | None, cls: type[VcmError], code: str
) -> None:
    with _mock(status, body, headers) as c, pytest.raises(cls) as err:
        c.context("alice")
    assert type(err.value) is cls
    assert err.value.code == code
    assert err.value.status == status
    if cls is RateLimited:
        assert err.value.details["retry_after_s"] == 3.0


@pytest.mark.parametrize("code", sorted(ErrorCode))
def test_the_client_raises_the_class_the_server_raised(code: str) -> None:
    # One tree, one table: what the service raises is rendered by the API's handler and comes
    # back out of the client as the very same class with the same details and status.
    from vcm.api.errors import coded

    server_side = ERRORS[code]("what went wrong", field="x", current_rev="r7")
    reply = coded(server_side)
    assert reply.status_code == server_side.http_status == server_side.status
    body = json.loads(bytes(reply.body))
    with _mock(reply.status_code, body, dict(reply.headers)) as c, pytest.raises(VcmError) as err:
        c.context("alice")
    assert type(err.value) is ERRORS[code]
    assert err.value.message == "what went wrong"
    assert err.value.details["field"] == "x" and err.value.details["current_rev"] == "r7"


def test_the_client_exports_the_tool_schemas() -> None:
    assert tool_schemas() == hotpath_tool_schemas()
    assert "tool_schemas" in client_module.__all__
