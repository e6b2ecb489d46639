"""The memory proxy's conformance suite for the OpenAI wire format: ``/v1/chat/completions``
driven by the official ``openai`` SDK against the recording fake upstream (tests/doubles/llm.py),
plain and streamed. Each test is named after the failure it prevents (docs/proxy.md)."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import httpx
import openai
import pytest

from tests.api.conftest import LiveServer, upstream_settings
from tests.api.test_chat import agent, said
from tests.doubles.llm import Action, FakeLLM, answer, calls, streamed, streamed_calls
from vcm.api.app import create_app
from vcm.api.proxy import keys_of, reconcile
from vcm.service import MemoryService

pytestmark = pytest.mark.parametrize("redis_client", ["redis"], indirect=True)


settings = pytest.fixture(upstream_settings, name="settings")


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
TWO_CALLS: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Porto"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Faro"}'}},
    ],
}
RESULTS = [
    {"role": "tool", "tool_call_id": "call_a", "content": "18C, sunny"},
    {"role": "tool", "tool_call_id": "call_b", "content": "22C, windy"},
]


def sdk(live: LiveServer, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key=token, max_retries=0)


stored = said  # the FIFO as stored, without the prompt's time markers


def paired(messages: list[dict[str, Any]]) -> None:
    """Every assistant message with tool calls is followed by one result per call, in order."""
    for i, m in enumerate(messages):
        if m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            after = messages[i + 1 : i + 1 + len(ids)]
            assert [(r["role"], r.get("tool_call_id")) for r in after] == [("tool", x) for x in ids], messages


def test_the_callers_messages_are_never_mutated(live: LiveServer, upstream: FakeLLM, service: MemoryService) -> None:
    token = agent(live)
    service.remember("ann", "Ann's door code is 4412", type="sticky")
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "name": "ann", "content": [{"type": "text", "text": "Weather in Porto and Faro?"}]},
        TWO_CALLS,
        *RESULTS,
        {"role": "user", "content": "Thanks. And tomorrow?"},
    ]
    sent = copy.deepcopy(history)
    upstream.script.append(answer("Mild."))
    sdk(live, token).chat.completions.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[arg-type,list-item]
    assert history == sent
    # What the server does with them: read, never written into (the reconciling step on its own,
    # for an agent that holds none of them yet, so every one is appended).
    agent(live, "bob")
    held = copy.deepcopy(sent)
    assert reconcile(service, "bob", held, "user", 10_000).appended == 5
    assert held == sent
    # The upstream got the client's own words, untouched, as the latest user message.
    last = upstream.requests[0]["messages"][-1]
    assert last["role"] == "user" and last["content"].endswith("Thanks. And tomorrow?")  # after a time marker, if any


def test_injected_layers_are_never_stored_as_the_users_content(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    service.remember("ann", "Ann's door code is 4412", type="sticky")
    upstream.script += [answer("Hi."), answer("4412.")]
    client = sdk(live, token)
    history: list[Any] = [{"role": "user", "content": "Hi."}]
    first = client.chat.completions.create(model="m", messages=history)
    history += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "My code?"}]
    client.chat.completions.create(model="m", messages=history)
    # The upstream saw the layer (a message of its own), the user's messages as they were said.
    assert any("4412" in str(m["content"]) and m["role"] == "system" for m in upstream.requests[1]["messages"])
    users = [m["content"] for m in upstream.requests[1]["messages"] if m["role"] == "user"]
    assert len(users) == 2 and users[0].endswith("Hi.") and users[1].endswith("My code?")
    # Memory holds what was said, nothing vcm injected.
    assert [(m["role"], m["content"]) for m in stored(service)] == [
        ("user", "Hi."), ("assistant", "Hi."), ("user", "My code?"), ("assistant", "4412."),
    ]  # fmt: skip


def test_tool_calls_reach_the_upstream_followed_by_their_results_in_order(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    service.remember("ann", "Ann lives in Porto", type="sticky")
    upstream.script.append(answer("Porto 18C, Faro 22C."))
    history = [{"role": "user", "content": "Weather in Porto and Faro?"}, TWO_CALLS, *RESULTS,
               {"role": "user", "content": "Which is warmer?"}]  # fmt: skip
    sdk(live, token).chat.completions.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[arg-type,list-item]
    sent = upstream.requests[0]["messages"]
    calling = [i for i, m in enumerate(sent) if m.get("tool_calls")]
    assert len(calling) == 1 and sent[calling[0]]["tool_calls"] == TWO_CALLS["tool_calls"]
    assert sent[calling[0] + 1 : calling[0] + 3] == RESULTS  # nothing injected between
    paired(stored(service))


def test_a_tool_result_last_request_gets_no_injection_between_call_and_result(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    service.remember("ann", "Ann lives in Porto", type="sticky")
    upstream.script += [calls(("get_weather", {"city": "Porto"})), answer("18C in Porto.")]
    client = sdk(live, token)
    history: list[Any] = [{"role": "user", "content": "Weather at home?"}]
    out = client.chat.completions.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[list-item]
    call = out.choices[0].message
    history += [call.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": "18C"}]  # type: ignore[index]  # fmt: skip
    client.chat.completions.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[list-item]
    sent = upstream.requests[1]["messages"]
    i = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert sent[i + 1] == {"role": "tool", "tool_call_id": "call_0_get_weather", "content": "18C"}
    assert sent[i + 1 :] == [sent[i + 1]]  # the result is the last thing the model reads
    paired(sent)


def test_parallel_tool_calls_come_back_whole_and_their_results_land_paired(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    upstream.script += [
        calls(("get_weather", {"city": "Porto"}), ("get_weather", {"city": "Faro"})),
        answer("Both mild."),
    ]
    client = sdk(live, token)
    history: list[Any] = [{"role": "user", "content": "Porto and Faro?"}]
    out = client.chat.completions.create(model="m", messages=history, tools=[WEATHER], parallel_tool_calls=True)  # type: ignore[list-item]
    got = out.choices[0].message.tool_calls or []
    assert [(c.id, json.loads(c.function.arguments)["city"]) for c in got] == [  # type: ignore[union-attr]
        ("call_0_get_weather", "Porto"), ("call_1_get_weather", "Faro"),
    ]  # fmt: skip
    assert upstream.requests[0]["parallel_tool_calls"] is True
    history += [out.choices[0].message.model_dump(exclude_none=True)]
    history += [{"role": "tool", "tool_call_id": c.id, "content": f"{i}"} for i, c in enumerate(got)]
    client.chat.completions.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[list-item]
    memory = stored(service)
    assert [m["role"] for m in memory] == ["user", "assistant", "tool", "tool", "assistant"]
    paired(memory)
    paired(upstream.requests[1]["messages"])


def test_options_the_proxy_does_not_own_pass_through(live: LiveServer, upstream: FakeLLM) -> None:
    token = agent(live)
    schema = {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": True}}
    two = [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop",
            "logprobs": {"content": []}} for i, t in enumerate(['{"a": 1}', '{"a": 2}'])]  # fmt: skip
    upstream.script.append(
        Action(body={"id": "x", "choices": two, "system_fingerprint": "fp_1", "usage": {"total_tokens": 3}})
    )
    options: dict[str, Any] = {
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": schema,
        "stop": ["\n\n"],
        "n": 2,
        "seed": 7,
        "logprobs": True,
        "top_logprobs": 2,
        "temperature": 0.2,
    }
    out = sdk(live, token).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "JSON please"}], tools=[WEATHER],  # type: ignore[list-item]
        extra_body={"vendor_knob": {"x": 1}}, **options,
    )  # fmt: skip
    body = upstream.requests[0]
    assert {k: body[k] for k in options} == options and body["vendor_knob"] == {"x": 1}
    # The answer comes back whole: both choices, logprobs, the fields vcm does not know.
    assert [c.message.content for c in out.choices] == ['{"a": 1}', '{"a": 2}']
    assert out.choices[1].logprobs is not None and out.system_fingerprint == "fp_1"
    assert out.usage is not None and out.usage.total_tokens == 3


def test_streamed_deltas_are_relayed_unchanged_but_for_memory_tags(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    base = {"id": "up", "object": "chat.completion.chunk", "created": 1, "model": "fake", "system_fingerprint": "fp"}

    def delta(d: dict[str, Any], **choice: Any) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": d, **choice}]}

    def args(piece: str) -> dict[str, Any]:
        return delta({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})

    head = {"index": 0, "id": "call_w", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    events = [
        delta({"role": "assistant", "content": ""}, logprobs=None),
        delta({"content": "Checking [MEMO"}),
        delta({"content": "RY:fact]Ann asked[/MEMORY] now."}),
        delta({"tool_calls": [head]}),
        args('{"city"'),
        args(': "Porto"}'),
        delta({}, finish_reason="tool_calls"),
        {**base, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}},
    ]
    upstream.script.append(Action(events=events))
    body = {"model": "mine", "messages": [{"role": "user", "content": "Weather?"}], "stream": True,
            "stream_options": {"include_usage": True}, "tools": [WEATHER]}  # fmt: skip
    relayed = []
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {token}"}) as s:  # fmt: skip
        assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
        for line in s.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                relayed.append(json.loads(line[6:]))
    assert upstream.requests[0]["stream_options"] == {"include_usage": True}
    assert len(relayed) == len(events) and {c["model"] for c in relayed} == {"mine"}

    def same(chunk: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in chunk.items() if k not in ("id", "created", "model")}

    tagged = (1, 2)  # the chunks holding the tag: their text changes, nothing else
    for i, (up, out) in enumerate(zip(events, relayed, strict=True)):
        if i not in tagged:
            assert same(out) == same(up), i
    assert [relayed[i]["choices"][0]["delta"]["content"] for i in tagged] == ["Checking ", "now."]
    assert relayed[-1]["usage"] == events[-1]["usage"] and relayed[-2]["choices"][0]["finish_reason"] == "tool_calls"
    # The SDK puts the same answer together; memory holds the call, the fact is kept.
    (last,) = [m for m in stored(service) if m["role"] == "assistant"]
    assert last["content"] == "Checking now." and last["tool_calls"][0]["function"]["arguments"] == '{"city": "Porto"}'
    assert [f.value for f in service.list_facts("ann")] == ["Ann asked"]


def test_streamed_answers_through_the_sdk_keep_usage_and_finish_reason(live: LiveServer, upstream: FakeLLM) -> None:
    token = agent(live)
    upstream.script.append(
        streamed("Nine ", "o'clock.", usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})
    )
    stream = sdk(live, token).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "When?"}], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Nine o'clock."
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 7


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_are_relayed_with_their_status_and_body(
    live: LiveServer, upstream: FakeLLM, service: MemoryService, stream: bool
) -> None:
    token = agent(live)
    refusal = {"error": {"message": "max_tokens is too large", "type": "invalid_request_error",
                         "param": "max_tokens", "code": "invalid_value"}}  # fmt: skip
    upstream.script += [Action(status=400, body=refusal), Action(status=429, body={"error": {"message": "slow down"}})]
    client = sdk(live, token)
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=stream, max_tokens=10**9
        )
    assert bad.value.status_code == 400 and bad.value.body == refusal["error"] and bad.value.code == "invalid_value"
    with pytest.raises(openai.RateLimitError) as slow:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=stream)
    assert slow.value.status_code == 429
    # The agent is free again and the user's message, said once, is in memory once.
    upstream.script.append(answer("Hello."))
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert [m["content"] for m in stored(service)] == ["hi", "Hello."]


def test_the_same_history_sent_twice_appends_nothing_twice(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    upstream.script += [
        answer("Noted."),
        answer("Noted."),
        calls(("get_weather", {"city": "Porto"})),
        answer("18C."),
        answer("18C."),
    ]
    client = sdk(live, token)
    history: list[Any] = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "ok?"},
                          {"role": "user", "content": "ok"}]  # fmt: skip
    for _ in range(2):  # a client retrying the same request
        r = client.chat.completions.with_raw_response.create(model="m", messages=history)
    assert r.headers["x-vcm-history"] == "appended; appended=0"
    assert [m["content"] for m in stored(service)] == ["ok", "ok?", "ok", "Noted."]  # "ok" said twice is two
    history += [{"role": "assistant", "content": "Noted."}, {"role": "user", "content": "Weather?"}]
    out = client.chat.completions.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[list-item]
    history += [out.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": "call_0_get_weather", "content": "18C"}]  # fmt: skip
    for _ in range(2):
        client.chat.completions.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[list-item]
    memory = stored(service)
    assert [m["role"] for m in memory] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert len(keys_of(history)) == len(set(keys_of(history)))


def test_a_diverging_history_is_not_merged_but_left_out_and_reported(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    upstream.script += [answer("A1."), answer("A2."), answer("A3."), answer("A4.")]
    client = sdk(live, token)
    history: list[Any] = [{"role": "user", "content": "Q1"}]
    client.chat.completions.create(model="m", messages=history)
    history += [{"role": "assistant", "content": "A1."}, {"role": "user", "content": "Q2"}]
    client.chat.completions.create(model="m", messages=history)
    # The client edits its first message and asks on: the edit is not merged into the past.
    edited = [{"role": "user", "content": "Q1, edited"}, *history[1:], {"role": "assistant", "content": "A2."},
              {"role": "user", "content": "Q3"}]  # fmt: skip
    r = client.chat.completions.with_raw_response.create(model="m", messages=edited)
    assert r.headers["x-vcm-history"] == "diverged; left_out=1; appended=1"
    assert [m["content"] for m in stored(service)] == ["Q1", "A1.", "Q2", "A2.", "Q3", "A3."]
    assert not any("edited" in str(m["content"]) for m in upstream.requests[-1]["messages"])
    # A client that trimmed its history from the front changes nothing: memory keeps the rest.
    trimmed: list[Any] = [
        {"role": "user", "content": "Q3"},
        {"role": "assistant", "content": "A3."},
        {"role": "user", "content": "Q4"},
    ]
    r = client.chat.completions.with_raw_response.create(model="m", messages=trimmed)
    assert r.headers["x-vcm-history"] == "appended; appended=1"
    assert [m["content"] for m in stored(service)][-3:] == ["A3.", "Q4", "A4."]
    assert len(stored(service)) == 8


def test_messages_without_text_neither_break_the_request_nor_count_as_divergence(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    upstream.script += [answer("[MEMORY:fact]Ann sent a photo[/MEMORY]"), answer("Nice."), answer("Sure.")]
    client = sdk(live, token)
    photo = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    history: list[Any] = [{"role": "user", "content": [photo]}]
    first = client.chat.completions.create(model="m", messages=history)
    assert first.choices[0].message.content == ""  # a reply that is only a tag shows nothing
    history += [{"role": "assistant", "content": ""}, {"role": "user", "content": "Like it?"}]
    client.chat.completions.create(model="m", messages=history)
    history += [{"role": "assistant", "content": "Nice."}, TWO_CALLS,
                {"role": "tool", "tool_call_id": "call_a", "content": ""}, RESULTS[1]]  # fmt: skip
    r = client.chat.completions.with_raw_response.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[list-item]
    assert r.headers["x-vcm-history"] == "appended; appended=3"  # the empty echo is no divergence
    assert [(m["role"], m["content"]) for m in stored(service)] == [
        ("user", "[image_url]"), ("user", "Like it?"), ("assistant", "Nice."), ("assistant", ""),
        ("tool", "(empty)"), ("tool", "22C, windy"), ("assistant", "Sure."),
    ]  # fmt: skip


ASK: Any = {"role": "user", "content": "What now?"}
CALL = {"id": "call_x", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
# A history whose last message is bad in a way only memory's own checks (or the wire format's
# shape) catch: the good messages before it must not be kept either.
BAD_LAST = {
    "NUL in the text": {"role": "user", "content": "a\x00b"},
    "a name memory refuses": {"role": "user", "name": "two words", "content": "hi"},
    "a tool result without its call id": {"role": "tool", "content": "18C"},
    "a tool call id that is a number": {"role": "tool", "tool_call_id": 5, "content": "18C"},
    "tool_calls as a string": {"role": "assistant", "content": "x", "tool_calls": "get_weather"},
    "tool_calls as an object": {"role": "assistant", "content": "x", "tool_calls": CALL},
    "a tool call that is a string": {"role": "assistant", "content": None, "tool_calls": ["get_weather()"]},
    "a tool call without an id": {"role": "assistant", "content": None,
                                  "tool_calls": [{"type": "function", "function": CALL["function"]}]},
    "a tool call without a function": {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
    "a part that is not an object": {"role": "user", "content": ["hello"]},
    "a part without a type": {"role": "user", "content": [{"text": "hello"}]},
    "a text part whose text is an object": {"role": "user", "content": [{"type": "text", "text": {"a": 1}}]},
}  # fmt: skip


@pytest.mark.parametrize("bad", BAD_LAST.values(), ids=BAD_LAST.keys())
def test_a_bad_message_anywhere_in_the_history_is_refused_with_nothing_kept(
    live: LiveServer, upstream: FakeLLM, service: MemoryService, bad: dict[str, Any]
) -> None:
    token = agent(live)
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        sdk(live, token).chat.completions.create(model="m", messages=[ASK, bad])  # type: ignore[list-item]
    error: Any = refused.value.body  # the SDK hands over the body's "error"
    assert error["code"] == "VALIDATION_ERROR" and error["field"].startswith("messages"), error
    assert stored(service) == [] and upstream.requests == []  # not even the good message before it
    upstream.script.append(answer("Fine."))
    sdk(live, token).chat.completions.create(model="m", messages=[ASK])  # the agent is free
    assert [m["content"] for m in stored(service)] == ["What now?", "Fine."]


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":NaN}',
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"user":"\\ud800"}',
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function",'
        b'"function":{"name":"\\udc00"}}]}',
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":"yes"}',
        b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":1}',
    ],
    ids=["NaN option", "lone surrogate in an option", "lone surrogate in a tool", "stream 'yes'", "stream 1"],
)
def test_a_body_the_upstream_could_not_be_sent_is_a_coded_422(
    live: LiveServer, upstream: FakeLLM, service: MemoryService, body: bytes
) -> None:
    token = agent(live)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    r = httpx.post(f"{live.url}/v1/chat/completions", content=body, headers=headers)
    assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR", r.text
    assert stored(service) == [] and upstream.requests == []


def test_a_long_reply_the_model_wrote_does_not_get_the_next_request_refused(
    upstream: FakeLLM, service: MemoryService
) -> None:
    # The client's words are held to [chat] max_message_chars; the model's reply is stored whole
    # (memory's own limit is larger), and the client sends it back with its next turn.
    settings = upstream_settings(upstream)
    settings = settings.model_copy(update={"chat": settings.chat.model_copy(update={"max_message_chars": 100})})
    long = "word " * 30
    upstream.script += [answer(long), answer("Done.")]
    with LiveServer(create_app(service, None, settings=settings)) as live:
        client = sdk(live, agent(live))
        history: list[Any] = [{"role": "user", "content": "Write at length."}]
        client.chat.completions.create(model="m", messages=history)
        history += [{"role": "assistant", "content": long}, {"role": "user", "content": "Thanks."}]
        r = client.chat.completions.with_raw_response.create(model="m", messages=history)
        assert r.headers["x-vcm-history"] == "appended; appended=1"
        with pytest.raises(openai.UnprocessableEntityError):  # the client's own words are still held to it
            client.chat.completions.create(model="m", messages=[*history, {"role": "user", "content": long}])
    assert [m["content"] for m in stored(service)] == ["Write at length.", long, "Thanks.", "Done."]


def test_a_reply_memory_cannot_keep_as_written_reaches_the_client_and_is_kept_as_it_can(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    # Memory refuses NUL characters; a model wrote one. The answer used to be lost (a 422 for the
    # client's request), and the client's next request, carrying it back, refused as well.
    upstream.script += [answer("Tea\x00time."), streamed("Milk", "\x00", "first."), answer("Done.")]
    client = sdk(live, agent(live))
    history: list[Any] = [{"role": "user", "content": "When?"}]
    assert client.chat.completions.create(model="m", messages=history).choices[0].message.content == "Tea\x00time."
    history += [{"role": "assistant", "content": "Tea\x00time."}, {"role": "user", "content": "And?"}]
    chunks = client.chat.completions.create(model="m", messages=history, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Milk\x00first."
    history += [{"role": "assistant", "content": "Milk\x00first."}, {"role": "user", "content": "Thanks."}]
    r = client.chat.completions.with_raw_response.create(model="m", messages=history)
    assert r.headers["x-vcm-history"] == "appended; appended=1"  # both replies known: not appended again
    assert [m["content"] for m in stored(service)] == [
        "When?", "Tea\ufffdtime.", "And?", "Milk\ufffdfirst.", "Thanks.", "Done."
    ]  # fmt: skip


def test_an_upstream_answer_that_is_garbage_is_llm_rejected_not_a_crash(
    live: LiveServer, upstream: FakeLLM, service: MemoryService
) -> None:
    token = agent(live)
    headers = {"Authorization": f"Bearer {token}"}
    ask: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    bad_call = {"choices": [{"index": 0, "delta": {"tool_calls": ["get_weather"]}}]}
    upstream.script += [
        Action(raw=b"<html>not a stream</html>"),  # a 200 to a stream request that holds no event
        Action(events=[bad_call]),  # a first chunk whose tool call is a string
        Action(events=[{"choices": [{"index": 0, "delta": {"content": "Hel"}}]}, bad_call]),  # the same, later
        Action(body={"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}], "p": math.inf}),
    ]
    for _ in range(2):
        r = httpx.post(f"{live.url}/v1/chat/completions", json={**ask, "stream": True}, headers=headers)
        assert r.status_code == 502 and r.json()["error"]["code"] == "LLM_REJECTED", r.text
    r = httpx.post(f"{live.url}/v1/chat/completions", json={**ask, "stream": True}, headers=headers)
    frames = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    assert frames[0]["choices"][0]["delta"]["content"] == "Hel"
    assert frames[-1]["error"]["code"] == "LLM_REJECTED"  # said, not cut off
    r = httpx.post(f"{live.url}/v1/chat/completions", json=ask, headers=headers)
    assert r.status_code == 502 and r.json()["error"]["code"] == "LLM_REJECTED", r.text
    assert stored(service) == [{"role": "user", "content": "hi"}]  # said once; no garbage kept


@pytest.mark.parametrize("streamed", [False, True])
def test_a_tool_call_sent_without_an_id_or_with_object_arguments_is_shown_as_memory_keeps_it(
    live: LiveServer, upstream: FakeLLM, service: MemoryService, streamed: bool
) -> None:
    """Some servers leave out call ids or send arguments as an object. The client is shown the
    calls in the API's form, as memory keeps them: its echo is recognised (not appended again or
    refused for the missing id) and the result pairs with the call."""
    token = agent(live)
    if streamed:
        action = streamed_calls(("get_weather", {"city": "Porto"}))
        for event in action.events or []:
            for piece in event["choices"][0]["delta"].get("tool_calls", []):
                piece.pop("id", None)
    else:
        odd = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Porto"}}}
        message = {"role": "assistant", "content": None, "tool_calls": [odd]}
        action = Action(body={"id": "c", "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})
    upstream.script += [action, answer("18C in Porto.")]
    client = sdk(live, token)
    history: list[Any] = [{"role": "user", "content": "Weather in Porto?"}]
    if streamed:
        got: dict[int, dict[str, Any]] = {}
        for chunk in client.chat.completions.create(model="m", messages=history, tools=[WEATHER], stream=True):  # type: ignore[list-item]
            for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                call = got.setdefault(
                    piece.index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = call["id"] or piece.id
                call["function"]["name"] += (piece.function and piece.function.name) or ""
                call["function"]["arguments"] += (piece.function and piece.function.arguments) or ""
        echoed = {"role": "assistant", "content": "", "tool_calls": [got[i] for i in sorted(got)]}
    else:
        out = client.chat.completions.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[list-item]
        echoed = out.choices[0].message.model_dump(exclude_none=True)
    call_id = echoed["tool_calls"][0]["id"]
    assert isinstance(call_id, str) and call_id.startswith("call_")
    assert json.loads(echoed["tool_calls"][0]["function"]["arguments"]) == {"city": "Porto"}
    history += [echoed, {"role": "tool", "tool_call_id": call_id, "content": "18C"}]
    r = client.chat.completions.with_raw_response.create(model="m", messages=history, tools=[WEATHER])  # type: ignore[list-item]
    assert r.headers["x-vcm-history"] == "appended; appended=1"  # the result only: the call is known
    memory = stored(service)
    assert [m["role"] for m in memory] == ["user", "assistant", "tool", "assistant"]
    assert memory[1]["tool_calls"][0]["id"] == call_id
    paired(memory)
