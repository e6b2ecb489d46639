"""The routes of client instances (vcm.api.sync) through the app, on fakeredis, the real Redis and
the Redis Cluster: every write of blocks, state and facts reaches the agent's change feed (and no
content does), the stream resumes from Last-Event-ID, conflicts become audit rows, instances'
status is kept and listed; and the async client's cache reads and writes through."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, LiveServer, new_agent
from vcm import AsyncVcmClient, CacheConfig, RevConflict


def _changes(client: TestClient, after: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    r = client.get("/v1/agents/alice/changes", params={"after": after, "limit": 100}, headers=headers)
    assert r.status_code == 200, r.text
    return list(r.json()["changes"])


def test_every_write_of_blocks_state_and_facts_is_a_change_and_none_carries_content(client: TestClient) -> None:
    me = new_agent(client, "alice")
    head = client.get("/v1/agents/alice/changes", headers=me).json()
    assert head["changes"] == [] and head["next_after"] == head["head"] and head["gap"] is False
    block = client.put("/v1/agents/alice/blocks/persona", json={"content": "SECRET-BLOCK"}, headers=me).json()
    client.put("/v1/agents/alice/blocks/persona", json={"content": "SECRET-2", "_rev": block["_rev"]}, headers=me)
    state = client.put("/v1/agents/alice/state/city", json={"value": "SECRET-STATE"}, headers=me).json()
    fact = client.post("/v1/agents/alice/facts", json={"value": "SECRET-FACT", "type": "sticky"}, headers=me).json()
    client.delete(f"/v1/agents/alice/facts/{fact['fact']['fact_id']}", headers=me)
    client.delete("/v1/agents/alice/state/city", headers=me)
    client.delete("/v1/agents/alice/state", headers=me)  # nothing left: no change
    client.put("/v1/agents/alice/state/x", json={"value": 1}, headers=me)
    client.delete("/v1/agents/alice/state", headers=me)

    got = _changes(client, head["next_after"], me)
    fact_id = fact["fact"]["fact_id"]
    assert [(c["kind"], c["key"], c["version"], c["op"]) for c in got] == [
        ("block", "persona", block["_rev"], "put"),
        ("block", "persona", str(int(block["_rev"]) + 1), "put"),
        ("state", "city", state["_rev"], "put"),
        ("fact", fact_id, "1", "put"),
        ("fact", fact_id, None, "delete"),
        ("state", "city", None, "delete"),
        ("state", "x", got[6]["version"], "put"),
        ("state", "*", None, "clear"),
    ]
    assert "SECRET" not in json.dumps(got)
    ids = [c["id"] for c in got]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-")))) and all(c["at"] > 0 for c in got)
    # A restore rebuilds the agent's hot state but keeps its feed: readers are told, without a
    # gap, that everything may have changed.
    snap = client.post("/v1/agents/alice/snapshots", json={}, headers=me).json()
    client.post(f"/v1/agents/alice/snapshots/{snap['snapshot_id']}/restore", headers=me)
    after = client.get("/v1/agents/alice/changes", params={"after": ids[-1]}, headers=me).json()
    assert after["gap"] is False and [(c["kind"], c["op"]) for c in after["changes"]] == [("agent", "reset")]
    # Another agent's token reads it as missing; a bad position is refused.
    bob = new_agent(client, "bob")
    assert client.get("/v1/agents/alice/changes", headers=bob).status_code == 404
    assert client.get("/v1/agents/alice/changes", params={"after": "$"}, headers=me).status_code == 422


def _frames(lines: Iterator[str], count: int) -> list[tuple[str | None, str, Any]]:
    """(id, event, data) of the next ``count`` frames of a stream's lines."""
    out: list[tuple[str | None, str, Any]] = []
    frame_id, event, data = None, "message", ""
    for line in lines:
        if line.startswith("id: "):
            frame_id = line[4:]
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line == "" and data:
            out.append((frame_id, event, json.loads(data)))
            event, data = "message", ""
            if len(out) == count:
                break
    return out


@pytest.mark.parametrize("redis_client", ["fakeredis", "redis"], indirect=True)
def test_the_change_stream_sends_each_change_with_its_id_and_resumes_from_last_event_id(
    client: TestClient, live: LiveServer
) -> None:
    me = new_agent(client, "alice")
    start = client.get("/v1/agents/alice/changes", headers=me).json()["next_after"]
    client.put("/v1/agents/alice/state/a", json={"value": 1}, headers=me)
    with httpx.Client(base_url=live.url, timeout=10) as http:
        with http.stream("GET", "/v1/agents/alice/changes/stream", params={"after": start}, headers=me) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            (ready_id, ready, info), (change_id, kind, change) = _frames(r.iter_lines(), 2)
            assert (ready, ready_id, info["after"]) == ("ready", start, start)
            assert kind == "change" and change_id == change["id"] and change["key"] == "a"
        client.put("/v1/agents/alice/state/b", json={"value": 2}, headers=me)  # while disconnected
        resume = {**me, "Last-Event-ID": change_id}  # wins over the after= the URL still has
        with http.stream("GET", "/v1/agents/alice/changes/stream", params={"after": start}, headers=resume) as r:
            lines = r.iter_lines()
            frames = _frames(lines, 2)
            assert [(e, d.get("key")) for _, e, d in frames] == [("ready", None), ("change", "b")]
            client.put("/v1/agents/alice/state/c", json={"value": 3}, headers=me)  # while connected
            assert [d["key"] for _, e, d in _frames(lines, 1)] == ["c"]
        bad = http.get("/v1/agents/alice/changes/stream", headers={**me, "Last-Event-ID": "nope"})
        assert bad.status_code == 422
        assert http.get("/v1/agents/alice/changes/stream", headers=new_agent(client, "bob")).status_code == 404


CONFLICT = {
    "conflict_id": "c1", "instance_id": "laptop-1", "kind": "state", "key": "city", "strategy": "last_write_wins",
    "resolution": "local_won", "local": {"base_version": "3", "edited_at": 100.5},
    "remote": {"version": "4", "updated_at": 101.0}, "losing_value": {"name": "Porto"},
}  # fmt: skip


# The board's and feed's Redis commands run on every leg in tests/hotpath/test_change_feed.py.
@pytest.mark.parametrize("redis_client", ["fakeredis"], indirect=True)
def test_conflicts_are_audit_rows_once_and_instances_status_is_kept_and_listed(client: TestClient) -> None:
    me = new_agent(client, "alice")
    for _ in range(2):  # a retried report is one row
        r = client.post("/v1/agents/alice/conflicts", json=CONFLICT, headers=me)
        assert r.status_code == 200 and r.json() == {"event_id": "alice:sync_conflict:c1"}
    (row,) = client.get("/v1/agents/alice/events", params={"kinds": "sync_conflict"}, headers=me).json()["items"]
    assert row["actor"] == "api:agent:alice" and row["payload"]["losing_value"] == {"name": "Porto"}
    assert row["payload"]["local"] == {"base_version": "3", "edited_at": 100.5, "deleted": False}
    assert row["payload"]["remote"] == {"version": "4", "updated_at": 101.0, "deleted": False}
    for bad in ({**CONFLICT, "strategy": "coin_toss"}, {**CONFLICT, "kind": "message"}, {**CONFLICT, "local": 1}):
        assert client.post("/v1/agents/alice/conflicts", json=bad, headers=me).status_code == 422

    report = {"status": "synced", "sync_version": "5-0", "syncs": 4, "conflicts": 1, "sync_interval_s": 30.0,
              "cache": {"entries": 3, "hits": 9, "misses": 3}, "last_sync_latency_s": 0.02}  # fmt: skip
    r = client.put("/v1/agents/alice/instances/laptop-1", json=report, headers=me)
    assert r.status_code == 200 and r.json()["stale"] is False and r.json()["cache"]["hits"] == 9
    client.put("/v1/agents/alice/instances/phone", json={"status": "error", "consecutive_failures": 3}, headers=me)
    listed = client.get("/v1/agents/alice/instances", headers=me).json()["instances"]
    assert [(i["instance_id"], i["status"], i["syncs"]) for i in listed] == [
        ("laptop-1", "synced", 4),
        ("phone", "error", 0),
    ]
    assert client.put("/v1/agents/alice/instances/x", json={"status": "asleep"}, headers=me).status_code == 422
    assert client.put("/v1/agents/alice/instances/bad%20id", json={"status": "synced"}, headers=me).status_code == 422
    assert client.get("/v1/agents/alice/instances", headers=new_agent(client, "bob")).status_code == 404

    exposition = client.get("/metrics", headers=ADMIN).text
    assert 'vcm_sync_instances{status="error"} 1.0' in exposition
    assert 'vcm_sync_consecutive_failures{agent="alice"} 3.0' in exposition
    assert "vcm_syncs_total" in exposition and "vcm_sync_conflicts_total" in exposition


@pytest.mark.parametrize("redis_client", ["fakeredis"], indirect=True)
def test_the_async_client_reads_and_writes_through_its_cache(app: FastAPI, client: TestClient) -> None:
    me = new_agent(client, "alice")
    token = me["Authorization"].removeprefix("Bearer ")

    async def run() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with AsyncVcmClient("http://vcm", token, transport=transport, cache=CacheConfig()) as vcm:
            written = await vcm.set_state("alice", "k", {"n": 1})
            assert (await vcm.state("alice", "k"))["value"] == {"n": 1}  # served from the cache
            client.put("/v1/agents/alice/state/k", json={"value": {"n": 2}}, headers=me)  # elsewhere
            with pytest.raises(RevConflict):  # based on the version it saw: a conflict (reject)
                await vcm.set_state("alice", "k", {"n": 3})
            assert (await vcm.state("alice", "k"))["value"] == {"n": 2}  # the remote version, now known
            await vcm.put_block("alice", "notes", "first")
            assert (await vcm.block("alice", "notes"))["content"] == "first"
            await vcm.put_block("alice", "notes", "second")  # based on the version it knows
            assert (await vcm.sync())["rejected"] == []
            return {"written": written, "metrics": vcm.sync_metrics()}

    out = asyncio.run(run())
    assert out["written"]["_rev"]
    cache = out["metrics"]["cache"]
    assert cache["hits"] >= 1 and cache["misses"] >= 1 and out["metrics"]["conflicts"] == 1
    assert client.get("/v1/agents/alice/blocks/notes", headers=me).json()["content"] == "second"
    (event,) = client.get("/v1/events", params={"kinds": "sync_conflict"}, headers=ADMIN).json()["items"]
    assert event["payload"]["resolution"] == "rejected"
