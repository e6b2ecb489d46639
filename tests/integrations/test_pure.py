"""The integrations' pure rules, without a server: SDK items to vcm messages and back, item
keys, and the LangGraph store's records, namespace matching and filters."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vcm.integrations import store_records as records
from vcm.integrations.agent_items import Append, item_key, to_append, to_items

CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'}
FN = {"name": "f", "arguments": '{"x": 1}'}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "done"}


def test_items_become_messages_and_back() -> None:
    assert to_append({"role": "developer", "content": "rules"}) == Append(
        "system", "rules", metadata={"source": "openai-agents", "item_type": "message"}
    )
    call = to_append(CALL)
    assert call is not None and call.tool_calls == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    ]
    out = to_append(OUTPUT)
    assert out is not None and (out.role, out.content, out.tool_call_id) == ("tool", "done", "c1")
    parts = {"role": "user", "content": [{"type": "input_text", "text": "look"}, {"type": "input_image"}]}
    assert to_append(parts) == Append(
        "user", "look\n[input_image]", metadata={"source": "openai-agents", "item_type": "message"}
    )
    assert to_append({"type": "reasoning", "id": "rs_1", "summary": []}) is None
    hosted = to_append({"type": "web_search_call", "id": "ws_1", "status": "completed"})
    assert hosted is not None and hosted.role == "assistant" and hosted.content.startswith("[web_search_call] ")

    messages = [
        {"role": "system", "content": "sys"},
        {"role": "system", "content": ""},  # an agent without a system prompt
        {"role": "tool", "tool_call_id": "gone", "content": "orphan"},  # its call was evicted
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": FN}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "assistant", "content": "ok"},
    ]  # fmt: skip
    assert to_items(messages) == [
        {"role": "system", "content": "sys"},
        CALL,
        OUTPUT,
        {"role": "assistant", "content": "ok"},
    ]
    assert to_items(messages[2:3], orphans=True) == [
        {"type": "function_call_output", "call_id": "gone", "output": "orphan"}
    ]


def test_item_keys() -> None:
    user = {"role": "user", "content": "yes"}
    # Tool items are unique by call id, whatever came before; content-only items are chained.
    assert item_key("s", "a", CALL) == item_key("s", "b", CALL) != item_key("s", "a", OUTPUT)
    assert item_key("s", "a", user) == item_key("s", "a", dict(user)) != item_key("s", "b", user)
    assert item_key("s", "a", user) != item_key("t", "a", user)
    fake = {"role": "assistant", "content": "x", "id": "__fake_id__", "type": "message"}
    assert item_key("s", "a", fake) != item_key("s", "b", fake)  # the SDK's placeholder id is no identity
    real = {**fake, "id": "msg_1"}
    assert item_key("s", "a", real) == item_key("s", "b", real)


def test_store_records() -> None:
    key = records.state_key(("a", "b"), "k")
    assert key.startswith("lg:") and len(key) <= 128 and key != records.state_key(("a",), "b/k")
    assert records.is_record({"key": key, "value": records.record(("a",), "k", {}, 1.0, None)})
    assert not records.is_record({"key": "goal", "value": {"namespace": []}})
    value = {"title": "T", "n": 3, "tags": ["x", "y"], "nested": {"note": "deep"}}
    assert records.index_text(value, None, lambda v, p: [], 100) == "T\nx\ny\ndeep"
    assert records.index_text(value, ["title"], lambda v, p: [str(v[p])], 100) == "T"
    assert records.index_text({"t": "abcdef"}, None, lambda v, p: [], 3) == "abc"

    spaces = [("docs", "u1"), ("docs", "u2", "v1"), ("cache", "v1")]
    assert records.list_namespaces(spaces, [("prefix", ("docs", "*"))], None, 10, 0) == [
        ("docs", "u1"),
        ("docs", "u2", "v1"),
    ]
    assert records.list_namespaces(spaces, [("suffix", ("v1",))], 1, 10, 0) == [("cache",), ("docs",)]
    assert records.list_namespaces(spaces, [], None, 1, 1) == [("docs", "u1")]

    row = {"rank": 3, "kind": "note"}
    assert records.passes(row, None) and records.passes(row, {"kind": "note", "rank": {"$gt": 2, "$lte": 3}})
    assert not records.passes(row, {"rank": {"$ne": 3}}) and not records.passes(row, {"missing": 1})
    assert not records.passes(row, {"kind": {"$gt": 1}})  # uncomparable: no match
    with pytest.raises(ValueError, match="unsupported filter operator"):
        records.passes(row, {"rank": {"$in": [3]}})


def test_imports_stay_light() -> None:
    """``import vcm`` loads no integration and no framework; the Agents SDK session never imports
    the SDK (its protocol is structural); the LangGraph store imports langgraph only itself."""
    code = (
        "import sys, vcm; loaded = set(sys.modules)\n"
        "import vcm.integrations.agents; agents_loaded = set(sys.modules)\n"
        "print(sorted(m for m in loaded if m.split('.')[0] in ('agents', 'langgraph', 'openai')"
        " or m.startswith('vcm.integrations')))\n"
        "print(sorted(m for m in agents_loaded if m.split('.')[0] in ('agents', 'langgraph', 'openai')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "[]"]
