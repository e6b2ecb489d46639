"""Durable agent state: the store is the source of truth and the hot state a cache rebuilt from it.

Each test builds a MemoryService, loses its hot state (a fresh Redis client on an emptied
database: what a restart in embedded mode or a FLUSHALL does) and checks what a second service on
the same store sees. The real cold path commits evictions (``vcm.tasks.evict.evict_batch``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
from prometheus_client import REGISTRY

from tests.doubles.coldpath import line
from tests.doubles.embedder import word_embed
from tests.redis_legs import REDIS_URL
from vcm.dispatch import RecordingDispatcher
from vcm.errors import SnapshotCorrupt
from vcm.hotpath import keys
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.tasks.deps import Deps
from vcm.tasks.evict import evict_batch
from vcm.tasks.summary.recursive import extractive

MODEL = "vcm-demo-2k"


def settings(**over: Any) -> Settings:
    return load_settings(overrides={"durability": {"messages": "write_through", "id_reserve": 64}, **over}, environ={})


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def fresh_redis(request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from _clients(request.param)


@pytest.fixture
def fresh_fake() -> Iterator[Any]:
    """fakeredis only: for what the Redis flavour cannot change (store-side behaviour)."""
    yield from _clients("fakeredis")


def _clients(kind: str) -> Iterator[Any]:
    """A factory of Redis clients whose state is lost at each call (same db, emptied)."""
    made: list[redis.Redis] = []

    def make() -> redis.Redis:
        if kind == "fakeredis":
            client: redis.Redis = fakeredis.FakeRedis(decode_responses=True)
        else:
            try:
                client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
                client.ping()
            except redis.ConnectionError:
                pytest.skip("no Redis on 127.0.0.1:6379")
            client.flushdb()
        made.append(client)
        return client

    yield make
    for client in made:
        client.flushdb()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    s = open_store(f"sqlite:///{tmp_path / 'vcm.db'}", text_index_lag_ok=False)
    yield s
    s.close()


def service(client: redis.Redis, store: MemoryStore, cfg: Settings | None = None) -> MemoryService:
    return MemoryService(HotState(client, cfg or settings()), store, RecordingDispatcher())


def commit_pending(svc: MemoryService, agent: str) -> int:
    deps = Deps(
        settings=svc.settings,
        hot=svc.hot,
        store=svc.store,
        dispatcher=svc.dispatcher,
        embed=word_embed,
        summarizer=extractive,
    )
    done = 0
    # A finish may begin the next batch (its summary crossed the flush line): until none waits.
    while pending := svc.hot.pending_batches(agent):
        for batch in pending:
            assert evict_batch(deps, agent, batch).outcome in ("committed", "replayed")
            done += 1
    return done


def state_of(svc: MemoryService, agent: str) -> dict[str, Any]:
    gauges = svc.gauges(agent)  # through the façade: rebuilds a missing hot state
    snap = svc.hot.snapshot(agent)
    return {
        "gauges": gauges,
        "fifo": [m.as_json() | {"actor": None, "idempotency_key": None} for m in snap.fifo],
        "blocks": [b.as_json() for b in snap.blocks],
        "summary": (snap.summary_text, snap.summary_tokens),
        "system": (snap.system_prompt, snap.tools),
    }


def test_a_lost_hot_state_is_rebuilt_with_fifo_blocks_summary_and_fresh_ids(
    fresh_redis: Any, store: MemoryStore
) -> None:
    first = service(fresh_redis(), store)
    first.create_agent("alice", model=MODEL, system_prompt="Be brief.")
    first.put_block("alice", "persona", "Alice likes green tea.", pinned=True)
    acked = [first.append("alice", "user", line(i)).message_id for i in range(120)]
    assert commit_pending(first, "alice") > 0  # evictions happened and were committed
    acked += [first.append("alice", "user", line(i)).message_id for i in range(120, 130)]
    pending = first.hot.pending_batches("alice")
    before = state_of(first, "alice")
    used = set(acked) | {m for ids in first.hot.batch_message_ids("alice").values() for m in ids}

    second = service(fresh_redis(), store)  # the restart: an empty Redis, the same store
    assert second.agents() == ["alice"]
    after = state_of(second, "alice")
    assert after["blocks"] == before["blocks"] and after["summary"] == before["summary"]
    assert after["system"] == before["system"]
    if not pending:
        assert after["fifo"] == before["fifo"] and after["gauges"] == before["gauges"]
    # Every acknowledged message is in the context or in recall.
    in_context = {m["id"] for m in after["fifo"]}
    stored = {m.message_id for m in store.get_messages("alice", acked)}
    assert set(acked) <= in_context | stored
    # Ids go on above everything handed out before; new messages reach the store at once.
    new = second.append("alice", "user", "After the restart Alice asked about Porto.")
    assert new.message_id not in used and new.seq > max(int(m[1:]) for m in used)
    assert store.get_messages("alice", [new.message_id])[0].content.startswith("After the restart")


def test_a_batch_begun_but_not_committed_comes_back_into_the_fifo(fresh_redis: Any, store: MemoryStore) -> None:
    first = service(fresh_redis(), store)
    first.create_agent("bob", model=MODEL)
    for i in range(80):
        first.append("bob", "user", line(i))
    batches = first.hot.batch_message_ids("bob")
    assert batches, "the conversation must have begun an eviction"
    evicting = {m for ids in batches.values() for m in ids}
    second = service(fresh_redis(), store)
    g = second.gauges("bob")
    assert g.total <= g.max_tokens  # over the flush line again: the rebuild began a new batch
    rebuilt = second.hot.batch_message_ids("bob")
    assert rebuilt and min(rebuilt) > max(batches)  # under a batch id never used before
    held = set(second.fifo_ids("bob")) | {m for ids in rebuilt.values() for m in ids}
    assert evicting <= held  # never summarised, so back in the context, or on their way to recall
    assert ("bob", min(rebuilt)) in second.dispatcher.evictions  # type: ignore[attr-defined]
    assert commit_pending(second, "bob") == len(rebuilt)


def test_write_behind_loses_only_what_the_spool_had_not_reached(fresh_redis: Any, store: MemoryStore) -> None:
    cfg = load_settings(overrides={"durability": {"messages": "write_behind"}}, environ={})
    first = service(fresh_redis(), store, cfg)
    first.create_agent("carol", model=MODEL)
    spooled = first.append("carol", "user", "spooled before the loss").message_id
    from vcm.tasks.spool import spool_messages

    spool_messages(first.hot, store, "carol", [spooled])
    unspooled = first.append("carol", "user", "never spooled").message_id
    second = service(fresh_redis(), store, cfg)
    fifo = second.fifo_ids("carol")
    assert spooled in fifo and unspooled not in fifo  # the documented loss window
    # ...but its id is never handed out again.
    assert second.append("carol", "user", "next").message_id != unspooled


def test_rebuild_on_demand_when_redis_is_flushed_under_a_running_service(store: MemoryStore) -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    svc = service(client, store)
    svc.create_agent("dave", model=MODEL)
    svc.put_block("dave", "goals", "Finish the report.")
    m1 = svc.append("dave", "user", "first").message_id
    client.flushall()
    m2 = svc.append("dave", "user", "second")  # rebuilt from the store inside the call
    assert m2.message_id != m1 and svc.fifo_ids("dave") == [m1, m2.message_id]
    assert [b.id for b in svc.list_blocks("dave")] == ["goals"]


def test_snapshot_mutate_restore_returns_the_agent_exactly(fresh_redis: Any, store: MemoryStore) -> None:
    svc = service(fresh_redis(), store)
    svc.create_agent("erin", model=MODEL, system_prompt="Be kind.")
    svc.put_block("erin", "persona", "Erin likes tea.", pinned=True)
    for i in range(70):
        svc.append("erin", "user", line(i))
    commit_pending(svc, "erin")
    snap = svc.create_snapshot("erin", reason="before the experiment")
    before = state_of(svc, "erin")
    for i in range(70, 110):
        svc.append("erin", "user", line(i))
    commit_pending(svc, "erin")
    block = svc.get_block("erin", "persona")
    svc.put_block("erin", "persona", "Erin switched to coffee.", expected_rev=block.rev, pinned=True)
    svc.put_block("erin", "extra", "a new block")
    assert state_of(svc, "erin") != before
    seen = svc.changes("erin").next_after  # a follower, caught up

    out = svc.restore_snapshot("erin", snap.snapshot_id)
    # The follower is told what happened (the whole agent changed), not that it missed something.
    told = svc.changes("erin", after=seen)
    assert not told.gap and [(c.kind, c.op) for c in told.changes] == [("agent", "reset")]
    after = state_of(svc, "erin")
    for field in ("gauges", "fifo", "blocks", "summary", "system"):
        assert after[field] == before[field], field
    # The store agrees: a rebuild from it gives the same agent.
    assert state_of(service(fresh_redis(), store), "erin") == after
    # The state it replaced was kept.
    assert out["pre_restore_snapshot_id"] in {s.snapshot_id for s in svc.list_snapshots("erin")}
    # Old ids are not reused after the restore.
    fresh = svc.append("erin", "user", "after the restore")
    assert fresh.seq > 110


def test_a_corrupted_snapshot_is_refused_and_changes_nothing(
    tmp_path: Path, fresh_fake: Any, store: MemoryStore
) -> None:
    svc = service(fresh_fake(), store)
    svc.create_agent("fred", model=MODEL)
    for i in range(5):
        svc.append("fred", "user", line(i))
    snap = svc.create_snapshot("fred")
    svc.append("fred", "user", "after the snapshot")
    with sqlite3.connect(tmp_path / "vcm.db") as conn:
        payload = bytearray(
            conn.execute("SELECT payload FROM agent_snapshots WHERE snapshot_id = ?", (snap.snapshot_id,)).fetchone()[0]
        )
        payload[len(payload) // 2] ^= 0x01
        conn.execute("UPDATE agent_snapshots SET payload = ? WHERE snapshot_id = ?", (bytes(payload), snap.snapshot_id))
    before = state_of(svc, "fred")
    snapshots_before = [s.snapshot_id for s in svc.list_snapshots("fred")]
    with pytest.raises(SnapshotCorrupt):
        svc.restore_snapshot("fred", snap.snapshot_id)
    assert state_of(svc, "fred") == before
    assert [s.snapshot_id for s in svc.list_snapshots("fred")] == snapshots_before  # no pre_restore either


def test_deleting_an_agent_leaves_no_row_key_or_metric_label(fresh_redis: Any, store: MemoryStore) -> None:
    client = fresh_redis()
    svc = service(client, store)
    for agent in ("gina", "hank"):
        svc.create_agent(agent, model=MODEL)
        svc.put_block(agent, "persona", f"{agent} likes tea.")
        for i in range(70):
            svc.append(agent, "user", line(i))
        commit_pending(svc, agent)
        svc.write_recall(agent, "a note", idempotency_key=f"{agent}-note")
        svc.create_snapshot(agent)
    assert REGISTRY.get_sample_value("vcm_context_tokens", {"agent": "gina", "part": "fifo"}) is not None
    kept = store.stats("hank")

    removed = svc.delete_agent("gina")
    assert removed["messages"] > 0 and removed["redis_keys"] > 0
    assert {k: v for k, v in store.stats("gina").items() if isinstance(v, int) and v} == {}
    assert store.query_events("gina").items == [] and store.list_snapshots("gina") == []
    assert [k for k in client.scan_iter(match=keys.prefix("gina") + "*")] == []
    assert "gina" not in svc.agents() and "gina" not in client.smembers(keys.AGENTS)
    assert REGISTRY.get_sample_value("vcm_context_tokens", {"agent": "gina", "part": "fifo"}) is None
    assert store.stats("hank") == kept
    audit = store.query_events("*", ["agent_deleted"]).items
    assert audit and audit[-1].payload["agent_id"] == "gina"
    assert svc.delete_agent("gina") == {}  # idempotent
    # The deleted agent does not come back from the store on a restart.
    assert service(fresh_redis(), store).agents() == ["hank"]


def test_reset_keeps_blocks_and_sends_the_conversation_to_recall(fresh_fake: Any, store: MemoryStore) -> None:
    svc = service(fresh_fake(), store)
    svc.create_agent("ivy", model=MODEL)
    svc.put_block("ivy", "persona", "Ivy likes tea.")
    for i in range(60):
        svc.append("ivy", "user", line(i))
    commit_pending(svc, "ivy")
    out = svc.reset("ivy")
    assert out["messages_to_recall"] > 0
    assert svc.fifo_ids("ivy") == [] and svc.hot.summary("ivy")[0] == ""
    assert [b.id for b in svc.list_blocks("ivy")] == ["persona"]
    assert svc.search_recall("ivy", "Falcon", mode="text").page.items  # still searchable
    assert service(fresh_fake(), store).fifo_ids("ivy") == []  # and it stays reset


def test_forget_a_message_outside_the_context_and_one_inside(fresh_fake: Any, store: MemoryStore) -> None:
    svc = service(fresh_fake(), store)
    svc.create_agent("jack", model=MODEL)
    ids = [svc.append("jack", "user", line(i)).message_id for i in range(110)]
    commit_pending(svc, "jack")
    gone = next(m for m in ids if m not in svc.fifo_ids("jack"))
    removed = svc.forget_message("jack", gone)
    assert removed["messages"] == 1 and removed["edges"] >= 1  # its recall_log edge at least
    assert "fifo" not in removed
    assert store.get_messages("jack", [gone]) == []
    summary = store.get_summary("jack")
    assert summary is not None and "removed from memory" in summary.text
    # The FIFO did not change, in Redis or in the store.
    assert [m.message_id for m in svc.durable.uncommitted("jack")] == svc.fifo_ids("jack")
    # One still in the context leaves it, in Redis and in the store, with no note in the summary.
    in_context = svc.fifo_ids("jack")[-1]
    removed = svc.forget_message("jack", in_context)
    assert removed["fifo"] == 1 and removed["messages"] == 1
    assert in_context not in svc.fifo_ids("jack")
    assert [m.message_id for m in svc.durable.uncommitted("jack")] == svc.fifo_ids("jack")
    assert store.get_summary("jack") == summary


def test_periodic_snapshots_take_one_per_agent_and_are_scheduled_only_when_asked(store: MemoryStore) -> None:
    from vcm.workers import names
    from vcm.workers.beat import schedule

    svc = service(fakeredis.FakeRedis(decode_responses=True), store)
    for agent in ("kim", "lee"):
        svc.create_agent(agent, model=MODEL)
        svc.append(agent, "user", "hello")
    assert svc.snapshot_all() == 2
    assert [s.kind for s in svc.list_snapshots("kim")] == ["periodic"]
    assert all(e["task"] != names.SNAPSHOT for e in schedule(settings()).values())
    on = schedule(settings(durability={"messages": "write_through", "snapshot_interval_s": 3600.0}))
    assert on["snapshot-agents"] == {"task": names.SNAPSHOT, "schedule": 3600.0}
