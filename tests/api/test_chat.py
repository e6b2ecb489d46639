"""Chatting through vcm against a local OpenAI-compatible fake upstream that records what it was
sent: /v1/chat/completions driven by the official ``openai`` package (streaming and not), the
agent chat route with vcm's tools (streaming and not), coded errors when the model fails, /stats."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from tests.api.conftest import ADMIN_TOKEN, LiveServer, api_settings, executor_for, upstream_settings
from tests.doubles.llm import Action, FakeLLM, answer, calls, status, streamed, streamed_calls
from vcm.api.app import create_app
from vcm.client import AsyncVcmClient, VcmClient
from vcm.errors import IdempotencyMismatch, LlmRejected
from vcm.service import MemoryService
from vcm.tools.schemas import tool_schemas

MODEL = "vcm-small-8k"
# The chat routes sit above the hot path, whose Redis legs the other suites cover: real Redis only.
pytestmark = pytest.mark.parametrize("redis_client", ["redis"], indirect=True)


settings = pytest.fixture(upstream_settings, name="settings")


def agent(live: LiveServer, agent_id: str = "ann", **body: Any) -> str:
    r = httpx.post(
        f"{live.url}/v1/agents",
        json={"agent_id": agent_id, "model": MODEL, "system_prompt": "You are Ann's assistant.", **body},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
    )
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def said(service: MemoryService, agent_id: str = "ann") -> list[dict[str, Any]]:
    """The agent's FIFO as stored: the words as said (the prompt may put time markers before them)."""
    out = []
    for m in service.hot.snapshot(agent_id).fifo:
        if m.role == "system":
            continue
        message: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            message["tool_calls"] = list(m.tool_calls)
        if m.tool_call_id:
            message["tool_call_id"] = m.tool_call_id
        out.append(message)
    return out


def sse_events(live: LiveServer, body: dict[str, Any], headers: dict[str, str]) -> list[tuple[str, Any]]:
    """The (event, data) pairs of a streamed agent chat turn."""
    events: list[tuple[str, Any]] = []
    with httpx.stream("POST", f"{live.url}/v1/agents/ann/chat", json=body, headers=headers) as s:
        assert s.status_code == 200, s.read()
        event = ""
        for line in s.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                events.append((event, json.loads(line[6:])))
    return events


def contents(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content") or "") for m in request["messages"]]


def test_the_openai_sdk_gets_virtual_context_without_code_changes(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    service.remember("ann", "Ann's door code is 4412", type="sticky")
    sdk = openai.OpenAI(base_url=f"{live.url}/v1", api_key=token, max_retries=0)
    upstream.script += [answer("Hello Ann!"), answer("It is 4412.")]
    history: list[Any] = [
        {"role": "system", "content": "Client-side system prompt the agent's own one overrides."},
        {"role": "user", "content": "Hi, I am Ann."},
    ]
    first = sdk.chat.completions.create(model="gpt-4o-mini", messages=history)
    assert first.choices[0].message.content == "Hello Ann!" and first.model == "gpt-4o-mini"
    sent = contents(upstream.requests[0])
    assert sent[0] == "You are Ann's assistant." and sent[-1].endswith("Hi, I am Ann.")  # a time marker may lead
    assert any("door code is 4412" in c for c in sent)  # the sticky fact rides along
    assert not any("Client-side system prompt" in c for c in sent)
    # The client resends the whole history with the reply and a new question: each lands once.
    history += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "My code?"}]
    second = sdk.chat.completions.create(model="gpt-4o-mini", messages=history)
    assert second.choices[0].message.content == "It is 4412."
    assert [m["content"] for m in said(service)] == ["Hi, I am Ann.", "Hello Ann!", "My code?", "It is 4412."]
    # What the upstream saw was vcm's assembled context, within the window.
    built = service.build_context("ann", query="My code?")
    window = built.gauges.window
    assert built.total <= window - math.ceil(window * service.settings.budget.output_reserve)
    assert len(upstream.requests[1]["messages"]) == len(built.messages) - 1  # all but the new reply


def test_streaming_through_the_sdk(live: LiveServer, upstream: FakeLLM, service: MemoryService) -> None:
    token = agent(live)
    sdk = openai.OpenAI(base_url=f"{live.url}/v1", api_key=token, max_retries=0)
    upstream.script.append(
        streamed(
            "The Porto ",
            "office opens ",
            "at 9.",
            usage={"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57},
        )
    )
    stream = sdk.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "When does the office open?"}], stream=True
    )
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == "The Porto office opens at 9." and len(pieces) == 3
    assert upstream.requests[0]["stream"] is True
    assert [m["content"] for m in said(service) if m["role"] == "assistant"] == ["The Porto office opens at 9."]


def test_client_tools_pass_through_and_their_calls_come_back(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    upstream.script.append(calls(("get_weather", {"city": "Porto"})))
    sdk = openai.OpenAI(base_url=f"{live.url}/v1", api_key=token, max_retries=0)
    out = sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Weather in Porto?"}],
        tools=[weather],  # type: ignore[list-item]
    )
    call = out.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather" and out.choices[0].finish_reason == "tool_calls"  # type: ignore[union-attr]
    assert upstream.requests[0]["tools"] == [weather]
    assert service.context("ann").messages[-1]["tool_calls"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize(
    ("script", "status_code", "code"),
    [([status(500)], 503, "LLM_UNAVAILABLE"), ([status(400)], 502, "LLM_REJECTED")],
)
def test_model_failures_are_coded(
    live: LiveServer, upstream: FakeLLM, script: list[Action], status_code: int, code: str
) -> None:
    token = agent(live)  # the agent chat route answers vcm's coded errors (the proxy relays the upstream's)
    upstream.script += script
    r = httpx.post(
        f"{live.url}/v1/agents/ann/chat", json={"message": "hi"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == status_code and r.json()["error"]["code"] == code


def test_bad_completion_requests_are_refused(live: LiveServer, upstream: FakeLLM) -> None:
    token = agent(live)
    auth = {"Authorization": f"Bearer {token}"}
    wizard = [{"role": "user", "content": "first"}, {"role": "wizard", "content": "x"}]
    for body in ({"model": "m", "messages": []}, {"model": "m", "messages": wizard}):
        r = httpx.post(f"{live.url}/v1/chat/completions", json=body, headers=auth)
        assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR"
    assert httpx.get(f"{live.url}/v1/agents/ann/stats", headers=auth).json()["fifo_messages"] == 0  # nothing kept
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    r = httpx.post(
        f"{live.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}, headers=admin
    )
    assert r.status_code == 422  # the admin names the agent in X-VCM-Agent
    assert upstream.requests == []


def test_agent_chat_runs_vcm_tools_and_streams(live: LiveServer, upstream: FakeLLM, service: MemoryService) -> None:
    token = agent(live, tools=tool_schemas())
    auth = {"Authorization": f"Bearer {token}"}
    upstream.script += [
        calls(
            (
                "store_core",
                {"block_id": "user", "content": "Name: Ada", "idempotency_key": "k1", "request_heartbeat": True},
            )
        ),
        answer("Saved, Ada."),
    ]
    r = httpx.post(f"{live.url}/v1/agents/ann/chat", json={"message": "I am Ada.", "name": "Ada"}, headers=auth)
    out = r.json()
    assert r.status_code == 200, out
    assert out["reply"] == "Saved, Ada." and out["stop"] == "answer" and out["steps"] == 2
    assert out["tool_calls"][0]["name"] == "store_core" and out["tool_calls"][0]["ok"] is True
    assert "Name: Ada" in service.get_block("ann", "user").content
    # Streamed: deltas as the model writes, then done.
    upstream.script += [
        streamed_calls(("search_recall", {"query": "Ada", "mode": "text", "request_heartbeat": True})),
        streamed("Yes, ", "Ada."),
    ]
    events = sse_events(live, {"message": "Who am I?", "stream": True}, auth)
    kinds = [e for e, _ in events]
    assert kinds[0] == "tool_result" and kinds[-1] == "done" and kinds.count("delta") == 2
    assert "".join(d["content"] for e, d in events if e == "delta") == "Yes, Ada."
    assert events[-1][1]["reply"] == "Yes, Ada." and events[-1][1]["steps"] == 2
    assert said(service)[-1]["content"] == "Yes, Ada."


def test_stats_and_no_model_configured(service: MemoryService) -> None:
    app = create_app(service, executor_for(service), settings=api_settings())
    with LiveServer(app) as live:
        token = agent(live)
        auth = {"Authorization": f"Bearer {token}"}
        r = httpx.post(f"{live.url}/v1/agents/ann/chat", json={"message": "hi"}, headers=auth)
        assert r.status_code == 503 and r.json()["error"]["code"] == "LLM_UNAVAILABLE"
        httpx.post(f"{live.url}/v1/agents/ann/messages", json={"role": "user", "content": "hello"}, headers=auth)
        stats = httpx.get(f"{live.url}/v1/agents/ann/stats", headers=auth).json()
        assert stats["fifo_messages"] == 1 and stats["tokens_by_layer"]["fifo"] > 0
        assert stats["tokens"] == sum(stats["tokens_by_layer"].values()) and stats["last_activity"] > 0
        assert stats["facts"]["facts"] == 0 and stats["evictions"] == 0


def test_one_turn_at_a_time_per_agent(app: FastAPI, upstream: FakeLLM, service: MemoryService) -> None:
    import dataclasses
    import threading

    service.hot.turns.wait_s = 0.3  # a second turn waits this long, then is refused
    with LiveServer(app) as live:
        token = agent(live)
        auth = {"Authorization": f"Bearer {token}"}
        upstream.script += [dataclasses.replace(answer("First."), delay_s=2.0), answer("Third.")]
        first: dict[str, Any] = {}

        def run_first() -> None:
            r = httpx.post(f"{live.url}/v1/agents/ann/chat", json={"message": "one"}, headers=auth, timeout=30)
            first.update(r.json())

        thread = threading.Thread(target=run_first)
        thread.start()
        deadline = 50
        while not any(m["content"] == "one" for m in said(service)) and deadline:
            deadline -= 1
            threading.Event().wait(0.05)
        before = len(service.context("ann").messages)
        busy = httpx.post(f"{live.url}/v1/agents/ann/chat", json={"message": "two"}, headers=auth)
        assert busy.status_code == 409, busy.text
        error = busy.json()["error"]
        assert error["code"] == "CONFLICT" and error["reason"] == "turn_in_progress"
        assert len(service.context("ann").messages) == before  # nothing of the refused turn appended
        # The OpenAI-compatible route shares the lock (the same agent, chosen by its token).
        sdk = openai.OpenAI(base_url=f"{live.url}/v1", api_key=token, max_retries=0)
        with pytest.raises(openai.APIStatusError) as refused:
            sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "two"}])
        assert refused.value.status_code == 409
        thread.join()
        assert first["reply"] == "First."
        # Released when the turn ended: the next one runs.
        r = httpx.post(f"{live.url}/v1/agents/ann/chat", json={"message": "three"}, headers=auth)
        assert r.status_code == 200 and r.json()["reply"] == "Third."
        texts = [m["content"] for m in said(service)]
        assert texts[-4:] == ["one", "First.", "three", "Third."]
        # Streamed turns free the agent too: when they end, and when their client goes away.
        service.hot.turns.wait_s = 5.0
        upstream.script += [streamed("Four."), dataclasses.replace(streamed("Five."), delay_s=1.0), answer("Six.")]
        with httpx.stream("POST", f"{live.url}/v1/agents/ann/chat", json={"message": "four", "stream": True},
                          headers=auth) as s:  # fmt: skip
            assert "Four." in "".join(s.iter_lines())
        with httpx.stream("POST", f"{live.url}/v1/agents/ann/chat", json={"message": "five", "stream": True},
                          headers=auth) as s:  # fmt: skip
            assert s.status_code == 200  # then the client leaves before the model answers
        r = httpx.post(f"{live.url}/v1/agents/ann/chat", json={"message": "six"}, headers=auth, timeout=30)
        assert r.status_code == 200 and r.json()["reply"] == "Six."


TAGGED = ("Noted, Ann. [MEM", "ORY:preference]Ann likes green tea[/MEMORY] [STATE:trip.city]", '"Porto"[/STATE]Bye.')
SHOWN = "Noted, Ann. Bye."


def test_memory_tags_never_reach_the_reader_of_agent_chat(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    auth = {"Authorization": f"Bearer {token}"}
    upstream.script += [answer("".join(TAGGED)), streamed(*TAGGED)]
    r = httpx.post(f"{live.url}/v1/agents/ann/chat", json={"message": "I like green tea."}, headers=auth)
    assert r.status_code == 200 and r.json()["reply"] == SHOWN
    events = []
    with httpx.stream("POST", f"{live.url}/v1/agents/ann/chat", json={"message": "Again.", "stream": True},
                      headers=auth) as s:  # fmt: skip
        for line in s.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert "".join(e["content"] for e in events[:-1]) == SHOWN  # the tag cut across deltas too
    assert events[-1]["reply"] == SHOWN and "MEMORY" not in json.dumps(events)
    # Captured as before: facts and state from the reply as written; memory holds it shown.
    assert [f.value for f in service.list_facts("ann")] == ["Ann likes green tea"]
    assert service.get_state("ann", "trip.city").value == "Porto"
    assert [m["content"] for m in said(service) if m["role"] == "assistant"] == [SHOWN, SHOWN]


def test_memory_tags_never_reach_an_openai_client(live: LiveServer, upstream: FakeLLM, service: MemoryService) -> None:
    token = agent(live)
    sdk = openai.OpenAI(base_url=f"{live.url}/v1", api_key=token, max_retries=0)
    upstream.script += [answer("".join(TAGGED)), streamed(*TAGGED), answer("Fine.")]
    history: list[Any] = [{"role": "user", "content": "I like green tea."}]
    plain = sdk.chat.completions.create(model="m", messages=history)
    assert plain.choices[0].message.content == SHOWN
    history += [plain.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Again."}]
    stream = sdk.chat.completions.create(model="m", messages=history, stream=True)
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces) == SHOWN and not any("[" in p for p in pieces)  # a tag split across deltas
    assert [f.value for f in service.list_facts("ann")] == ["Ann likes green tea"]
    assert service.get_state("ann", "trip.city").value == "Porto"
    # The client sends back what it was shown: nothing lands twice, nothing is refused.
    history += [{"role": "assistant", "content": "".join(pieces)}, {"role": "user", "content": "Thanks."}]
    assert sdk.chat.completions.create(model="m", messages=history).choices[0].message.content == "Fine."
    assert [m["content"] for m in said(service)] == ["I like green tea.", SHOWN, "Again.", SHOWN, "Thanks.", "Fine."]


@pytest.mark.parametrize("body", [{"message": "hi", "stream": "true"}, {"message": "hi", "stream": 1}])
def test_agent_chat_refuses_a_stream_flag_that_is_not_a_boolean(
    live: LiveServer, upstream: FakeLLM, service: MemoryService, body: dict[str, Any]
) -> None:
    # Strict, as every request body is: "true" used to turn on server-sent events.
    token = agent(live)
    r = httpx.post(f"{live.url}/v1/agents/ann/chat", json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "stream", r.text
    assert said(service) == [] and upstream.requests == []


def test_agent_chat_keeps_a_reply_with_a_nul_as_memory_can(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    # Memory refuses NUL characters: the turn used to end in a 422 with the answer lost.
    token = agent(live)
    upstream.script += [answer("Tea\x00time.")]
    r = httpx.post(
        f"{live.url}/v1/agents/ann/chat", json={"message": "When?"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 200 and r.json()["reply"] == "Tea\x00time.", r.text
    assert [m["content"] for m in said(service)] == ["When?", "Tea\ufffdtime."]


def test_a_keyed_chat_turn_retried_answers_its_first_result(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live, tools=tool_schemas())
    auth = {"Authorization": f"Bearer {token}"}
    store = {"block_id": "user", "content": "Name: Ada", "idempotency_key": "k1", "request_heartbeat": True}
    upstream.script += [calls(("store_core", store)), answer("Saved, Ada.")]
    url = f"{live.url}/v1/agents/ann/chat"
    first = httpx.post(url, json={"message": "I am Ada.", "name": "Ada"}, headers={**auth, "Idempotency-Key": "t1"})
    assert first.status_code == 200, first.text
    assert first.json()["reply"] == "Saved, Ada." and first.json()["replayed"] is False
    fifo = said(service)
    # The retry (the client never saw the answer): the same answer, the model not called again,
    # nothing appended again; the key in the body is the same key.
    again = httpx.post(url, json={"message": "I am Ada.", "name": "Ada", "idempotency_key": "t1"}, headers=auth)
    assert again.status_code == 200, again.text
    assert again.json() == {**first.json(), "replayed": True}
    assert len(upstream.requests) == 2 and said(service) == fifo
    with VcmClient(live.url, token) as client:  # the Python client sends the key as the header
        assert client.chat("ann", "I am Ada.", name="Ada", idempotency_key="t1") == {**first.json(), "replayed": True}
    # Streamed, the retry is its done event alone.
    keyed = {**auth, "Idempotency-Key": "t1"}
    events = sse_events(live, {"message": "I am Ada.", "name": "Ada", "stream": True}, keyed)
    assert events == [("done", {**first.json(), "replayed": True})]
    # The key with another message (or name) is refused and changes nothing.
    for body in ({"message": "I am Bea."}, {"message": "I am Ada.", "name": "Bea"}):
        r = httpx.post(url, json=body, headers={**auth, "Idempotency-Key": "t1"})
        assert r.status_code == 422 and r.json()["error"]["code"] == "IDEMPOTENCY_MISMATCH", r.text
    assert len(upstream.requests) == 2 and said(service) == fifo
    # Without a key every turn is its own.
    upstream.script += [answer("One."), answer("Two.")]
    for _ in range(2):
        assert httpx.post(url, json={"message": "Hi."}, headers=auth).status_code == 200
    assert [m["content"] for m in said(service)[-4:]] == ["Hi.", "One.", "Hi.", "Two."]


def test_a_keyed_chat_turn_that_failed_is_retried_without_a_second_user_message(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "t2"}
    url = f"{live.url}/v1/agents/ann/chat"
    upstream.script += [status(500), answer("Here now.")]
    failed = httpx.post(url, json={"message": "Are you there?"}, headers=headers)
    assert failed.status_code == 503 and failed.json()["error"]["code"] == "LLM_UNAVAILABLE"
    assert [m["content"] for m in said(service)] == ["Are you there?"]  # what the user said is kept
    retried = httpx.post(url, json={"message": "Are you there?"}, headers=headers)
    assert retried.status_code == 200, retried.text
    assert retried.json()["reply"] == "Here now." and retried.json()["replayed"] is False
    assert [m["content"] for m in said(service)] == ["Are you there?", "Here now."]
    replay = httpx.post(url, json={"message": "Are you there?"}, headers=headers)
    assert replay.json() == {**retried.json(), "replayed": True} and len(upstream.requests) == 2


def test_a_keyed_streamed_turn_whose_process_died_is_taken_over(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "t3"}
    # A turn that claimed its key and appended the user's message, then its process died.
    service.claim("ann", "t3", "chat_turn", {"message": "Still there?", "name": None}, {"pending": True})
    service.append("ann", "user", "Still there?", idempotency_key="t3:user", actor="user")
    upstream.script.append(streamed("Yes, ", "still here."))
    events = sse_events(live, {"message": "Still there?", "stream": True}, headers)
    assert events[-1][0] == "done" and events[-1][1]["reply"] == "Yes, still here."
    assert events[-1][1]["replayed"] is False
    assert [m["content"] for m in said(service)] == ["Still there?", "Yes, still here."]
    # Its retry, not streamed, answers the streamed turn's result.
    r = httpx.post(f"{live.url}/v1/agents/ann/chat", json={"message": "Still there?"}, headers=headers)
    assert r.json() == {**events[-1][1], "replayed": True} and len(upstream.requests) == 1


def test_chat_idempotency_keys_are_checked_before_anything_runs(live: LiveServer, upstream: FakeLLM) -> None:
    token = agent(live)
    auth = {"Authorization": f"Bearer {token}"}
    url = f"{live.url}/v1/agents/ann/chat"
    cases = [
        ({"message": "hi"}, {"Idempotency-Key": "x" * 252}),  # its user message's key would be too long
        ({"message": "hi", "idempotency_key": "a"}, {"Idempotency-Key": "b"}),
        ({"message": "hi", "idempotency_key": ""}, {}),
        ({"message": "hi", "stream": True}, {"Idempotency-Key": "x" * 252}),
    ]
    for body, extra in cases:
        r = httpx.post(url, json=body, headers={**auth, **extra})
        assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR", r.text
        assert r.json()["error"]["field"] == "idempotency_key"
    assert upstream.requests == []
    stats = httpx.get(f"{live.url}/v1/agents/ann/stats", headers=auth).json()
    assert stats["fifo_messages"] == 0
    upstream.script.append(answer("Fine."))
    r = httpx.post(url, json={"message": "hi"}, headers={**auth, "Idempotency-Key": "x" * 251})
    assert r.status_code == 200 and r.json()["reply"] == "Fine."


def test_the_python_clients_stream_a_turn_replay_it_and_raise_its_failures(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live, tools=tool_schemas())
    upstream.script += [
        streamed_calls(("search_recall", {"query": "Ada", "mode": "text", "request_heartbeat": True})),
        streamed("Yes, ", "Ada."),
    ]
    with VcmClient(live.url, token) as client:
        frames = list(client.chat_stream("ann", "Who am I?", name="Ada", idempotency_key="s1"))
        kinds = [e for e, _ in frames]
        assert kinds == ["tool_result", "delta", "delta", "done"], frames
        assert frames[0][1]["name"] == "search_recall" and frames[0][1]["ok"] is True
        assert "".join(d["content"] for e, d in frames if e == "delta") == "Yes, Ada."
        done = frames[-1][1]
        assert done["reply"] == "Yes, Ada." and done["steps"] == 2 and done["replayed"] is False
        # The retry under the key: the recorded result as done alone, the model not asked again.
        assert list(client.chat_stream("ann", "Who am I?", name="Ada", idempotency_key="s1")) == [
            ("done", {**done, "replayed": True})
        ]
        assert len(upstream.requests) == 2
        # Refused before the turn begins (the key with another message): raised at the first next.
        with pytest.raises(IdempotencyMismatch):
            next(client.chat_stream("ann", "Who are you?", idempotency_key="s1"))
        # The model failing once the turn has begun (after the 200): its error frame, raised coded.
        upstream.script += [status(400)]
        seen: list[str] = []
        with pytest.raises(LlmRejected):
            for event, _ in client.chat_stream("ann", "And now?"):
                seen.append(event)
        assert seen == [] and len(upstream.requests) == 3

    async def run() -> list[tuple[str, Any]]:
        upstream.script.append(streamed("Still\u2028", "Ada."))  # a line end to str.splitlines
        async with AsyncVcmClient(live.url, token) as aclient:
            return [frame async for frame in aclient.chat_stream("ann", "Still me?", name="Ada")]

    frames = asyncio.run(run())
    assert [e for e, _ in frames] == ["delta", "delta", "done"] and frames[-1][1]["reply"] == "Still\u2028Ada."
    assert [m["content"] for m in said(service)[-2:]] == ["Still me?", "Still\u2028Ada."]
