"""Schemathesis fuzzes every operation of the OpenAPI schema (bounded: a few dozen examples each)
with valid credentials and asserts that no request makes the server fail (``not_a_server_error``)
and that every documented reply matches its schema (``response_schema_conformance``).

Most cases are pointed at a real, populated agent so that they reach the service rather than
stopping at NOT_FOUND; the rest keep their generated agent ids. Hot state on fakeredis only: the
real-Redis leg of the other suites covers the backend, this one the input space.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.api.conftest import ADMIN_TOKEN, api_settings, embed, executor_for, new_agent
from tests.doubles.llm import FakeLLM, answer
from vcm.api.app import create_app
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.store import open_store

AGENT = "fuzz"
# Examples per operation and mode: about 900 requests over 45 operations, under a minute here.
EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 8}
_tokens: dict[str, str] = {}


@pytest.fixture
def fuzz_app(tmp_path: Path) -> Iterator[FastAPI]:
    # The chat routes' model: a local fake that answers every request.
    upstream = FakeLLM([], default=answer("ok"))
    cfg = api_settings()
    cfg = cfg.model_copy(update={"chat": cfg.chat.model_copy(update={"base_url": upstream.url, "max_retries": 0})})
    store = open_store(str(tmp_path / "vcm.db"))
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), cfg)
    service = MemoryService(hot, store, RecordingDispatcher(), embed=embed)
    app = create_app(service, executor_for(service), settings=cfg)
    with TestClient(app) as c:
        me = new_agent(c, AGENT, model="vcm-demo-4k")
        _tokens[AGENT] = me["Authorization"]
        c.put(f"/v1/agents/{AGENT}/blocks/persona", json={"content": "I like tea."}, headers=me)
        c.post(f"/v1/agents/{AGENT}/messages", json={"role": "user", "content": "hello"}, headers=me)
        c.post(f"/v1/agents/{AGENT}/recall", json={"content": "a note", "idempotency_key": "n"}, headers=me)
        c.post(f"/v1/agents/{AGENT}/archival", json={"text": "a document\n\nin two parts"}, headers=me)
    yield app
    store.close()
    upstream.close()


def _aim(case: Any) -> None:
    """Point three in four cases at the real agent, with its token; admin routes get the admin token.
    Token rotation, agent deletion and reset keep their generated id, or they would retire the
    agent the other cases use."""
    params = case.path_parameters or {}
    generated = params.get("agent_id")
    real = (
        generated is not None
        and not case.path.endswith("/token")
        # Deleting or resetting the real agent would leave the other cases nothing to aim at.
        and not (case.method.upper() == "DELETE" and case.path == "/v1/agents/{agent_id}")
        and not case.path.endswith("/reset")
        and hashlib.sha256(str(generated).encode()).digest()[0] % 4 != 0
    )
    if real:
        params["agent_id"] = AGENT
    as_admin = not real
    case.headers = {**(case.headers or {}), "Authorization": f"Bearer {ADMIN_TOKEN}" if as_admin else _tokens[AGENT]}


def _fuzz(operation: Any, mode: GenerationMode) -> int:
    """Requests sent to one operation (0 when negative mode finds nothing to make invalid)."""
    sent = 0
    checks = [not_a_server_error]
    if mode is GenerationMode.POSITIVE:  # a negative case's reply may be any documented error
        checks.append(response_schema_conformance)

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES[mode], deadline=None, suppress_health_check=list(HealthCheck),
              derandomize=True, database=None)  # fmt: skip
    def run(case: Any) -> None:
        nonlocal sent
        _aim(case)
        case.call_and_validate(checks=checks)
        sent += 1

    try:
        run()
    except Unsatisfiable:
        # Nothing in this operation can be made invalid (no parameters, no body).
        assert mode is GenerationMode.NEGATIVE, operation.path
    return sent


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_makes_the_server_fail(fuzz_app: FastAPI, mode: GenerationMode) -> None:
    # Per operation with @given rather than @schema.parametrize(): schemathesis' lazy fixture loader
    # touches a pytest internal (Node._nodeid) that pytest 9 no longer has.
    # The portable import's body is JSON Lines: sent as the text it is.
    schemathesis.serializer.alias("application/x-ndjson", "text/plain")
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    sent = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        sent[f"{operation.method.upper()} {operation.path}"] = _fuzz(operation, mode)
    print(f"\nfuzz {mode}: {sum(sent.values())} requests over {sum(1 for n in sent.values() if n)} operations")
    assert len(sent) == 72  # every operation of the API (portable, injections, principals, batch append)
    assert all(sent.values()) if mode is GenerationMode.POSITIVE else sum(1 for n in sent.values() if n) >= 15
