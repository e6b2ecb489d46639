"""The LangGraph store (vcm.integrations.langgraph) with the real ``langgraph`` package: a graph
that writes and searches memory through the store, as LangGraph's memory examples do, and the
store's operations, against a live vcm server over real HTTP."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tests.api.conftest import LiveServer
from vcm.client import AsyncVcmClient, VcmClient
from vcm.integrations.langgraph import VcmStore

graph_module = pytest.importorskip("langgraph.graph")
messages = pytest.importorskip("langchain_core.messages")
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.graph import MessagesState  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402


def memory_graph(store: BaseStore) -> Any:
    """LangGraph's cross-thread memory example, with a node in place of the model: it searches
    the user's memories for the last message and stores what it is told to remember."""

    def call_model(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        namespace = ("memories", str(config["configurable"]["user_id"]))
        last = str(state["messages"][-1].content)
        memories = store.search(namespace, query=last)
        if "remember" in last.lower():
            store.put(namespace, str(uuid.uuid4()), {"data": last.split(":", 1)[1].strip()})
        known = "; ".join(m.value["data"] for m in memories)
        return {"messages": [messages.AIMessage(content=f"I know: {known}")]}

    builder = graph_module.StateGraph(graph_module.MessagesState)
    builder.add_node("call_model", call_model)
    builder.add_edge(graph_module.START, "call_model")
    return builder.compile(store=store)


def test_a_graph_writes_and_searches_memory(server: LiveServer, admin: VcmClient) -> None:
    token = admin.create_agent("lg", model="vcm-demo-4k")["token"]
    with VcmClient(server.url, token, timeout=10) as client:
        graph = memory_graph(VcmStore("lg", client))
        bob = {"configurable": {"thread_id": "1", "user_id": "bob"}}
        graph.invoke({"messages": [messages.HumanMessage("Hi! Remember: my name is Bob")]}, bob)
        graph.invoke({"messages": [messages.HumanMessage("Remember: I work as a lighthouse keeper")]}, bob)
        ann = {"configurable": {"thread_id": "2", "user_id": "ann"}}
        graph.invoke({"messages": [messages.HumanMessage("Remember: my name is Ann")]}, ann)

        # Another thread of Bob's finds his memory, by vcm's fact search; Ann's stays hers.
        out = graph.invoke(
            {"messages": [messages.HumanMessage("what is my name?")]},
            {"configurable": {"thread_id": "3", "user_id": "bob"}},
        )
        reply = out["messages"][-1].content
        assert "my name is Bob" in reply and "Ann" not in reply
        # The memories are vcm's: facts of the agent, tagged, and state keys.
        facts = client.facts("lg", tag=["langgraph"], status=["active", "shadow"])["facts"]
        assert sorted(f["value"] for f in facts) == [
            "I work as a lighthouse keeper",
            "my name is Ann",
            "my name is Bob",
        ]
        assert len([e for e in client.state("lg")["state"] if e["key"].startswith("lg:")]) == 3


def test_store_operations(server: LiveServer, admin: VcmClient) -> None:
    token = admin.create_agent("ops", model="vcm-demo-4k")["token"]
    with VcmClient(server.url, token, timeout=10) as client:
        store = VcmStore("ops", client)
        store.put(("docs", "u1"), "a", {"text": "The quarterly report is due in March", "rank": 3})
        store.put(("docs", "u1"), "b", {"text": "Lunch with the zebra keeper", "rank": 1}, index=["text"])
        store.put(("docs", "u2"), "c", {"text": "Quarterly taxes", "rank": 5})
        store.put(("cache", "v1"), "d", {"blob": "not searchable"}, index=False)

        got = store.get(("docs", "u1"), "a")
        assert got is not None and got.value == {"text": "The quarterly report is due in March", "rank": 3}
        assert got.namespace == ("docs", "u1") and got.key == "a"
        assert store.get(("docs", "u1"), "zzz") is None

        hits = store.search(("docs",), query="quarterly report")
        assert [h.key for h in hits][:2] == ["a", "c"] and all(h.score is not None for h in hits)
        assert hits[0].score is not None and hits[1].score is not None and hits[0].score >= hits[1].score
        assert [h.key for h in store.search(("docs", "u1"), query="quarterly")] == ["a"]
        assert store.search(("cache",), query="searchable") == []  # index=False: no fact
        assert {h.key for h in store.search(("docs",), filter={"rank": {"$gte": 3}})} == {"a", "c"}
        assert [h.key for h in store.search(("docs",), filter={"rank": 1})] == ["b"]
        listed = store.search(())
        assert {h.key for h in listed} == {"a", "b", "c", "d"} and all(h.score is None for h in listed)
        assert len(store.search((), limit=2, offset=3)) == 1

        assert store.list_namespaces() == [("cache", "v1"), ("docs", "u1"), ("docs", "u2")]
        assert store.list_namespaces(prefix=("docs",)) == [("docs", "u1"), ("docs", "u2")]
        assert store.list_namespaces(suffix=("v1",)) == [("cache", "v1")]
        assert store.list_namespaces(prefix=("docs", "*"), max_depth=1) == [("docs",)]

        # An update keeps the creation time and re-indexes: the old text is no longer found.
        store.put(("docs", "u1"), "a", {"text": "The report moved to April", "rank": 3})
        again = store.get(("docs", "u1"), "a")
        assert again is not None and again.created_at == got.created_at and again.updated_at > got.updated_at
        values = [f["value"] for f in client.facts("ops", tag=["langgraph"], status=["active", "shadow"])["facts"]]
        assert "The report moved to April" in values and "The quarterly report is due in March" not in values
        assert [h.key for h in store.search(("docs",), query="April")][:1] == ["a"]

        store.delete(("docs", "u1"), "a")
        assert store.get(("docs", "u1"), "a") is None
        assert "a" not in [h.key for h in store.search(("docs",), query="April")]
        facts = client.facts("ops", tag=["langgraph"], status=["active", "shadow"])["facts"]
        assert sorted(f["value"] for f in facts) == ["Lunch with the zebra keeper", "Quarterly taxes"]

        # ttl in minutes: the state key expires that long after the write.
        store.put(("tmp",), "t", {"text": "short lived"}, ttl=1.0)
        entry = client.state("ops", next(e["key"] for e in client.state("ops")["state"] if "short" in str(e)))
        assert entry["expires_at"] is not None and 59 <= entry["expires_at"] - entry["updated_at"] <= 61


def test_async_forms(server: LiveServer, admin: VcmClient) -> None:
    token = admin.create_agent("as", model="vcm-demo-4k")["token"]

    async def run(client: VcmClient | AsyncVcmClient) -> list[str]:
        store = VcmStore("as", client)
        await store.aput(("notes",), "k1", {"text": "Buy oat milk"})
        assert (await store.aget(("notes",), "k1")) is not None
        hits = await store.asearch(("notes",), query="oat milk")
        await store.adelete(("notes",), "k1")
        assert await store.aget(("notes",), "k1") is None
        return [h.key for h in hits] + [str(n) for n in await store.alist_namespaces()]

    async def with_async_client() -> list[str]:
        async with AsyncVcmClient(server.url, token, timeout=10) as client:
            return await run(client)

    assert asyncio.run(with_async_client()) == ["k1"]
    with VcmClient(server.url, token, timeout=10) as client:
        assert asyncio.run(run(client)) == ["k1"]  # a sync client's calls in a worker thread
        with pytest.raises(TypeError, match="synchronous"):
            VcmStore("as", AsyncVcmClient(server.url, token)).get(("notes",), "k1")
