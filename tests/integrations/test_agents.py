"""The OpenAI Agents SDK session (vcm.integrations.agents) with the real ``openai-agents``
package: its Runner talks to a recording fake chat-completions endpoint (tests/doubles/llm.py)
and keeps its history in a real vcm server over real HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.api.conftest import LiveServer
from tests.doubles.llm import FakeLLM, answer, calls
from vcm.client import AsyncVcmClient, VcmClient
from vcm.integrations.agents import VcmSession

agents = pytest.importorskip("agents")
openai = pytest.importorskip("openai")
agents.set_tracing_disabled(True)  # the SDK would export traces to OpenAI


def fifo(client: VcmClient, agent_id: str) -> list[dict[str, Any]]:
    ctx = client.context(agent_id)
    return [m for m, layer in zip(ctx["messages"], ctx["layers"], strict=True) if layer == "fifo"]


def test_turn_two_sees_the_built_context_after_an_eviction(server: LiveServer, admin: VcmClient) -> None:
    token = admin.create_agent("ada", model="vcm-demo-4k", system_prompt="You keep Ada's notes.")["token"]
    llm = FakeLLM([calls(("lookup_colour", {"who": "ada"})), answer("Noted: teal."), answer("Teal.")])

    @agents.function_tool
    def lookup_colour(who: str) -> str:
        """The favourite colour of someone."""
        return f"{who}: teal"

    model = agents.OpenAIChatCompletionsModel(
        model="fake-model", openai_client=openai.AsyncOpenAI(base_url=llm.url, api_key="sk-test")
    )
    agent = agents.Agent(name="ada", instructions="Be brief.", model=model, tools=[lookup_colour])
    # Long enough that evicting it alone frees more than the placeholder that replaces it.
    plan = "I am planning a zebra safari in June. " + " ".join(f"Day {d}: game drive at dawn." for d in range(1, 9))
    try:
        with VcmClient(server.url, token, timeout=10) as client:
            session = VcmSession("ada", client)
            first = asyncio.run(agents.Runner.run(agent, plan, session=session))
            assert first.final_output == "Noted: teal."
            # The turn went in through vcm, the tool call and its result as such.
            held = fifo(client, "ada")
            assert [m["role"] for m in held] == ["user", "assistant", "tool", "assistant"]
            assert held[1]["tool_calls"][0]["function"]["name"] == "lookup_colour"
            assert held[2]["tool_call_id"] == held[1]["tool_calls"][0]["id"] and "teal" in held[2]["content"]

            evicted = client.evict("ada", 1)
            assert evicted["batch"]["message_ids"] == ["m1"]
            llm.clear()
            second = asyncio.run(agents.Runner.run(agent, "What did I say I was planning?", session=session))
            assert second.final_output == "Teal."
    finally:
        llm.close()

    sent = llm.requests[0]["messages"]
    text = [str(m.get("content") or "") for m in sent]
    # The SDK's instructions first, then vcm's built prompt: its system prompt, the identity
    # layer, the placeholder of the eviction; the evicted message is gone from what the model sees.
    assert sent[0] == {"role": "system", "content": "Be brief."}
    system = [t for m, t in zip(sent, text, strict=True) if m["role"] == "system"]
    assert "You keep Ada's notes." in system
    assert any(t.startswith("[vcm] Today is") for t in system)
    assert any("earlier messages moved to recall memory" in t for t in system)
    assert not any("zebra safari" in t for t in text)
    # What stayed in the FIFO comes back as the conversation, tool call and result included.
    roles = [m["role"] for m in sent if m["role"] != "system"]
    assert roles == ["assistant", "tool", "assistant", "user"]
    assert sent[-1] == {"role": "user", "content": "What did I say I was planning?"}
    assert any(m["role"] == "tool" and "ada: teal" in m["content"] for m in sent)


class LoseSecondReply(httpx.HTTPTransport):
    """Delivers every request, but loses the reply of the second append (the server has it)."""

    def __init__(self) -> None:
        super().__init__()
        self.appends = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/messages"):
            self.appends += 1
            if self.appends == 2:
                response.read()
                raise httpx.ReadError("reply lost", request=request)
        return response


ITEMS: list[Any] = [
    {"role": "user", "content": "What is six times seven?"},
    {"type": "function_call", "call_id": "call_9", "name": "multiply", "arguments": '{"a": 6, "b": 7}'},
    {"type": "function_call_output", "call_id": "call_9", "output": "42"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "It is 42.", "annotations": []}],
     "type": "message", "id": "__fake_id__", "status": "completed"},
]  # fmt: skip


def test_items_are_idempotent_pop_and_clear(server: LiveServer, admin: VcmClient) -> None:
    token = admin.create_agent("bo", model="vcm-demo-4k")["token"]
    lossy = LoseSecondReply()
    with VcmClient(server.url, token, timeout=10, transport=lossy) as client:
        session = VcmSession("bo", client)
        with pytest.raises(httpx.ReadError):
            asyncio.run(session.add_items(ITEMS))
        asyncio.run(session.add_items(ITEMS))  # the retry: what went in is replayed, not repeated
        assert [m["role"] for m in fifo(client, "bo")] == ["user", "assistant", "tool", "assistant"]
        # Tool calls and results are unique by their call id, whichever session object adds them.
        asyncio.run(VcmSession("bo", client).add_items(ITEMS[1:3]))
        assert len(fifo(client, "bo")) == 4
        # A later identical user message is a new message.
        asyncio.run(session.add_items(ITEMS[:1]))
        assert len(fifo(client, "bo")) == 5

        items = asyncio.run(session.get_items())
        assert items[-5:] == [
            {"role": "user", "content": "What is six times seven?"},
            ITEMS[1], ITEMS[2], {"role": "assistant", "content": "It is 42."},
            {"role": "user", "content": "What is six times seven?"},
        ]  # fmt: skip
        assert asyncio.run(session.get_items(limit=2)) == items[-2:]

        assert asyncio.run(session.pop_item()) == ITEMS[0]
        assert asyncio.run(session.pop_item()) == ITEMS[3]  # as the SDK gave it
        assert [m["role"] for m in fifo(client, "bo")] == ["user", "assistant", "tool"]
        # Another session object (another process) pops what it never appended.
        assert asyncio.run(VcmSession("bo", client).pop_item()) == ITEMS[2]
        assert len(fifo(client, "bo")) == 2

        asyncio.run(session.clear_session())
        assert fifo(client, "bo") == []
        assert all(i.get("role") == "system" for i in asyncio.run(session.get_items()))
        assert asyncio.run(session.pop_item()) is None
        # The conversation left the context, not memory: recall still finds it.
        assert client.search_recall("bo", "six times seven")["items"]


def test_async_client(server: LiveServer, admin: VcmClient) -> None:
    token = admin.create_agent("cy", model="vcm-demo-4k")["token"]

    async def run() -> list[Any]:
        async with AsyncVcmClient(server.url, token, timeout=10) as client:
            session = VcmSession("cy", client)
            assert isinstance(session, agents.memory.Session)  # the SDK's runtime-checkable protocol
            await session.add_items([{"role": "user", "content": "hello from async"}])
            return await session.get_items()

    assert run_items(asyncio.run(run())) == [{"role": "user", "content": "hello from async"}]


def run_items(items: list[Any]) -> list[Any]:
    return [i for i in items if i.get("role") != "system"]
