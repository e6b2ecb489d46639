"""The memory proxy's conformance suite for the Anthropic Messages wire format: ``POST /v1/messages``
driven by the official ``anthropic`` SDK against a local recording fake Messages endpoint
(tests/doubles/anthropic.py), plain and streamed. Each test is named after the failure it
prevents (docs/proxy.md)."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.api.conftest import ADMIN_TOKEN, LiveServer, api_settings
from tests.api.test_chat import agent, said
from tests.doubles.anthropic import FakeMessages, Reply, message, refusal, stream, text, tool_use
from vcm.service import MemoryService
from vcm.settings import Settings

pytestmark = pytest.mark.parametrize("redis_client", ["redis"], indirect=True)

WEATHER = {"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}


@pytest.fixture
def upstream() -> Iterator[FakeMessages]:
    server = FakeMessages()
    yield server
    server.close()


@pytest.fixture
def settings(upstream: FakeMessages) -> Settings:
    s = api_settings()
    chat = s.chat.model_copy(update={"anthropic_base_url": upstream.url, "max_retries": 0})
    return s.model_copy(update={"chat": chat})


def sdk(live: LiveServer, token: str, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live.url, api_key=token, max_retries=0, **options)


def stored(service: MemoryService) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in said(service)]


def dumped(blocks: Any) -> list[dict[str, Any]]:
    return [b.model_dump(exclude_none=True) for b in blocks]


def test_the_anthropic_sdk_gets_virtual_context_with_the_stable_prefix_cached(
    live: LiveServer, upstream: FakeMessages, service: MemoryService
) -> None:
    token = agent(live)
    service.remember("ann", "Ann's door code is 4412", type="sticky")
    upstream.script += [message(text("Hello Ann!")), message(text("It is 4412."))]
    client = sdk(live, token)  # the token as x-api-key, the SDK's way
    history: list[Any] = [{"role": "user", "content": "Hi, I am Ann."}]
    first = client.messages.create(model="claude-x", max_tokens=100, system="Client prompt", messages=history)
    assert first.content[0].text == "Hello Ann!" and first.model == "claude-x"  # type: ignore[union-attr]
    sent = upstream.requests[0]
    system = sent["system"]
    assert system[0]["text"] == "You are Ann's assistant." and "Client prompt" not in json.dumps(sent)
    assert system[-1]["cache_control"] == {"type": "ephemeral"}  # the stable prefix's breakpoint
    assert [b for b in system[:-1] if "cache_control" in b] == []
    assert any("4412" in b["text"] for b in system) or "4412" in json.dumps(sent["messages"])
    assert sent["messages"][-1]["role"] == "user" and sent["messages"][-1]["content"][-1]["text"] == "Hi, I am Ann."
    assert upstream.headers[0]["anthropic-version"] == "2023-06-01" and sent["max_tokens"] == 100
    history += [{"role": "assistant", "content": dumped(first.content)}, {"role": "user", "content": "My code?"}]
    raw = client.messages.with_raw_response.create(model="claude-x", max_tokens=100, messages=history)
    assert raw.headers["x-vcm-history"] == "appended; appended=1"  # the resent history lands once
    assert stored(service) == [("user", "Hi, I am Ann."), ("assistant", "Hello Ann!"), ("user", "My code?"),
                               ("assistant", "It is 4412.")]  # fmt: skip
    # The stable prefix is the same bytes from one request to the next (the provider's cache hits).
    assert upstream.requests[1]["system"] == system


def test_the_agent_is_chosen_by_bearer_token_or_by_the_admin_with_x_vcm_agent(
    live: LiveServer, upstream: FakeMessages, service: MemoryService
) -> None:
    token = agent(live)
    agent(live, "bob")
    upstream.script += [message(text("a")), message(text("b"))]
    bearer = anthropic.Anthropic(base_url=live.url, auth_token=token, max_retries=0)
    bearer.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "by bearer"}])
    admin = sdk(live, ADMIN_TOKEN, default_headers={"X-VCM-Agent": "bob"})
    admin.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "by admin"}])
    assert stored(service) == [("user", "by bearer"), ("assistant", "a")]
    assert [m["content"] for m in said(service, "bob") if m["role"] == "user"] == ["by admin"]
    with pytest.raises(anthropic.AuthenticationError):
        sdk(live, "vcm_not_a_token").messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(anthropic.UnprocessableEntityError):  # the admin must name the agent
        sdk(live, ADMIN_TOKEN).messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}])


def test_tool_use_and_tool_result_blocks_stay_paired_with_nothing_between(
    live: LiveServer, upstream: FakeMessages, service: MemoryService
) -> None:
    token = agent(live)
    service.remember("ann", "Ann lives in Porto", type="sticky")
    upstream.script += [
        message(
            text("Checking."),
            tool_use("toolu_1", "get_weather", {"city": "Porto"}),
            tool_use("toolu_2", "get_weather", {"city": "Faro"}),
            stop_reason="tool_use",
        ),
        message(text("Porto 18C, Faro 22C.")),
    ]
    client = sdk(live, token)
    history: list[Any] = [{"role": "user", "content": "Weather in Porto and Faro?"}]
    out = client.messages.create(model="m", max_tokens=50, messages=history, tools=[WEATHER])  # type: ignore[list-item]
    assert out.stop_reason == "tool_use" and [b.type for b in out.content] == ["text", "tool_use", "tool_use"]
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "22C"}]},
    ]
    history += [{"role": "assistant", "content": dumped(out.content)}, {"role": "user", "content": results}]
    sent_history = copy.deepcopy(history)
    client.messages.create(model="m", max_tokens=50, messages=history, tools=[WEATHER])  # type: ignore[list-item]
    assert history == sent_history
    turns = upstream.requests[1]["messages"]
    calling = [i for i, t in enumerate(turns) if any(b["type"] == "tool_use" for b in t["content"])]
    assert len(calling) == 1 and turns[calling[0]]["role"] == "assistant"
    answer = turns[calling[0] + 1]
    assert answer["role"] == "user" and answer["content"] == results  # the results, nothing injected between
    assert turns[-1] == answer and len(turns) == calling[0] + 2  # a tool-result-last request ends on them
    assert upstream.requests[1]["tools"] == [WEATHER]
    assert [r for r, _ in stored(service)] == ["user", "assistant", "tool", "tool", "assistant"]


def test_server_tool_thinking_and_unknown_blocks_pass_through_untouched(
    live: LiveServer, upstream: FakeMessages, service: MemoryService
) -> None:
    token = agent(live)
    upstream.script.append(message(text("Done.")))
    thinking = {"type": "thinking", "thinking": "Let me search.", "signature": "sig-abc"}
    server_use = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "porto"}}
    server_result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                     "content": [{"type": "web_search_result", "url": "https://x", "title": "X",
                                  "encrypted_content": "enc", "page_age": None}]}  # fmt: skip
    future = {"type": "future_block", "payload": {"a": 1}}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Look this up", "cache_control": {"type": "ephemeral"}},
                                     image]},
        {"role": "assistant", "content": [thinking, server_use, server_result, text("Found it."), future]},
        {"role": "user", "content": "Thanks."},
    ]  # fmt: skip
    body = {
        "model": "m",
        "max_tokens": 50,
        "messages": history,
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
    }
    r = httpx.post(f"{live.url}/v1/messages", json=body, headers={"x-api-key": token})
    assert r.status_code == 200, r.text
    turns = upstream.requests[0]["messages"]
    assert {"role": "assistant", "content": [thinking, server_use, server_result, text("Found it."), future]} in turns
    user = next(t for t in turns if any(b.get("type") == "image" for b in t["content"]))
    assert image in user["content"] and {"type": "text", "text": "Look this up"} in user["content"]
    assert upstream.requests[0]["tools"] == body["tools"]
    # vcm places the one breakpoint: the client's marks on old blocks are taken off.
    assert "cache_control" not in json.dumps(turns)


def test_options_and_beta_headers_pass_through(live: LiveServer, upstream: FakeMessages) -> None:
    token = agent(live)
    upstream.script.append(message(text("ok")))
    options: dict[str, Any] = {
        "max_tokens": 2048, "stop_sequences": ["END"], "service_tier": "standard_only",
        "tool_choice": {"type": "tool", "name": "get_weather"}, "metadata": {"user_id": "u1"},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }  # fmt: skip
    sdk(live, token).messages.create(
        model="m", messages=[{"role": "user", "content": "hi"}], tools=[WEATHER],  # type: ignore[list-item]
        extra_body={"vendor_knob": [1, 2], "temperature": 0.3},
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
        **options,
    )  # fmt: skip
    sent = upstream.requests[0]
    assert {k: sent[k] for k in options} == options and sent["vendor_knob"] == [1, 2] and sent["temperature"] == 0.3
    assert upstream.headers[0]["anthropic-beta"] == "interleaved-thinking-2025-05-14"


def test_memory_tags_never_reach_an_anthropic_client(
    live: LiveServer, upstream: FakeMessages, service: MemoryService
) -> None:
    token = agent(live)
    upstream.script.append(message(text("Noted. [MEMORY:preference]Ann likes green tea[/MEMORY] Bye.")))
    out = sdk(live, token).messages.create(model="m", max_tokens=50, messages=[{"role": "user", "content": "Tea!"}])
    assert out.content[0].text == "Noted. Bye."  # type: ignore[union-attr]
    assert [f.value for f in service.list_facts("ann")] == ["Ann likes green tea"]


def test_streamed_events_are_relayed_unchanged_but_for_memory_tags(
    live: LiveServer, upstream: FakeMessages, service: MemoryService
) -> None:
    token = agent(live)
    upstream.script.append(
        stream(
            ("text", ["Checking [MEM", "ORY:fact]Ann asked[/MEM", "ORY] now."]),
            ("tool_use", ("toolu_9", "get_weather", ['{"city"', ': "Porto"}'])),
            stop_reason="tool_use",
        )
    )
    client = sdk(live, token)
    with client.messages.stream(model="mine", max_tokens=50, messages=[{"role": "user", "content": "Weather?"}],
                                tools=[WEATHER]) as s:  # type: ignore[list-item]  # fmt: skip
        kinds = [e.type for e in s]
        final = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    assert final.model == "mine" and final.stop_reason == "tool_use"
    assert final.content[0].text == "Checking now."  # type: ignore[union-attr]
    assert final.content[1].input == {"city": "Porto"} and final.content[1].id == "toolu_9"  # type: ignore[union-attr]
    # The wire: every upstream event relayed in order, text deltas without the tag.
    upstream.script.append(stream(("text", ["A [STATE:k]1[/STATE]", "B"])))
    body = {"model": "m", "max_tokens": 5, "stream": True, "messages": [{"role": "user", "content": "again"}]}
    with httpx.stream("POST", f"{live.url}/v1/messages", json=body, headers={"x-api-key": token}) as r:
        lines = list(r.iter_lines())
    names = [ln[7:] for ln in lines if ln.startswith("event: ")]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]  # fmt: skip
    texts = [json.loads(ln[6:])["delta"]["text"] for ln in lines if ln.startswith("data: ") and "text_delta" in ln]
    assert texts == ["A ", "B"]
    assert [f.value for f in service.list_facts("ann")] == ["Ann asked"]
    assert stored(service)[1] == ("assistant", "Checking now.") and stored(service)[-1] == ("assistant", "A B")


@pytest.mark.parametrize("streamed", [False, True])
def test_upstream_errors_are_relayed_with_their_status_and_body(
    live: LiveServer, upstream: FakeMessages, service: MemoryService, streamed: bool
) -> None:
    token = agent(live)
    upstream.script += [refusal(400, "invalid_request_error", "max_tokens: too large"),
                        refusal(529, "overloaded_error", "Overloaded")]  # fmt: skip
    client = sdk(live, token)
    ask: dict[str, Any] = {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": streamed,
    }
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(**ask)
    assert bad.value.status_code == 400
    assert bad.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: too large"},
    }
    with pytest.raises(anthropic.APIStatusError) as busy:
        client.messages.create(**ask)
    assert busy.value.status_code == 529
    upstream.script.append(message(text("Hello.")))
    client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert stored(service) == [("user", "hi"), ("assistant", "Hello.")]  # the agent is free; "hi" kept once


def test_a_resent_history_lands_once_and_an_edited_past_is_left_out_and_reported(
    live: LiveServer, upstream: FakeMessages, service: MemoryService
) -> None:
    token = agent(live)
    upstream.script += [message(text("A1.")), message(text("A1.")), message(text("A2."))]
    client = sdk(live, token)
    history: list[Any] = [{"role": "user", "content": "Q1"}]
    for _ in range(2):  # a client retrying the same request
        raw = client.messages.with_raw_response.create(model="m", max_tokens=10, messages=history)
    assert raw.headers["x-vcm-history"] == "appended; appended=0"
    edited = [{"role": "user", "content": "Q1, edited"}, {"role": "assistant", "content": "A1."},
              {"role": "user", "content": "Q2"}]  # fmt: skip
    raw = client.messages.with_raw_response.create(model="m", max_tokens=10, messages=edited)
    assert raw.headers["x-vcm-history"] == "diverged; left_out=1; appended=1"
    assert stored(service) == [("user", "Q1"), ("assistant", "A1."), ("user", "Q2"), ("assistant", "A2.")]
    assert "edited" not in json.dumps(upstream.requests[-1]["messages"])


ASKED: Any = {"role": "user", "content": "What now?"}
USED = {"role": "assistant", "content": [tool_use("toolu_1", "get_weather", {"city": "Porto"})]}
# The last message is bad in a way only the wire format's shape or memory's own checks catch:
# nothing before it may be kept either (it used to be, and ids of None were stored as "None").
BAD_TURNS = {
    "NUL in the text": [{"role": "user", "content": "a\x00b"}],
    "a text block whose text is an object": [{"role": "user", "content": [{"type": "text", "text": {"a": 1}}]}],
    "a text block without text": [{"role": "user", "content": [{"type": "text"}]}],
    "a tool_result without tool_use_id": [USED, {"role": "user", "content": [
        {"type": "tool_result", "content": "18C"}]}],
    "a tool_result whose id is a number": [USED, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": 5, "content": "18C"}]}],
    "a tool_result whose content is an object": [USED, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": {"temp": 18}}]}],
    "a tool_use without id": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]},
                              {"role": "user", "content": "and?"}],
    "a tool_use whose input is a string": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_2", "name": "f", "input": "city=Porto"}]},
        {"role": "user", "content": "and?"}],
}  # fmt: skip


@pytest.mark.parametrize("bad", BAD_TURNS.values(), ids=BAD_TURNS.keys())
def test_a_bad_block_anywhere_in_the_history_is_refused_with_nothing_kept(
    live: LiveServer, upstream: FakeMessages, service: MemoryService, bad: list[dict[str, Any]]
) -> None:
    token = agent(live)
    with pytest.raises(anthropic.UnprocessableEntityError) as refused:
        sdk(live, token).messages.create(model="m", max_tokens=10, messages=[ASKED, *bad])  # type: ignore[list-item]
    error: Any = refused.value.body
    assert error["error"]["code"] == "VALIDATION_ERROR" and error["error"]["field"].startswith("messages"), error
    assert stored(service) == [] and upstream.requests == []
    upstream.script.append(message(text("Fine.")))
    sdk(live, token).messages.create(model="m", max_tokens=10, messages=[ASKED])  # the agent is free
    assert stored(service) == [("user", "What now?"), ("assistant", "Fine.")]


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"temperature":NaN}',
        b'{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"metadata":{"user_id":"\\ud800"}}',
        b'{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"hi"},'
        b'{"type":"image","source":"\\ud800"}]}]}',
        b'{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"stream":"true"}',
    ],
    ids=["NaN option", "lone surrogate in an option", "lone surrogate in a passed-through block", "stream 'true'"],
)
def test_a_body_the_upstream_could_not_be_sent_is_a_coded_422(
    live: LiveServer, upstream: FakeMessages, service: MemoryService, body: bytes
) -> None:
    token = agent(live)
    r = httpx.post(f"{live.url}/v1/messages", content=body, headers={"x-api-key": token,
                                                                       "Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR", r.text
    assert stored(service) == [] and upstream.requests == []


def test_the_sdks_own_query_parameters_are_not_refused(live: LiveServer, upstream: FakeMessages) -> None:
    # Every other route refuses a query parameter it does not declare; the beta endpoints of the
    # Anthropic SDK post to /v1/messages?beta=true.
    upstream.script.append(message(text("Hi.")))
    reply = sdk(live, agent(live)).beta.messages.create(model="m", max_tokens=10, messages=[ASKED])
    assert reply.content[0].text == "Hi."  # type: ignore[union-attr]


def test_an_upstream_answer_that_is_garbage_is_llm_rejected_not_a_crash(
    live: LiveServer, upstream: FakeMessages, service: MemoryService
) -> None:
    token = agent(live)
    upstream.script += [
        message(text("not a stream")),  # a 200 to a stream request that holds no event
        Reply(body={**message(text("x")).body, "usage": {"input_tokens": math.inf}}),
    ]
    client = sdk(live, token)
    with pytest.raises(anthropic.APIStatusError) as empty:
        client.messages.create(model="m", max_tokens=10, messages=[ASKED], stream=True)
    with pytest.raises(anthropic.APIStatusError) as nan:
        client.messages.create(model="m", max_tokens=10, messages=[ASKED])
    for refused in (empty, nan):
        assert refused.value.status_code == 502
        assert refused.value.body["error"]["code"] == "LLM_REJECTED"  # type: ignore[index]
    assert stored(service) == [("user", "What now?")]


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_use_block_sent_without_an_id_gets_one_the_echo_is_recognised_by(
    live: LiveServer, upstream: FakeMessages, service: MemoryService, streamed: bool
) -> None:
    token = agent(live)
    if streamed:
        reply = stream(("tool_use", ("x", "get_weather", ['{"city": "Porto"}'])), stop_reason="tool_use")
        for name, data in reply.events or []:
            if name == "content_block_start":
                data["content_block"].pop("id")
    else:
        block = tool_use("x", "get_weather", {"city": "Porto"})
        block.pop("id")
        reply = message(block, stop_reason="tool_use")
    upstream.script += [reply, message(text("18C."))]
    client = sdk(live, token)
    history: list[Any] = [{"role": "user", "content": "Weather in Porto?"}]
    if streamed:
        with client.messages.stream(model="m", max_tokens=50, messages=history, tools=[WEATHER]) as s:  # type: ignore[list-item]
            out = s.get_final_message()
    else:
        out = client.messages.create(model="m", max_tokens=50, messages=history, tools=[WEATHER])  # type: ignore[list-item]
    use = out.content[0]
    assert use.type == "tool_use" and isinstance(use.id, str) and use.id.startswith("toolu_")
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "18C"}
    history += [{"role": "assistant", "content": dumped(out.content)}, {"role": "user", "content": [result]}]
    r = client.messages.with_raw_response.create(model="m", max_tokens=50, messages=history, tools=[WEATHER])  # type: ignore[list-item]
    assert r.headers["x-vcm-history"] == "appended; appended=1"  # the result only: the call is known
    memory = said(service)
    assert [m["role"] for m in memory] == ["user", "assistant", "tool", "assistant"]
    assert memory[1]["tool_calls"][0]["id"] == use.id == memory[2]["tool_call_id"]
