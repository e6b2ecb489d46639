"""The agent loop against a real HTTP server on 127.0.0.1 that answers scripted chat completions,
with the hot state on fakeredis and the real Redis (the `hot` fixture)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.doubles.harness import Harness
from tests.doubles.llm import Action, FakeLLM, answer, calls, status
from vcm.agent.loop import AgentLoop, ChatClient, ChatError, wire_messages
from vcm.hotpath.state import HotState
from vcm.llm import endpoint
from vcm.tools.schemas import tool_schemas

MODEL = "vcm-small-8k"


@pytest.fixture
def h(hot: HotState, tmp_path: Any) -> Iterator[Harness]:
    harness = Harness(hot, str(tmp_path / "vcm.db"))  # clock: 0.5 s a decision, under the rate limit
    harness.service.create_agent("a1", model=MODEL, system_prompt="You are a careful assistant.", tools=tool_schemas())
    yield harness
    harness.close()


@pytest.fixture
def llm() -> Iterator[Callable[[list[Action]], FakeLLM]]:
    servers: list[FakeLLM] = []

    def start(script: list[Action]) -> FakeLLM:
        servers.append(FakeLLM(script))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def client_for(server: FakeLLM, sleeps: list[float] | None = None, **options: Any) -> ChatClient:
    record = sleeps if sleeps is not None else []
    return ChatClient(server.url, api_key="test-key", sleep=record.append, rand=lambda: 1.0, **options)


def loop_for(h: Harness, server: FakeLLM, sleeps: list[float] | None = None, **options: Any) -> AgentLoop:
    max_steps = options.pop("max_steps", None)
    return AgentLoop(
        h.service, h.executor, client_for(server, sleeps, **options), model="test-model", max_steps=max_steps
    )


def ends(h: Harness) -> list[tuple[str, int]]:
    return [(e.payload["reason"], e.payload["depth"]) for e in h.service.events("a1", ["heartbeat_end"]).items]


# --- turns ---------------------------------------------------------------------------------------
def test_a_turn_runs_tool_calls_and_honours_heartbeats(h: Harness, llm: Callable[[list[Action]], FakeLLM]) -> None:
    server = llm(
        [
            calls(
                (
                    "store_core",
                    {"block_id": "user", "content": "Name: Ada", "idempotency_key": "s1", "request_heartbeat": True},
                )
            ),
            calls(("search_recall", {"query": "Ada", "mode": "text", "request_heartbeat": True})),
            answer("Saved your name, Ada."),
        ]
    )
    result = loop_for(h, server).run_turn("a1", "My name is Ada; remember it.")
    assert (result.final, result.steps, result.stop, result.depth) == ("Saved your name, Ada.", 3, "answer", 2)
    assert result.heartbeat_end == "explicit_yield" and ends(h) == [("explicit_yield", 2)]
    assert [r.name for r in result.tool_results] == ["store_core", "search_recall"]
    assert all(r.ok for r in result.tool_results)
    assert h.service.get_block("a1", "user").content == "Name: Ada"

    first = server.requests[0]
    assert first["model"] == "test-model" and first["tools"] == tool_schemas()
    assert first["messages"][-1] == {"role": "user", "content": "My name is Ada; remember it."}
    assert server.headers[0]["Authorization"] == "Bearer test-key" and server.paths == ["/v1/chat/completions"] * 3
    second = server.requests[1]["messages"]
    assert second[-2]["role"] == "assistant" and second[-2]["tool_calls"][0]["function"]["name"] == "store_core"
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == second[-2]["tool_calls"][0]["id"]
    assert json.loads(second[-1]["content"])["_rev"] == h.service.get_block("a1", "user").rev
    # The context stays true: every step is in the FIFO, in order.
    fifo = h.fifo("a1")
    assert [m.role for m in fifo] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert fifo[-1].content == "Saved your name, Ada."
    # The endpoint got the built context: the hot context in order, with vcm's layers around it.
    sent = server.requests[2]["messages"]
    hot = wire_messages(h.service.context("a1").messages)[:-1]
    assert [m for m in sent if not str(m.get("content") or "").startswith("[vcm] ")] == [
        m for m in hot if not str(m.get("content") or "").startswith("[vcm] ")
    ]
    assert any(str(m.get("content")).startswith("[vcm] Today is") for m in sent)


def test_the_depth_limit_ends_the_turn(h: Harness, llm: Callable[[list[Action]], FakeLLM]) -> None:
    server = llm([calls(("record_heartbeat", {"request_heartbeat": True})) for _ in range(12)])
    result = loop_for(h, server).run_turn("a1", "Think hard.")
    assert len(server.requests) == 9  # the first step and 8 heartbeats
    assert (result.steps, result.stop, result.heartbeat_end, result.depth) == (9, "heartbeat_end", "depth", 8)
    assert ends(h) == [("depth", 8)]
    assert result.tool_results[-1].heartbeat.retry_after_ms == 750


def test_a_call_without_a_heartbeat_ends_the_turn(h: Harness, llm: Callable[[list[Action]], FakeLLM]) -> None:
    server = llm(
        [
            calls(
                (
                    "append_fifo",
                    {"role": "assistant", "content": "Noted.", "idempotency_key": "n", "request_heartbeat": False},
                )
            )
        ]
    )
    result = loop_for(h, server).run_turn("a1", "Note this.")
    assert (result.steps, result.stop, result.heartbeat_end, result.final) == (1, "yield", None, None)
    assert len(server.requests) == 1 and ends(h) == []


def test_several_calls_in_one_step_take_one_heartbeat(h: Harness, llm: Callable[[list[Action]], FakeLLM]) -> None:
    step = calls(
        ("write_recall", {"content": "fact one", "idempotency_key": "w1", "request_heartbeat": True}),
        ("write_recall", {"content": "fact two", "idempotency_key": "w2", "request_heartbeat": False}),
        ("fetch_core", {"request_heartbeat": True}),
        content="Saving two facts.",
    )
    server = llm([step, answer("Done.")])
    result = loop_for(h, server).run_turn("a1", "Save these.")
    assert (result.steps, result.depth, result.final, result.heartbeat_end) == (2, 1, "Done.", "explicit_yield")
    assert ends(h) == [("explicit_yield", 1)]  # one chain: the call that asked for none did not end it
    assert [r.name for r in result.tool_results] == ["write_recall", "write_recall", "fetch_core"]
    sent = server.requests[1]["messages"]
    assert sent[-4]["content"] == "Saving two facts." and len(sent[-4]["tool_calls"]) == 3
    assert [m["tool_call_id"] for m in sent[-3:]] == [c["id"] for c in sent[-4]["tool_calls"]]


def test_a_bad_tool_call_gets_the_error_and_another_step(h: Harness, llm: Callable[[list[Action]], FakeLLM]) -> None:
    server = llm([calls(("no_such_tool", {"x": 1})), answer("Sorry, I will not do that.")])
    result = loop_for(h, server).run_turn("a1", "Do the impossible.")
    assert (result.steps, result.stop) == (2, "answer")
    error = json.loads(server.requests[1]["messages"][-1]["content"])["error"]
    assert (error["code"], error["field"]) == ("VALIDATION_ERROR", "name")


def test_max_steps_closes_the_chain(h: Harness, llm: Callable[[list[Action]], FakeLLM]) -> None:
    server = llm([calls(("record_heartbeat", {"request_heartbeat": True})) for _ in range(5)])
    result = loop_for(h, server, max_steps=3).run_turn("a1", "Loop.")
    assert (result.steps, result.stop, result.heartbeat_end) == (3, "max_steps", "explicit_yield")
    assert h.executor.governor.state("a1").chain_id == ""


def test_an_aborted_turn_closes_its_chain(h: Harness, llm: Callable[[list[Action]], FakeLLM]) -> None:
    server = llm([calls(("record_heartbeat", {"request_heartbeat": True})), status(400)])
    with pytest.raises(ChatError):
        loop_for(h, server).run_turn("a1", "Go.")
    assert h.executor.governor.state("a1").chain_id == "" and ends(h) == [("explicit_yield", 1)]


# --- the HTTP client -------------------------------------------------------------------------------
def test_a_server_error_is_retried(h: Harness, llm: Callable[[list[Action]], FakeLLM]) -> None:
    sleeps: list[float] = []
    server = llm([status(500), answer("Fine now.")])
    result = loop_for(h, server, sleeps).run_turn("a1", "Hello?")
    assert result.final == "Fine now." and len(server.requests) == 2 and sleeps == [0.5]


def test_a_timeout_is_retried(h: Harness, llm: Callable[[list[Action]], FakeLLM]) -> None:
    sleeps: list[float] = []
    late = answer("too late")
    late.delay_s = 1.0
    server = llm([late, answer("On time.")])
    result = loop_for(h, server, sleeps, timeout_s=0.2).run_turn("a1", "Hello?")
    assert result.final == "On time." and len(server.requests) == 2 and len(sleeps) == 1


def test_429_waits_as_long_as_retry_after_says(llm: Callable[[list[Action]], FakeLLM]) -> None:
    sleeps: list[float] = []
    server = llm([status(429, {"Retry-After": "2"}), answer("ok")])
    done = client_for(server, sleeps).complete(model="m", messages=[{"role": "user", "content": "hi"}])
    assert done.content == "ok" and sleeps == [2.0]


def test_client_errors_are_not_retried(llm: Callable[[list[Action]], FakeLLM]) -> None:
    sleeps: list[float] = []
    server = llm([status(400), answer("never sent")])
    with pytest.raises(ChatError) as err:
        client_for(server, sleeps).complete(model="m", messages=[{"role": "user", "content": "hi"}])
    assert (err.value.status, err.value.code, err.value.attempts) == (400, "LLM_REJECTED", 1)
    assert len(server.requests) == 1 and sleeps == []


def test_retries_give_up_with_backoff(llm: Callable[[list[Action]], FakeLLM]) -> None:
    sleeps: list[float] = []
    server = llm([status(503) for _ in range(4)])
    with pytest.raises(ChatError) as err:
        client_for(server, sleeps, max_retries=3).complete(model="m", messages=[{"role": "user", "content": "hi"}])
    assert (err.value.status, err.value.code, err.value.attempts) == (503, "LLM_UNAVAILABLE", 4)
    assert len(server.requests) == 4 and sleeps == [0.5, 1.0, 2.0]


def test_an_unreachable_endpoint_is_retried_then_reported() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    sleeps: list[float] = []
    client = ChatClient(f"http://127.0.0.1:{port}", api_key="k", sleep=sleeps.append, max_retries=2)
    with pytest.raises(ChatError) as err:
        client.complete(model="m", messages=[{"role": "user", "content": "hi"}])
    assert err.value.retryable and err.value.attempts == 3 and len(sleeps) == 2


def test_base_url_and_key_come_from_the_environment(
    llm: Callable[[list[Action]], FakeLLM], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = llm([answer("hi")])
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    with ChatClient() as client:
        assert client.complete(model="m", messages=[{"role": "user", "content": "hi"}]).content == "hi"
    assert server.headers[0]["Authorization"] == "Bearer from-env"


def test_a_malformed_answer_is_rejected(llm: Callable[[list[Action]], FakeLLM]) -> None:
    server = llm([Action(body={"choices": []})])
    with pytest.raises(ChatError) as err:
        client_for(server).complete(model="m", messages=[{"role": "user", "content": "hi"}])
    assert err.value.code == "LLM_REJECTED" and len(server.requests) == 1


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://h:8000", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1/", "http://h:8000/v1/chat/completions"),
        ("http://h/openai/v1/chat/completions", "http://h/openai/v1/chat/completions"),
    ],
)
def test_endpoint(base: str, url: str) -> None:
    assert endpoint(base) == url


# --- the wire form of the context ----------------------------------------------------------------------
def call_msg(*ids: str, content: str = "") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "fetch_core", "arguments": "{}"}} for i in ids
        ],
    }


def test_wire_messages_keeps_tool_results_next_to_their_calls() -> None:
    notice = {"role": "system", "content": "[vcm] Memory pressure ..."}
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "tool", "tool_call_id": "gone", "content": "result of an evicted call"},
        call_msg("c1", "c2"),
        notice,
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
        call_msg("c3", "c4", content="half answered"),
        {"role": "tool", "tool_call_id": "c3", "content": "r3"},
        {"role": "user", "content": "next"},
        call_msg("c5"),
    ]
    out = wire_messages(msgs)
    assert [m["role"] for m in out] == [
        "system",
        "system",
        "assistant",
        "tool",
        "tool",
        "system",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert out[1]["content"].startswith("[vcm] Result of an earlier tool call") and "evicted call" in out[1]["content"]
    assert out[5] == notice  # moved after the results it had split from their call
    assert [c["id"] for c in out[6]["tool_calls"]] == ["c3"]  # c4 was never answered
    assert "tool_calls" not in out[9] and out[9]["content"].startswith("[vcm]")
    assert msgs[6]["tool_calls"][1]["id"] == "c4"  # the input is left alone
