"""Idempotency records outlive the hot state: the store keeps them, Redis caches them.

A keyed write is acknowledged, the hot state is lost (a fresh Redis on an emptied database: an
embedded restart, or FLUSHDB under a running production server), and the retry must replay the
first result and change nothing: appends (write-through and write-behind), claims (facts, tool
calls, reset), block edits and requested evictions. The real-Redis legs use
``VCM_TEST_REDIS_URL`` (the suite's db, flushed by each test).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

from tests.redis_legs import REDIS_URL, real_redis
from vcm.dispatch import RecordingDispatcher
from vcm.errors import IdempotencyMismatch
from vcm.hotpath import keys
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.store.types import IdempotencyRecord
from vcm.tasks.spool import spool_messages

MODEL = "vcm-demo-2k"


def settings(mode: str = "write_through", **over: Any) -> Settings:
    # Write-behind's bounds off: these tests decide themselves what is spooled when (the bounds'
    # own tests are tests/service/test_writebehind.py).
    durability = {"messages": mode, "id_reserve": 64, "write_behind_max_s": 0, "write_behind_max_messages": 0}
    return load_settings(overrides={"durability": durability, **over}, environ={})


def service(client: redis.Redis, store: MemoryStore, cfg: Settings | None = None) -> MemoryService:
    return MemoryService(HotState(client, cfg or settings()), store, RecordingDispatcher())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    s = open_store(f"sqlite:///{tmp_path / 'vcm.db'}", text_index_lag_ok=False)
    yield s
    s.close()


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    made: redis.Redis = fakeredis.FakeRedis(decode_responses=True) if request.param == "fakeredis" else real_redis()
    made.flushdb()
    yield made
    made.flushdb()


def stored_contents(store: MemoryStore, agent: str) -> list[str]:
    return [m.content for m in store.list_messages(agent, limit=1000)]


def test_a_keyed_append_replays_after_the_hot_state_is_lost(client: redis.Redis, store: MemoryStore) -> None:
    svc = service(client, store)
    svc.create_agent("alice", model=MODEL)
    first = svc.append("alice", "user", "Alice booked the trip to Porto.", idempotency_key="k1")
    svc.append("alice", "user", "an unkeyed one")
    client.flushdb()  # the restart (embedded) or FLUSHDB (production): the store is all that is left
    again = service(client, store).append("alice", "user", "Alice booked the trip to Porto.", idempotency_key="k1")
    assert again.replayed and (again.message_id, again.seq) == (first.message_id, first.seq)
    assert stored_contents(store, "alice").count("Alice booked the trip to Porto.") == 1
    assert svc.fifo_ids("alice").count(first.message_id) == 1 and len(svc.fifo_ids("alice")) == 2
    # The key still means that request: another one under it is refused, after the loss too.
    with pytest.raises(IdempotencyMismatch):
        svc.append("alice", "user", "something else", idempotency_key="k1")


def test_an_imported_message_replays_after_the_loss_whatever_its_age(client: redis.Redis, store: MemoryStore) -> None:
    """A message dated years back (``created_at``) keeps its idempotency record for the TTL from
    when vcm took it: a retry after Redis is lost is still a replay, not a second copy."""
    svc = service(client, store)
    svc.create_agent("alice", model=MODEL)
    said = time.time() - 3 * 365 * 86400
    first = svc.append("alice", "user", "Said three years ago.", idempotency_key="old-1", created_at=said)
    client.flushdb()
    again = service(client, store).append(
        "alice", "user", "Said three years ago.", idempotency_key="old-1", created_at=said
    )
    assert again.replayed and again.message_id == first.message_id
    assert stored_contents(store, "alice") == ["Said three years ago."]
    assert store.get_messages("alice", [first.message_id])[0].created_at == pytest.approx(said)


def test_write_behind_flush_replays_spooled_keys_and_never_duplicates(store: MemoryStore) -> None:
    """Production-like wiring on a real Redis: write-behind, the spool writes messages and their
    records; FLUSHDB of the hot-state db under the running service. A spooled key replays; a key
    acknowledged but not yet spooled is gone with its message, and its retry appends it once."""
    client = real_redis()
    client.flushdb()
    cfg = settings("write_behind", redis_url=REDIS_URL)
    svc = service(client, store, cfg)
    try:
        svc.create_agent("carol", model=MODEL)
        acked = {
            f"k{i}": svc.append("carol", "user", f"Carol paid invoice {i}.", idempotency_key=f"k{i}") for i in range(6)
        }
        spool_messages(svc.hot, store, "carol", [r.message_id for r in acked.values()])
        late = svc.append("carol", "user", "never spooled", idempotency_key="late")
        assert {m.content for m in store.list_messages("carol")} == {f"Carol paid invoice {i}." for i in range(6)}
        client.flushdb()
        for i in range(6):  # every spooled key replays its first answer
            again = svc.append("carol", "user", f"Carol paid invoice {i}.", idempotency_key=f"k{i}")
            assert again.replayed and again.message_id == acked[f"k{i}"].message_id
        retried = svc.append("carol", "user", "never spooled", idempotency_key="late")
        assert not retried.replayed and retried.message_id != late.message_id  # its id is never reused
        assert svc.append("carol", "user", "never spooled", idempotency_key="late").replayed
        spool_messages(svc.hot, store, "carol", [retried.message_id])
        contents = stored_contents(store, "carol")
        assert len(contents) == len(set(contents)) == 7
        fifo = [m.content for m in svc.hot.snapshot("carol").fifo]
        assert len(fifo) == len(set(fifo)) == 7
    finally:
        client.flushdb()


def test_claims_replay_after_the_loss_facts_tools_and_reset(client: redis.Redis, store: MemoryStore) -> None:
    svc = service(client, store)
    svc.create_agent("dave", model=MODEL)
    fact = svc.remember("dave", "Dave's sister lives in Lyon.", type="preference", idempotency_key="f1")
    _, replayed = svc.claim("dave", "t1", "set_state", {"key": "mood"}, {"pending": True})
    assert not replayed
    svc.settle("dave", "t1", "set_state", {"key": "mood"}, {"body": {"ok": True, "rev": "1"}})
    svc.reset("dave", idempotency_key="r1")
    svc.append("dave", "user", "said after the reset")
    client.flushdb()
    again = service(client, store)
    fact_again = again.remember("dave", "Dave's sister lives in Lyon.", type="preference", idempotency_key="f1")
    assert fact_again.replayed and fact_again.fact.fact_id == fact.fact.fact_id
    assert len(again.list_facts("dave")) == 1
    # A tool call's settled body is what its retry answers.
    assert again.claim("dave", "t1", "set_state", {"key": "mood"}, {"pending": True}) == (
        {"body": {"ok": True, "rev": "1"}},
        True,
    )
    # A retried reset resets nothing: what was said since stays.
    assert again.reset("dave", idempotency_key="r1")["messages_to_recall"] == 0
    assert [m.content for m in again.hot.snapshot("dave").fifo] == ["said after the reset"]


def test_a_record_redis_lost_alone_is_taken_from_the_store(client: redis.Redis, store: MemoryStore) -> None:
    """The agent is still in Redis but one record is not (a failover to a lagging replica): a
    claim finds the store's record, answers with it and puts it back."""
    svc = service(client, store)
    svc.create_agent("erin", model=MODEL)
    svc.claim("erin", "t1", "remember_fact", {"v": 1}, {"pending": True})
    svc.settle("erin", "t1", "remember_fact", {"v": 1}, {"body": {"fact_id": "f1"}})
    client.delete(keys.idempotency("erin", "t1"))
    assert svc.claim("erin", "t1", "remember_fact", {"v": 1}, {"pending": True}) == ({"body": {"fact_id": "f1"}}, True)
    assert svc.claim("erin", "t1", "remember_fact", {"v": 1}, {"pending": True})[1]  # from Redis again
    client.delete(keys.idempotency("erin", "t1"))
    with pytest.raises(IdempotencyMismatch):
        svc.claim("erin", "t1", "remember_fact", {"v": 2}, {"pending": True})


def test_block_edits_and_requested_evictions_replay_after_the_loss(client: redis.Redis, store: MemoryStore) -> None:
    svc = service(client, store)
    svc.create_agent("fay", model=MODEL)
    block = svc.put_block("fay", "goals", "Finish the report.", idempotency_key="b1")
    for i in range(6):
        svc.append("fay", "user", f"line {i}")
    total, batch = svc.evict("fay", 2, idempotency_key="e1")
    assert batch is not None
    client.flushdb()
    again = service(client, store)
    replay = again.put_block("fay", "goals", "Finish the report.", idempotency_key="b1")
    assert replay.replayed and replay.rev == block.rev
    assert again.evict("fay", 2, idempotency_key="e1") == (total, batch)
    assert not again.hot.pending_batches("fay")  # the replay began no batch of its own


def test_a_rebuild_reinstalls_only_unexpired_records(client: redis.Redis, store: MemoryStore) -> None:
    svc = service(client, store)
    svc.create_agent("gus", model=MODEL)
    now = time.time()
    store.put_idempotency(
        [
            IdempotencyRecord("gus", "live", "fp", '{"done":true}', now + 60),
            IdempotencyRecord("gus", "gone", "fp", '{"done":true}', now - 1),
        ]
    )
    client.flushdb()
    svc.fifo_ids("gus")  # rebuilds
    assert client.exists(keys.idempotency("gus", "live")) and not client.exists(keys.idempotency("gus", "gone"))
    assert 0 < client.ttl(keys.idempotency("gus", "live")) <= 60  # the time it has left
