"""Seed 000's function schema, as written: the schemas document each of its arguments and result
fields (a table of the seed's, so drift fails here), the executor runs the nine tools called with
exactly the seed's argument names, and a result is never refused for room it fits in."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.doubles.embedder import hash_embed
from tests.doubles.harness import Harness
from tests.tools.seed_api import SEED, check_seed_run, run_seed_calls
from vcm.hotpath.state import HotState
from vcm.mcp import catalog
from vcm.tools.schemas import RESULT_FIELDS, TOOL_NAMES, schema_of, tool_schemas

MODEL = "vcm-small-8k"
SMALL = "vcm-demo-2k"


@pytest.fixture
def h(hot: HotState, tmp_path: Any) -> Iterator[Harness]:
    harness = Harness(hot, str(tmp_path / "vcm.db"))
    harness.service.create_agent("a1", model=MODEL, system_prompt="You are a careful assistant.")
    yield harness
    harness.close()


# --- the schemas ---------------------------------------------------------------------------------------
def test_the_schemas_take_and_return_what_the_seed_says() -> None:
    assert set(SEED) <= set(TOOL_NAMES) and set(RESULT_FIELDS) == set(SEED)
    for name, (arguments, fields) in SEED.items():
        properties = schema_of(name)["properties"]
        assert set(arguments) <= set(properties), (name, set(arguments) - set(properties))
        assert set(fields) <= set(RESULT_FIELDS[name]), (name, set(fields) - set(RESULT_FIELDS[name]))
        # Only what neither the seed nor a documented default can do without is required.
        required = set(schema_of(name)["required"]) - {"request_heartbeat"}
        assert required <= set(arguments), (name, required - set(arguments))
        description = next(t["function"]["description"] for t in tool_schemas() if t["function"]["name"] == name)
        assert all(f in description for f in fields), (name, description)  # the model reads what it gets


def test_every_argument_of_every_tool_is_documented_in_both_formats() -> None:
    served = {t.name: t.input_schema for t in catalog.mcp_tools()}
    for tool in tool_schemas():
        name, properties = tool["function"]["name"], tool["function"]["parameters"]["properties"]
        undocumented = [k for k, v in properties.items() if not str(v.get("description", "")).strip()]
        assert not undocumented, (name, undocumented)
        assert served[name]["properties"] == properties  # MCP serves the same documentation


# --- the executor --------------------------------------------------------------------------------------
def test_the_executor_runs_the_seed_calls(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    probes: list[int | None] = []
    search = h.service.store.search_archival

    def spy(*args: Any, **kwargs: Any) -> Any:
        probes.append(kwargs.get("n_probe"))
        return search(*args, **kwargs)

    monkeypatch.setattr(h.service.store, "search_archival", spy)
    asked = REGISTRY.get_sample_value("vcm_archival_search_nprobe_sum") or 0.0

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = h.executor.execute("a1", name, args)  # no request_heartbeat: the seed has none
        assert json.loads(result.message["content"]) == result.payload
        return result.payload

    out = asyncio.run(run_seed_calls(call, hash_embed))
    check_seed_run(out)
    assert probes and set(probes) == {4}  # nProbe reached the vector index's search
    assert REGISTRY.get_sample_value("vcm_archival_search_nprobe_sum") == asked + 4 * len(probes)
    evicted = out["evict"]
    assert h.dispatcher.evictions[-1] == ("a1", evicted["batch_id"])
    first = h.hot.batch_message_ids("a1")[evicted["batch_id"]][0]
    assert h.hot.summary_skipped("a1", evicted["batch_id"], first)  # the cold path leaves the summary be
    assert evicted["after_occupancy"] == round(evicted["after_tokens"] / 8192, 4)
    # write_recall's entries are one write under one key: a retry is the same notes, nothing new.
    again = h.executor.execute(
        "a1",
        "write_recall",
        {
            "entries": [
                {"content": "Porto harbour timetable changes in winter.", "role": "user"},
                {"content": "The ferry office opens at eight."},
            ],
            "idempotency_key": "w1",
        },
    )
    assert again.payload["inserted_ids"] == out["recall"]["inserted_ids"]
    other = h.executor.execute("a1", "write_recall", {"entries": [{"content": "x"}], "idempotency_key": "w1"})
    assert other.error is not None and other.error["code"] == "IDEMPOTENCY_MISMATCH"


def test_precomputed_chunks_must_match_the_stores_space(h: Harness) -> None:
    vectors = [[float(x) for x in row] for row in hash_embed(["one chunk", "two chunk"])]
    base = {
        "doc_id": "d",
        "chunks": ["one chunk", "two chunk"],
        "embeddings": vectors,
        "dimension": len(vectors[0]),
        "metric": "cosine",
        "embedding_version": "m1:late:v1",
        "model_id": "m1",
        "idempotency_key": "k0",
    }
    before = h.store.stats("a1")
    short = h.executor.execute(
        "a1",
        "ingest_archival",
        base | {"embeddings": [v[:8] for v in vectors], "dimension": 8, "idempotency_key": "k1"},
    )
    assert short.error is not None and short.error["code"] == "VALIDATION_ERROR" and short.error["field"] == "dimension"
    assert (short.error["given"], short.error["store"]) == (8, len(vectors[0]))  # both named
    naive = h.executor.execute(
        "a1", "ingest_archival", base | {"embedding_version": "m1:naive:v1", "idempotency_key": "k2"}
    )
    assert naive.error is not None and naive.error["code"] == "POLICY_REFUSED"
    assert h.store.stats("a1")["archival_chunks"] == before["archival_chunks"]
    assert h.executor.execute("a1", "ingest_archival", base).payload["inserted"] == 2
    other = h.executor.execute(
        "a1",
        "ingest_archival",
        base | {"doc_id": "e", "model_id": "m2", "embedding_version": "m2:late:v1", "idempotency_key": "k3"},
    )
    assert other.error is not None and other.error["field"] == "model_id" and other.error["store"] == "m1"
    wrong = h.executor.execute("a1", "search_archival", {"query_vector": [0.5, 0.5], "limit": 1})
    assert wrong.error is not None and wrong.error["field"] == "dimension" and wrong.error["given"] == 2
    bound = h.service.settings.ingest.max_n_probe
    refused = h.executor.execute("a1", "search_archival", {"query_vector": vectors[0], "nProbe": bound + 1})
    assert refused.error is not None and refused.error["field"] == "nProbe"


# --- room ----------------------------------------------------------------------------------------------
def test_fetch_core_serves_a_block_that_fits_the_free_room_at_the_boundary(h: Harness) -> None:
    """The free room is moved a token at a time across the size of one fetch_core result: while
    the whole result fits what is free (exactly, at the boundary) it is served, never refused for
    room; one token short, it is spooled into recall with a preview (seed 000)."""
    h.service.create_agent("s", model=SMALL)
    doc = "Paris is the capital of France and its largest city. " * 30
    assert h.executor.execute("s", "store_core", {"block_id": "doc", "content": doc, "idempotency_key": "d"}).ok
    whole = h.executor.execute("s", "fetch_core", {"block_id": "doc"})
    size = whole.tokens  # the whole result (its gauges change by a digit at most below)
    # Messages take the room down to a little above the result (a block may not fill that far),
    # then a block grown a word (a token) at a time moves it across.
    counter = h.hot.counter(SMALL)
    i = 0
    while (gap := h.hot.gauges("s").free - size - 40) > 0:
        words = min(gap, 150)
        text = " ".join([f"talk{i}"] * words)
        while counter.message(text) > words and " " in text:
            text = text.rsplit(" ", 1)[0]
        h.service.append("s", "user", text)
        i += 1
    rev: str | None = None
    samples: list[tuple[int, Any]] = []
    for words in range(1, 80):
        rev = h.service.put_block(
            "s", "fill", " ".join(["lorem"] * words), expected_rev=rev, idempotency_key=f"f{words}"
        ).rev
        free = h.hot.gauges("s").free
        samples.append((free, h.executor.execute("s", "fetch_core", {"block_id": "doc"})))
    frees = [f for f, _ in samples]
    assert frees == sorted(frees, reverse=True) and len(set(frees)) == len(frees)  # a token at a time
    served = [(f, r) for f, r in samples if "spooled" not in r.payload]
    spooled = [(f, r) for f, r in samples if "spooled" in r.payload]
    assert served and spooled
    for free, result in served:  # fits: served whole, within the room
        assert result.ok and result.payload["content"] == doc and result.tokens <= free
        assert "stopped" not in result.payload
    assert any(result.tokens == free for free, result in served)  # one fits exactly: still served
    for free, result in spooled:  # one token more than is free: spooled, the stub within the room
        assert result.tokens <= free < min(r.tokens for _, r in served)
        held = h.store.get_messages("s", result.payload["message_ids"])
        assert json.loads("".join(m.content for m in held))["content"] == doc
