"""Seed 000's API section as a table, and one run of its nine tools called with exactly its
argument names, shared by the executor, HTTP route and MCP tests (tests/tools/test_seed_api.py,
tests/api/test_seed_api_transports.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

# tool -> (arguments, result fields), as seed 000 writes them (`?` and defaults dropped).
SEED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "store_core": (("block_id", "content", "policy", "idempotency_key"), ("block_id", "_rev", "token_estimate")),
    "fetch_core": (("block_id",), ("block_id", "content", "_rev", "token_estimate")),
    "append_fifo": (("message", "role", "idempotency_key"), ("message_id", "token_estimate")),
    "evict_fifo": (
        ("strategy", "target_tokens", "summarize", "idempotency_key"),
        ("evicted_count", "new_summary_tokens", "after_occupancy"),
    ),
    "write_recall": (("entries", "idempotency_key"), ("inserted_ids", "total_tokens")),
    "search_recall": (("query", "limit", "mode", "heartbeat"), ("results", "tokens_added")),
    "search_archival": (
        ("query_vector", "limit", "page_token", "heartbeat", "nProbe"),
        ("results", "next_page_token", "tokens_added"),
    ),
    "ingest_archival": (
        ("doc_id", "chunks", "embeddings", "dimension", "metric", "embedding_version", "model_id", "idempotency_key"),
        ("inserted", "vector_index_used"),
    ),
    "record_heartbeat": (("state",), ("chain_depth", "duration_ms")),  # terminated_reason once a chain ends
}

Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
Embed = Callable[[Sequence[str]], Any]

CHUNKS = ["Paris is the capital of France.", "Zebras graze in Kenya.", "The ferry to Porto leaves at six."]


def seed_fields(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The seed's result fields of one payload; fails naming the tool when one is missing."""
    missing = [f for f in SEED[name][1] if f not in payload]
    assert not missing, (name, missing, payload)
    return {f: payload[f] for f in SEED[name][1]}


async def run_seed_calls(call: Call, embed: Embed) -> dict[str, Any]:
    """Each of the nine tools with exactly the seed's argument names (every call is checked
    against the table first), through ``call``; returns the payloads by step."""
    out: dict[str, Any] = {}

    async def seed(name: str, args: dict[str, Any]) -> dict[str, Any]:
        assert set(args) <= set(SEED[name][0]), (name, sorted(set(args) - set(SEED[name][0])))
        payload = await call(name, args)
        assert "error" not in payload, (name, payload)
        seed_fields(name, payload)
        return payload

    out["store"] = await seed(
        "store_core",
        {"block_id": "persona", "content": "Likes green tea.", "policy": "pinned", "idempotency_key": "s1"},
    )
    out["fetch"] = await seed("fetch_core", {"block_id": "persona"})
    out["appends"] = [
        await seed(
            "append_fifo",
            {"message": f"Turn {i}: the ferry to Porto runs late again.", "role": role, "idempotency_key": f"a{i}"},
        )
        for i, role in enumerate(["user", "assistant"] * 3)
    ]
    out["recall"] = await seed(
        "write_recall",
        {
            "entries": [
                {"content": "Porto harbour timetable changes in winter.", "role": "user"},
                {"content": "The ferry office opens at eight."},
            ],
            "idempotency_key": "w1",
        },
    )
    out["search"] = await seed("search_recall", {"query": "ferry", "limit": 5, "mode": "text", "heartbeat": False})
    vectors = [[float(x) for x in row] for row in embed(CHUNKS)]
    out["ingest"] = await seed(
        "ingest_archival",
        {
            "doc_id": "atlas",
            "chunks": CHUNKS,
            "embeddings": vectors,
            "dimension": len(vectors[0]),
            "metric": "cosine",
            "embedding_version": "seed-test-model:late:v1",
            "model_id": "seed-test-model",
            "idempotency_key": "i1",
        },
    )
    query = [float(x) for x in embed(["Zebras graze in Kenya."])[0]]
    first = await seed("search_archival", {"query_vector": query, "limit": 1, "heartbeat": False, "nProbe": 4})
    second = await seed(
        "search_archival", {"query_vector": query, "limit": 1, "page_token": first["next_page_token"], "nProbe": 4}
    )
    out["archival"] = [first, second]
    total = out["search"]["context_total"]
    out["evict"] = await seed(
        "evict_fifo",
        {"strategy": "fifo", "target_tokens": total - 30, "summarize": False, "idempotency_key": "e1"},
    )
    out["target"] = total - 30
    out["heartbeat"] = await seed("record_heartbeat", {"state": "done with the seed's tools"})
    return out


def check_seed_run(out: dict[str, Any]) -> None:
    """What the payloads of :func:`run_seed_calls` must say, whichever transport carried them."""
    stored, fetched = out["store"], out["fetch"]
    assert fetched["_rev"] == stored["_rev"] and fetched["content"] == "Likes green tea."
    assert fetched["token_estimate"] == stored["token_estimate"] > 0 and fetched["pinned"] is True
    assert all(a["token_estimate"] > 0 for a in out["appends"])
    assert len(out["recall"]["inserted_ids"]) == 2 and out["recall"]["total_tokens"] > 0
    hits = out["search"]["results"]
    assert hits and any(h["id"] in out["recall"]["inserted_ids"] for h in hits)
    assert out["search"]["tokens_added"] > 0
    assert out["ingest"]["inserted"] == 3 and out["ingest"]["vector_index_used"] is False
    first, second = out["archival"]
    assert first["results"][0]["text"] == "Zebras graze in Kenya." and first["next_page_token"]
    assert second["results"] and second["results"][0]["text"] != first["results"][0]["text"]
    evicted = out["evict"]
    assert evicted["evicted_count"] >= 1 and evicted["new_summary_tokens"] == 0  # summarize=false
    assert evicted["after_tokens"] <= out["target"] and 0 < evicted["after_occupancy"] < 1  # of the window
    assert out["heartbeat"]["chain_depth"] == 0 and out["heartbeat"]["duration_ms"] >= 0
