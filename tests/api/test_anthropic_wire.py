"""The Anthropic wire format's pure translation (vcm.api.anthropic): what the proxy suite cannot
provoke through a live server, such as a vcm notice that lands after a call's results."""

from __future__ import annotations

from typing import Any

from vcm.agent.loop import wire_messages
from vcm.api.anthropic import CACHE, convert, request_of

CALL = {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Porto"}'}}


def test_a_notice_after_tool_results_never_comes_between_tool_use_and_tool_result() -> None:
    context: list[dict[str, Any]] = [
        {"role": "system", "content": "You are Ann's assistant."},
        {"role": "system", "content": "Sticky: Ann lives in Porto."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "system", "content": "[vcm] memory pressure: 72 %"},  # appended while the call ran
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {"role": "user", "content": "Thanks."},
    ]
    system, turns = request_of(wire_messages(context), {})  # as the route builds it
    assert system == [{"type": "text", "text": "You are Ann's assistant."},
                      {"type": "text", "text": "Sticky: Ann lives in Porto.", "cache_control": CACHE}]  # fmt: skip
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Porto"}}
    ]
    answer = turns[2]["content"]
    assert answer[0] == {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}
    assert [b["text"] for b in answer[1:]] == ["[vcm] memory pressure: 72 %", "Thanks."]


def test_a_history_that_starts_with_the_assistant_gets_a_user_turn_first() -> None:
    _, turns = request_of([{"role": "system", "content": "S"}, {"role": "assistant", "content": "Hi."}], {})
    assert turns[0]["role"] == "user" and turns[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Hi."}],
    }


def test_client_blocks_are_kept_whole_and_keyed_as_vcm_keeps_them() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/p.png"}, "cache_control": CACHE}
    history = [
        {"role": "user", "content": [image]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"b": 1, "a": 2}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"},
                                     {"type": "text", "text": "and?"}]},
    ]  # fmt: skip
    out = convert(history)
    assert [(m["role"], m["content"]) for m in out.messages] == [
        ("user", "[image]"), ("assistant", ""), ("tool", "ok"), ("user", "and?"),
    ]  # fmt: skip
    assert out.messages[1]["tool_calls"][0]["function"]["arguments"] == '{"a": 2, "b": 1}'  # one text per input
    _, turns = request_of(out.messages, out.raw)
    assert turns[0]["content"] == [{k: v for k, v in image.items() if k != "cache_control"}]
    assert turns[2]["content"][0]["type"] == "tool_result" and turns[2]["content"][1]["text"] == "and?"


def test_a_time_marker_in_front_of_a_client_message_keeps_the_clients_blocks() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/p.png"}}
    out = convert([{"role": "user", "content": [{"type": "text", "text": "Look"}, image]}])
    marked = [{"role": "user", "content": "[Fri 2026-11-27] Look"}]  # as the context renders it
    _, turns = request_of(marked, out.raw)
    assert turns == [{"role": "user", "content": [{"type": "text", "text": "[Fri 2026-11-27]"},
                                                  {"type": "text", "text": "Look"}, image]}]  # fmt: skip
