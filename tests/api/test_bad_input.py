"""Bad input is a coded 4xx, never a 500, and changes no state (Redis keys, idempotency records,
store counts and cold-path dispatches are compared before and after every request).

The TestClient re-raises any exception that reaches the catch-all, so a 500 fails loudly here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, api_settings, new_agent, state
from vcm.api.app import create_app
from vcm.dispatch import RecordingDispatcher
from vcm.service import MemoryService


@dataclass(frozen=True)
class Bad:
    name: str
    method: str
    path: str
    status: int
    code: str = "VALIDATION_ERROR"
    field: str | None = None
    json: Any = None
    content: bytes | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    admin: bool = False
    message: str | None = None  # a part the error message must contain


def raw(text: str) -> bytes:
    return text.encode("utf-8")


JSON = {"Content-Type": "application/json"}
MSG = "/v1/agents/alice/messages"
OK_MSG = {"role": "user", "content": "hello"}

MESSAGES = [
    Bad("bad JSON", "POST", MSG, 422, field="body", content=b"{bad", headers=JSON),
    Bad("not UTF-8", "POST", MSG, 422, field="body", content=b'{"role":"user","content":"\xff\xfe"}', headers=JSON),
    Bad("latin-1 body", "POST", MSG, 422, field="body", content='{"content":"café"}'.encode("latin-1"), headers=JSON),
    Bad("JSON array", "POST", MSG, 422, json=[OK_MSG]),
    Bad("JSON string", "POST", MSG, 422, json="hello"),
    Bad("empty body", "POST", MSG, 422, content=b"", headers=JSON),
    Bad("no content type", "POST", MSG, 422, content=json.dumps(OK_MSG).encode()),
    Bad("text/plain", "POST", MSG, 422, content=json.dumps(OK_MSG).encode(), headers={"Content-Type": "text/plain"}),
    Bad("content is a number", "POST", MSG, 422, field="content", json={"role": "user", "content": 5}),
    Bad("content is null", "POST", MSG, 422, field="content", json={"role": "user", "content": None}),
    Bad("pinned is a string", "POST", MSG, 422, field="pinned", json={**OK_MSG, "pinned": "yes"}),
    Bad("pinned is 1", "POST", MSG, 422, field="pinned", json={**OK_MSG, "pinned": 1}),
    Bad("metadata is a list", "POST", MSG, 422, field="metadata", json={**OK_MSG, "metadata": []}),
    Bad("tool_calls is a string", "POST", MSG, 422, field="tool_calls", json={**OK_MSG, "tool_calls": "x"}),
    Bad("empty content", "POST", MSG, 422, field="content", json={"role": "user", "content": ""}),
    Bad("blank content", "POST", MSG, 422, field="content", json={"role": "user", "content": " \n\t "}),
    Bad("huge content", "POST", MSG, 422, field="content", json={"role": "user", "content": "x" * 400_001}),
    Bad("invalid role", "POST", MSG, 422, field="role", json={"role": "robot", "content": "hi"}),
    Bad("missing role", "POST", MSG, 422, field="role", json={"content": "hi"}),
    Bad("unknown field", "POST", MSG, 422, field="colour", json={**OK_MSG, "colour": "red"}),
    Bad("lone surrogate", "POST", MSG, 422, field="body", content=raw('{"role":"user","content":"a\\ud800b"}'),
        headers=JSON),
    Bad("surrogate key", "POST", MSG, 422, content=raw('{"role":"user","content":"a","\\udfff":1}'), headers=JSON),
    Bad("NaN in metadata", "POST", MSG, 422, field="body", content=raw('{"role":"user","content":"a","metadata":'
        '{"x":NaN}}'), headers=JSON),
    Bad("Infinity in tool_calls", "POST", MSG, 422, content=raw('{"role":"user","content":"a","tool_calls":'
        '[{"x":Infinity}]}'), headers=JSON),
    Bad("NUL in content", "POST", MSG, 422, field="content", json={"role": "user", "content": "a\x00b"}),
    Bad("bad name", "POST", MSG, 422, field="name", json={**OK_MSG, "name": "two words"}),
    Bad("long idempotency key", "POST", MSG, 422, field="idempotency_key", json=OK_MSG,
        headers={"Idempotency-Key": "k" * 300}),
    Bad("keys differ", "POST", MSG, 422, field="idempotency_key", json={**OK_MSG, "idempotency_key": "a"},
        headers={"Idempotency-Key": "b"}),
    Bad("metadata too large", "POST", MSG, 422, field="metadata", json={**OK_MSG, "metadata": {"x": "y" * 20_000}}),
    # The message's bulk in tool-call arguments, with empty content: the size limit is the message's.
    Bad("huge tool_calls", "POST", MSG, 422, field="tool_calls", json={"role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "x" * 2_000_000}}]}),
    Bad("content + tool_calls over the limit", "POST", MSG, 422, field="tool_calls", json={"role": "assistant",
        "content": "x" * 300_000, "tool_calls": [{"id": "c1", "type": "function",
                                                   "function": {"name": "f", "arguments": "y" * 150_000}}]}),
    Bad("tool call not an object", "POST", MSG, 422, field="tool_calls.0", json={"role": "assistant", "content": "",
        "tool_calls": ["call f"]}),
    Bad("tool result without tool_call_id", "POST", MSG, 422, field="tool_call_id",
        json={"role": "tool", "content": "42"}),
    Bad("UTF-16 body", "POST", MSG, 422, field="body", content=json.dumps(OK_MSG).encode("utf-16"), headers=JSON,
        message="UTF-8 JSON without a byte order mark"),
    Bad("UTF-16-LE body, no BOM", "POST", MSG, 422, field="body", content=json.dumps(OK_MSG).encode("utf-16-le"),
        headers=JSON, message="UTF-8 JSON without a byte order mark"),
    Bad("UTF-8 BOM", "POST", MSG, 422, field="body", content=b"\xef\xbb\xbf" + json.dumps(OK_MSG).encode(),
        headers=JSON, message="UTF-8 JSON without a byte order mark"),
    Bad("5000-digit integer", "POST", MSG, 422, field="body",
        content=('{"role":"user","content":"a","metadata":{"n":' + "9" * 5000 + "}}").encode(), headers=JSON,
        message="integer too long"),
    Bad("deep nesting", "POST", MSG, 422, field="body",
        content=('{"role":"user","content":"a","metadata":' + "[" * 100_000 + "]" * 100_000 + "}").encode(),
        headers=JSON, message="nested too deeply"),
    Bad("deep metadata", "POST", MSG, 422, field="body",
        content=raw('{"role":"user","content":"a","metadata":' + '{"a":' * 100 + "1" + "}" * 101), headers=JSON),
    Bad("very deep JSON", "POST", MSG, 422, content=raw("[" * 100_000 + "]" * 100_000), headers=JSON),
    Bad("unknown agent", "POST", "/v1/agents/ghost/messages", 404, "NOT_FOUND", json=OK_MSG, admin=True),
    Bad("malformed agent id", "POST", "/v1/agents/bad%20id/messages", 422, field="agent_id", json=OK_MSG, admin=True),
    Bad("agent id too long", "POST", "/v1/agents/" + "a" * 129 + "/messages", 422, json=OK_MSG, admin=True),
]  # fmt: skip

BLOCK = "/v1/agents/alice/blocks/b1"
BLOCKS = [
    Bad("invalid block id", "PUT", "/v1/agents/alice/blocks/bad%20id", 422, field="block_id", json={"content": "x"}),
    Bad("block id too long", "PUT", "/v1/agents/alice/blocks/" + "b" * 65, 422, json={"content": "x"}),
    Bad("no content", "PUT", BLOCK, 422, field="content", json={"_rev": "REV"}),
    Bad("bad block role", "PUT", BLOCK, 422, field="role", json={"content": "x", "role": "two words", "_rev": "REV"}),
    Bad("empty _rev", "PUT", BLOCK, 422, field="_rev", json={"content": "x", "_rev": ""}),
    Bad("rev without underscore", "PUT", BLOCK, 422, field="rev", json={"content": "x", "rev": "REV"}),
    Bad("_rev is a number", "PUT", BLOCK, 422, field="_rev", json={"content": "x", "_rev": 1}),
    Bad("If-Match *", "PUT", BLOCK, 422, field="If-Match", json={"content": "x"}, headers={"If-Match": "*"}),
    Bad("If-Match list", "PUT", BLOCK, 422, field="If-Match", json={"content": "x"}, headers={"If-Match": '"1", "2"'}),
    Bad("If-Match and _rev differ", "PUT", BLOCK, 422, field="_rev", json={"content": "x", "_rev": "REV"},
        headers={"If-Match": '"other"'}),
    Bad("stale _rev", "PUT", BLOCK, 409, "REV_CONFLICT", json={"content": "x", "_rev": "999"}),
    Bad("stale If-Match", "PUT", BLOCK, 412, "REV_CONFLICT", json={"content": "x"}, headers={"If-Match": '"999"'}),
    Bad("create over existing", "PUT", BLOCK, 409, "REV_CONFLICT", json={"content": "x"}),
    Bad("pinned too large", "PUT", "/v1/agents/alice/blocks/big", 422, "PIN_LIMIT_EXCEEDED",
        json={"content": "word " * 40_000, "pinned": True}),
    Bad("delete without _rev", "DELETE", BLOCK, 422, field="_rev"),
    Bad("delete stale", "DELETE", BLOCK, 409, "REV_CONFLICT", params={"_rev": "999"}),
    Bad("delete unknown block", "DELETE", "/v1/agents/alice/blocks/nope", 404, "NOT_FOUND", params={"_rev": "1"}),
    Bad("get unknown block", "GET", "/v1/agents/alice/blocks/nope", 404, "NOT_FOUND"),
    Bad("get invalid block id", "GET", "/v1/agents/alice/blocks/-x", 422, field="block_id"),
]  # fmt: skip

RECALL = "/v1/agents/alice/recall"
SEARCH = "/v1/agents/alice/archival/search"
EVENTS = "/v1/agents/alice/events"
QUERIES = [
    Bad("no query", "GET", RECALL, 422, field="query"),
    Bad("empty query", "GET", RECALL, 422, field="query", params={"query": ""}),
    Bad("NUL query", "GET", RECALL, 422, field="query", params={"query": "a\x00b"}),
    Bad("limit 0", "GET", RECALL, 422, field="limit", params={"query": "a", "limit": 0}),
    Bad("limit huge", "GET", RECALL, 422, field="limit", params={"query": "a", "limit": 10**30}),
    Bad("limit text", "GET", RECALL, 422, field="limit", params={"query": "a", "limit": "ten"}),
    Bad("bad mode", "GET", RECALL, 422, field="mode", params={"query": "a", "mode": "fuzzy"}),
    Bad("since NaN", "GET", RECALL, 422, field="since", params={"query": "a", "since": "nan"}),
    Bad("until inf", "GET", RECALL, 422, field="until", params={"query": "a", "until": "inf"}),
    Bad("since text", "GET", RECALL, 422, field="since", params={"query": "a", "since": "yesterday"}),
    Bad("bad cursor", "GET", RECALL, 422, params={"query": "a", "cursor": "garbage"}),
    Bad("empty cursor", "GET", RECALL, 422, params={"query": "a", "cursor": ""}),
    Bad("forged cursor", "GET", RECALL, 422, params={"query": "a", "cursor": "eyJ2IjoxfQ.AAAA"}),
    Bad("archival k 0", "POST", SEARCH, 422, field="k", json={"query": "a", "k": 0}),
    Bad("archival k string", "POST", SEARCH, 422, field="k", json={"query": "a", "k": "5"}),
    Bad("archival filters string", "POST", SEARCH, 422, field="filters", json={"query": "a", "filters": "x"}),
    Bad("archival bad cursor", "POST", SEARCH, 422, json={"query": "a", "cursor": "garbage"}),
    Bad("archival empty query", "POST", SEARCH, 422, field="query", json={"query": ""}),
    Bad("archival no body", "POST", SEARCH, 422),
    Bad("events bad cursor", "GET", EVENTS, 422, params={"cursor": "garbage"}),
    Bad("events limit 0", "GET", EVENTS, 422, field="limit", params={"limit": 0}),
    Bad("events since NaN", "GET", EVENTS, 422, field="since", params={"since": "NaN"}),
    Bad("admin events bad agent", "GET", "/v1/events", 422, field="agent_id", params={"agent_id": "a b"}, admin=True),
    Bad("admin events bad cursor", "GET", "/v1/events", 422, params={"cursor": "x"}, admin=True),
]  # fmt: skip

INGEST = "/v1/agents/alice/archival"
WRITES = [
    Bad("ingest empty text", "POST", INGEST, 422, field="text", json={"text": ""}),
    Bad("ingest no text", "POST", INGEST, 422, field="text", json={}),
    Bad("ingest bad doc id", "POST", INGEST, 422, field="doc_id", json={"text": "a", "doc_id": "a b"}),
    Bad("ingest metadata string", "POST", INGEST, 422, field="metadata", json={"text": "a", "metadata": "x"}),
    Bad("ingest huge", "POST", INGEST, 422, field="text", json={"text": "x" * 5_000_001}),
    Bad("note without key", "POST", RECALL, 422, field="idempotency_key", json={"content": "a"}),
    Bad("note empty", "POST", RECALL, 422, field="content", json={"content": "", "idempotency_key": "k"}),
    Bad("note bad role", "POST", RECALL, 422, field="role", json={"content": "a", "role": "x", "idempotency_key": "k"}),
    Bad("evict 0", "POST", "/v1/agents/alice/evictions", 422, field="count", json={"count": 0}),
    Bad("evict string", "POST", "/v1/agents/alice/evictions", 422, field="count", json={"count": "1"}),
    Bad("evict too many", "POST", "/v1/agents/alice/evictions", 422, field="count", json={"count": 10_001}),
    Bad("evict bool", "POST", "/v1/agents/alice/evictions", 422, field="count", json={"count": True}),
    Bad("unknown tool", "POST", "/v1/agents/alice/tools/rm_rf", 404, "NOT_FOUND", json={"arguments": {}}),
    Bad("tool arguments string", "POST", "/v1/agents/alice/tools/fetch_core", 422, field="arguments",
        json={"arguments": "x"}),
    Bad("tool body list", "POST", "/v1/agents/alice/tools/fetch_core", 422, json=[]),
    Bad("tool call id too long", "POST", "/v1/agents/alice/tools/fetch_core", 422, field="tool_call_id",
        json={"arguments": {}, "tool_call_id": "x" * 300}),
    Bad("create bad id", "POST", "/v1/agents", 422, field="agent_id", json={"agent_id": "a b"}, admin=True),
    Bad("create unknown model", "POST", "/v1/agents", 422, field="model", json={"agent_id": "n", "model": "gpt-99"},
        admin=True),
    Bad("create prompt number", "POST", "/v1/agents", 422, field="system_prompt",
        json={"agent_id": "n", "system_prompt": 5}, admin=True),
    Bad("create tools string", "POST", "/v1/agents", 422, field="tools", json={"agent_id": "n", "tools": "x"},
        admin=True),
    Bad("create tools of numbers", "POST", "/v1/agents", 422, json={"agent_id": "n", "tools": [1]}, admin=True),
    Bad("create prompt too big", "POST", "/v1/agents", 422, "TOKEN_BUDGET_EXCEEDED",
        json={"agent_id": "n", "model": "vcm-demo-2k", "system_prompt": "word " * 3000}, admin=True),
    Bad("create existing, other config", "POST", "/v1/agents", 409, "CONFLICT",
        json={"agent_id": "alice", "system_prompt": "different"}, admin=True),
    Bad("no such route", "GET", "/v1/nothing", 404, "NOT_FOUND"),
    Bad("wrong method", "PATCH", "/v1/agents/alice/context", 405),
]  # fmt: skip


@pytest.fixture
def alice(client: TestClient) -> tuple[dict[str, str], str]:
    me = new_agent(client, "alice")
    client.post(MSG, json=OK_MSG, headers=me)
    rev = client.put(BLOCK, json={"content": "v1"}, headers=me).json()["_rev"]
    client.post(RECALL, json={"content": "a note", "idempotency_key": "n1"}, headers=me)
    client.post(INGEST, json={"text": "a document"}, headers=me)
    return me, rev


def _fill(value: Any, rev: str) -> Any:
    if isinstance(value, dict):
        return {k: _fill(v, rev) for k, v in value.items()}
    return rev if value == "REV" else value


def check(client: TestClient, service: MemoryService, dispatcher: RecordingDispatcher, me: dict[str, str],
          rev: str, cases: list[Bad]) -> None:  # fmt: skip
    for case in cases:
        before = state(service, dispatcher)
        headers = {**(ADMIN if case.admin else me), **case.headers}
        kwargs: dict[str, Any] = {"params": _fill(case.params, rev) or None, "headers": headers}
        if case.content is not None:
            kwargs["content"] = case.content
        elif case.json is not None:
            kwargs["json"] = _fill(case.json, rev)
        r = client.request(case.method, case.path, **kwargs)
        assert r.status_code == case.status, (case.name, r.status_code, r.text[:300])
        error = r.json()["error"]
        assert error["code"] == case.code, (case.name, error)
        assert error["message"], case.name
        if case.field is not None:
            assert error.get("field") == case.field, (case.name, error)
        if case.message is not None:
            assert case.message in error["message"], (case.name, error)
        assert state(service, dispatcher) == before, case.name


@pytest.mark.parametrize("cases", [MESSAGES, BLOCKS, QUERIES, WRITES], ids=["messages", "blocks", "queries", "writes"])
def test_bad_input_is_a_coded_4xx_and_changes_nothing(
    client: TestClient,
    service: MemoryService,
    dispatcher: RecordingDispatcher,
    alice: tuple[dict[str, str], str],
    cases: list[Bad],
) -> None:
    me, rev = alice
    check(client, service, dispatcher, me, rev, cases)


def test_a_reused_idempotency_key_with_other_content_changes_nothing(
    client: TestClient, service: MemoryService, dispatcher: RecordingDispatcher, alice: tuple[dict[str, str], str]
) -> None:
    me, rev = alice
    first = client.post(MSG, json={"role": "user", "content": "once"}, headers={**me, "Idempotency-Key": "k1"})
    assert first.status_code == 200
    client.post(RECALL, json={"content": "note", "idempotency_key": "k2"}, headers=me)
    client.post(INGEST, json={"text": "doc one"}, headers={**me, "Idempotency-Key": "k3"})
    client.put("/v1/agents/alice/blocks/b2", json={"content": "x"}, headers={**me, "Idempotency-Key": "k4"})
    check(client, service, dispatcher, me, rev, [
        Bad("append", "POST", MSG, 422, "IDEMPOTENCY_MISMATCH", json={"role": "user", "content": "twice"},
            headers={"Idempotency-Key": "k1"}),
        Bad("note", "POST", RECALL, 422, "IDEMPOTENCY_MISMATCH", json={"content": "other", "idempotency_key": "k2"}),
        Bad("ingest", "POST", INGEST, 422, "IDEMPOTENCY_MISMATCH", json={"text": "doc two"},
            headers={"Idempotency-Key": "k3"}),
        Bad("block", "PUT", "/v1/agents/alice/blocks/b2", 422, "IDEMPOTENCY_MISMATCH", json={"content": "y"},
            headers={"Idempotency-Key": "k4"}),
    ])  # fmt: skip


def test_a_body_over_the_limit_is_refused_before_it_is_read(service: MemoryService) -> None:
    app = create_app(service, None, settings=api_settings(max_body_bytes=2048))
    with TestClient(app, raise_server_exceptions=True) as client:
        me = new_agent(client, "alice")
        big = json.dumps({"role": "user", "content": "x" * 4096}).encode()
        r = client.post(MSG, content=big, headers={**me, **JSON})
        assert r.status_code == 413
        assert r.json()["error"] == {
            "code": "VALIDATION_ERROR", "message": "request body is larger than 2048 bytes", "field": "body",
            "limit": 2048,
        }  # fmt: skip

        def chunks() -> Any:  # no Content-Length: counted as it streams
            for _ in range(8):
                yield b" " * 512

        r = client.post(MSG, content=chunks(), headers={**me, **JSON})
        assert r.status_code == 413 and r.json()["error"]["limit"] == 2048
        assert client.get("/v1/agents/alice/context", headers=me).json()["gauges"]["fifo"] == 0
        assert client.post(MSG, json=OK_MSG, headers=me).status_code == 200


def test_an_unknown_query_parameter_on_a_write_is_refused_and_changes_nothing(
    client: TestClient, service: MemoryService, dispatcher: RecordingDispatcher, alice: tuple[dict[str, str], str]
) -> None:
    me, rev = alice
    assert client.put("/v1/agents/alice/state/city", json={"value": "Porto"}, headers=me).status_code == 200
    check(client, service, dispatcher, me, rev, [
        # Meant to delete one key: would have cleared every one.
        Bad("clear state with a key", "DELETE", "/v1/agents/alice/state", 422, field="key", params={"key": "city"}),
        # A misspelt _rev: would have deleted whatever revision is there.
        Bad("delete state, rev misspelt", "DELETE", "/v1/agents/alice/state/city", 422, field="rev",
            params={"rev": "1"}),
        # The key as a query parameter: would have appended without one, so a retry appends twice.
        Bad("append, key as a query", "POST", MSG, 422, field="idempotency_key", json=OK_MSG,
            params={"idempotency_key": "k9"}),
        Bad("block write with a query", "PUT", BLOCK, 422, field="pinned", json={"content": "x", "_rev": "REV"},
            params={"pinned": "true"}),
    ])  # fmt: skip
    assert client.get("/v1/agents/alice/state/city", headers=me).json()["value"] == "Porto"
