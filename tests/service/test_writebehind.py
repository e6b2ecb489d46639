"""Write-behind's loss window is bounded (vcm.service.writebehind): per agent, the appends
acknowledged and not yet in the store never number more than ``write_behind_max_messages`` and
are never older than ``write_behind_max_s`` (while the API process lives), whatever the workers do.

Real Redis (``VCM_TEST_REDIS_URL``) and a real SQLite store; no worker runs unless a test spools
itself, which is the worst case the bound is for (workers down or far behind)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.redis_legs import REDIS_URL, real_redis
from vcm.dispatch import RecordingDispatcher
from vcm.errors import NotFound
from vcm.hotpath import keys
from vcm.hotpath.state import HotState
from vcm.obs import metrics
from vcm.obs.metrics_state import StateCollector
from vcm.service import MemoryService
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.tasks.spool import spool_messages

pytestmark = pytest.mark.redis

MODEL = "vcm-demo-2k"


def settings(max_s: float, max_messages: int, mode: str = "write_behind") -> Settings:
    durability: dict[str, Any] = {
        "messages": mode,
        "id_reserve": 64,
        "write_behind_max_s": max_s,
        "write_behind_max_messages": max_messages,
    }
    return load_settings(overrides={"durability": durability, "redis_url": REDIS_URL}, environ={})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    s = open_store(f"sqlite:///{tmp_path / 'vcm.db'}", text_index_lag_ok=False)
    yield s
    s.close()


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    made = real_redis()
    made.flushdb()
    yield made
    made.flushdb()


def service(client: redis.Redis, store: MemoryStore, cfg: Settings) -> MemoryService:
    return MemoryService(HotState(client, cfg), store, RecordingDispatcher())


def stored(store: MemoryStore, agent: str) -> dict[str, str]:
    return {m.message_id: m.content for m in store.list_messages(agent, limit=1000)}


def forced(reason: str) -> float:
    return metrics.WRITE_BEHIND_FORCED.labels(reason=reason)._value.get()


def test_the_append_reports_the_backlog_and_the_spool_empties_it(client: redis.Redis, store: MemoryStore) -> None:
    svc = service(client, store, settings(0, 0))
    svc.create_agent("ann", model=MODEL)
    first = svc.append("ann", "user", "Ann booked a room in Porto.", idempotency_key="k1")
    second = svc.append("ann", "user", "Ann asked for a late checkout.")
    assert first.backlog is not None and second.backlog is not None
    assert (first.backlog.messages, second.backlog.messages) == (1, 2)
    assert second.backlog.oldest_at == first.backlog.oldest_at
    # A replay reports none (its record was written before the backlog was read).
    assert svc.append("ann", "user", "Ann booked a room in Porto.", idempotency_key="k1").backlog is None
    spool_messages(svc.hot, store, "ann", [first.message_id])
    assert svc.hot.backlog.read("ann").messages == 1
    spool_messages(svc.hot, store, "ann", [second.message_id])
    assert svc.hot.backlog.read("ann").messages == 0 and len(stored(store, "ann")) == 2


def test_write_through_mode_tracks_no_backlog(client: redis.Redis, store: MemoryStore) -> None:
    svc = service(client, store, settings(1.0, 5, mode="write_through"))
    svc.create_agent("bea", model=MODEL)
    assert svc.append("bea", "user", "Bea is in Lyon.").backlog is None
    assert svc.hot.backlog.read("bea").messages == 0 and len(stored(store, "bea")) == 1


def test_past_the_size_bound_the_append_writes_the_backlog_through(client: redis.Redis, store: MemoryStore) -> None:
    svc = service(client, store, settings(0, 3))
    svc.create_agent("cy", model=MODEL)
    before = forced("size")
    ids = [svc.append("cy", "user", f"Cy paid bill {i}.", idempotency_key=f"k{i}").message_id for i in range(3)]
    assert stored(store, "cy") == {} and svc.hot.backlog.read("cy").messages == 3  # within the bound
    ids.append(svc.append("cy", "user", "Cy paid bill 3.", idempotency_key="k3").message_id)
    # The fourth append wrote all four before it was acknowledged, with their idempotency records.
    assert sorted(stored(store, "cy")) == sorted(ids) and svc.hot.backlog.read("cy").messages == 0
    assert forced("size") == before + 1
    assert {r.key for r in store.list_idempotency("cy")} == {"k0", "k1", "k2", "k3"}


def test_an_idle_backlog_is_written_through_once_past_the_age_bound(client: redis.Redis, store: MemoryStore) -> None:
    svc = service(client, store, settings(0.3, 0))
    svc.create_agent("dee", model=MODEL)
    before = forced("idle")
    mid = svc.append("dee", "user", "Dee left for Kyoto.").message_id
    assert stored(store, "dee") == {}
    deadline = time.monotonic() + 5
    while svc.hot.backlog.read("dee").messages and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mid in stored(store, "dee") and svc.hot.backlog.read("dee").messages == 0
    assert forced("idle") == before + 1
    assert svc.core.behind is not None
    svc.core.behind.close()


def test_an_append_finding_an_old_backlog_writes_it_through(client: redis.Redis, store: MemoryStore) -> None:
    cfg = settings(0.2, 0)
    now = [1000.0]
    svc = MemoryService(HotState(client, cfg, clock=lambda: now[0]), store, RecordingDispatcher())
    svc.create_agent("eve", model=MODEL)
    assert svc.core.behind is not None
    svc.core.behind.close()  # the idle check off: this is the append's own check
    first = svc.append("eve", "user", "Eve rented a bicycle.").message_id
    now[0] += 0.5
    second = svc.append("eve", "user", "Eve returned it.").message_id
    assert sorted(stored(store, "eve")) == sorted([first, second])


def test_a_write_through_racing_a_delete_and_re_create_writes_nothing(
    client: redis.Redis, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = service(client, store, settings(0, 0))
    svc.create_agent("jo", model=MODEL)
    svc.append("jo", "user", "Jo's old agent said this.")
    assert svc.core.behind is not None
    # The agent's incarnation changes between the two reads around the backlog read.
    seen = iter(["before", "after"])
    monkeypatch.setattr(svc.hot, "incarnation", lambda _agent: next(seen))
    assert svc.core.behind.write_through("jo", "size") == 0
    assert stored(store, "jo") == {}
    monkeypatch.undo()
    svc.delete_agent("jo")  # deleted: nothing to write, and no error
    assert svc.core.behind.write_through("jo", "idle") == 0


def flush_before(monkeypatch: pytest.MonkeyPatch, client: redis.Redis, owner: object, name: str, call: int = 1) -> None:
    """Redis loses everything (a FLUSHDB) just before the ``call``-th run of ``owner.name``."""
    original = getattr(owner, name)
    calls = [0]

    def flushed_first(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == call:
            client.flushdb()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, flushed_first)


def test_redis_lost_between_an_append_and_its_write_through_keeps_that_append(
    client: redis.Redis, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append over the size bound is acknowledged after its write-through. Redis lost the
    agent in between: the backlog before it is the bound's to lose, the append itself is kept
    with its idempotency record, so its retry replays it."""
    max_messages = 3
    svc = service(client, store, settings(0, max_messages))
    svc.create_agent("kim", model=MODEL)
    for i in range(max_messages):
        svc.append("kim", "user", f"Kim packed item {i}.", idempotency_key=f"k{i}")
    assert svc.core.behind is not None
    flush_before(monkeypatch, client, svc.core.behind, "write_through")
    last = svc.append("kim", "user", "Kim locked the suitcase.", idempotency_key="k-last")
    assert stored(store, "kim") == {last.message_id: "Kim locked the suitcase."}
    again = svc.append("kim", "user", "Kim locked the suitcase.", idempotency_key="k-last")
    assert again.replayed and again.message_id == last.message_id
    # The ones the bound allowed to be lost append once each on their retry.
    for i in range(max_messages):
        assert not svc.append("kim", "user", f"Kim packed item {i}.", idempotency_key=f"k{i}").replayed
    contents = sorted({**held(client, "kim"), **stored(store, "kim")}.values())
    assert contents == sorted(["Kim locked the suitcase."] + [f"Kim packed item {i}." for i in range(max_messages)])


def test_redis_lost_mid_write_through_keeps_what_was_read_with_its_records(
    client: redis.Redis, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis is lost after the backlog and its records were read: all of it is written."""
    svc = service(client, store, settings(0, 2))
    svc.create_agent("lou", model=MODEL)
    first = svc.append("lou", "user", "Lou ordered tea.", idempotency_key="a")
    second = svc.append("lou", "user", "Lou ordered cake.")
    flush_before(monkeypatch, client, svc.hot, "incarnation", call=2)  # its second read, in the fence
    third = svc.append("lou", "user", "Lou paid.", idempotency_key="c")
    monkeypatch.undo()
    assert sorted(stored(store, "lou")) == sorted([first.message_id, second.message_id, third.message_id])
    assert svc.append("lou", "user", "Lou ordered tea.", idempotency_key="a").message_id == first.message_id
    assert svc.append("lou", "user", "Lou paid.", idempotency_key="c").replayed


def test_a_keyed_message_whose_record_redis_lost_is_not_written_without_it(
    client: redis.Redis, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written without its record, a message's retry would append it a second time: the bound
    lets it be lost instead, and the retry appends it once."""
    svc = service(client, store, settings(0, 1))
    svc.create_agent("max", model=MODEL)
    svc.append("max", "user", "Max booked a taxi.", idempotency_key="taxi")
    monkeypatch.setattr(svc.hot, "idempotency_records", lambda _agent, _keys: {})  # as if lost
    flush_before(monkeypatch, client, svc.hot, "incarnation", call=2)  # its second read, in the fence
    last = svc.append("max", "user", "Max tipped the driver.", idempotency_key="tip")
    monkeypatch.undo()
    assert stored(store, "max") == {last.message_id: "Max tipped the driver."}
    assert not svc.append("max", "user", "Max booked a taxi.", idempotency_key="taxi").replayed
    assert svc.append("max", "user", "Max tipped the driver.", idempotency_key="tip").replayed


def test_an_agent_deleted_between_an_append_and_its_write_through_is_not_brought_back(
    client: redis.Redis, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gone from Redis is not always a lost Redis: a delete's store record is gone (or, re-created,
    holds another incarnation), and the store's fence refuses the old agent's message."""
    svc = service(client, store, settings(0, 1))
    for recreate in (False, True):
        svc.create_agent("ned", model=MODEL)
        svc.append("ned", "user", "Ned's first agent said this.")
        assert svc.core.behind is not None
        real = svc.core.behind.write_through

        def deleted_first(*args: Any, _recreate: bool = recreate, _real: Any = real, **kwargs: Any) -> int:
            svc.delete_agent("ned")
            if _recreate:
                svc.create_agent("ned", model=MODEL)
            return int(_real(*args, **kwargs))

        monkeypatch.setattr(svc.core.behind, "write_through", deleted_first)
        svc.append("ned", "user", "Ned's first agent said this too.")
        monkeypatch.undo()
        assert stored(store, "ned") == {}
        if recreate:
            assert not [m for m in svc.context("ned").messages if "Ned" in str(m.get("content"))]
        else:
            svc.create_agent("ned", model=MODEL)
        svc.delete_agent("ned")


def test_write_through_mode_keeps_the_record_of_an_append_redis_lost_at_once(
    client: redis.Redis, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Write-through copies a keyed append's record from the append's own reply: read back from
    a Redis that lost it, the record would be missing and the retry would append again."""
    svc = service(client, store, settings(0, 0, mode="write_through"))
    svc.create_agent("oz", model=MODEL)
    flush_before(monkeypatch, client, svc.core.durable, "appended")
    first = svc.append("oz", "user", "Oz renewed the lease.", idempotency_key="lease")
    monkeypatch.undo()
    assert stored(store, "oz") == {first.message_id: "Oz renewed the lease."}
    again = svc.append("oz", "user", "Oz renewed the lease.", idempotency_key="lease")
    assert again.replayed and again.message_id == first.message_id
    assert list(stored(store, "oz").values()) == ["Oz renewed the lease."]


def test_a_spool_racing_a_lost_redis_never_stores_a_keyed_message_without_its_record(
    client: redis.Redis, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis is lost after the spool read the messages and before it reads their records: written
    without its record, the message would be appended again by its retry."""
    svc = service(client, store, settings(0, 0))
    svc.create_agent("pia", model=MODEL)
    first = svc.append("pia", "user", "Pia signed the contract.", idempotency_key="sign")
    flush_before(monkeypatch, client, svc.hot, "idempotency_records")
    spool_messages(svc.hot, store, "pia", [first.message_id])
    monkeypatch.undo()
    kept = first.message_id in stored(store, "pia")
    again = svc.append("pia", "user", "Pia signed the contract.", idempotency_key="sign")
    assert again.replayed == kept
    contents = list({**held(client, "pia"), **stored(store, "pia")}.values())
    assert contents.count("Pia signed the contract.") == 1


def test_write_through_lands_nothing_of_an_agent_deleted_since_its_append(
    client: redis.Redis, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete racing an append's write-through: the store write is fenced by the incarnation
    the append ran under, so no row of the deleted agent is left behind to show up in a
    re-created one's recall; the append answers NOT_FOUND (its agent is gone)."""
    svc = service(client, store, settings(0, 0, mode="write_through"))
    svc.create_agent("quin", model=MODEL)
    real = svc.core.durable.appended

    def deleted_first(*args: Any, **kwargs: Any) -> None:
        svc.delete_agent("quin")
        svc.create_agent("quin", model=MODEL)  # the same id, a new agent
        real(*args, **kwargs)

    monkeypatch.setattr(svc.core.durable, "appended", deleted_first)
    with pytest.raises(NotFound):
        svc.append("quin", "user", "Quin's old secret.", idempotency_key="old")
    monkeypatch.undo()
    assert stored(store, "quin") == {}
    assert not store.search_recall_hybrid("quin", "secret", None, mode="text").items
    assert not svc.append("quin", "user", "Quin's old secret.", idempotency_key="old").replayed


def test_the_backlog_is_a_metric(client: redis.Redis, store: MemoryStore) -> None:
    svc = service(client, store, settings(0, 0))
    for agent, n in (("fay", 3), ("gus", 1)):
        svc.create_agent(agent, model=MODEL)
        for i in range(n):
            svc.append(agent, "user", f"{agent} said {i}.")
    samples = {s.name: s.value for family in StateCollector(client, lambda: {}).collect() for s in family.samples}
    assert samples["vcm_write_behind_backlog_messages"] == 4
    assert samples["vcm_write_behind_backlog_agent_max_messages"] == 3
    assert 0 <= samples["vcm_write_behind_backlog_age_seconds"] < 60


def test_flushdb_mid_load_loses_nothing_older_than_the_window_and_retries_never_duplicate(
    client: redis.Redis, store: MemoryStore
) -> None:
    """No worker runs: without the bound every acknowledged message would go with the FLUSHDB.
    With it, what is lost is at most ``max_messages`` messages, none acknowledged more than
    ``max_s`` (plus a store write) before the flush; every retry replays or appends once."""
    max_s, max_messages = 0.4, 5
    svc = service(client, store, settings(max_s, max_messages))
    agents = ["hal", "ivy"]
    for agent in agents:
        svc.create_agent(agent, model=MODEL)
    acks: list[tuple[str, str, str, str, float]] = []  # agent, key, content, message id, acked at
    lock = threading.Lock()
    stop = threading.Event()

    def appender(agent: str) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            key, content = f"{agent}-{n}", f"{agent} noted expense number {n} of the trip."
            res = svc.append(agent, "user", content, idempotency_key=key)
            with lock:
                acks.append((agent, key, content, res.message_id, time.monotonic()))
            time.sleep(0.01 if n % 40 else 0.6)  # bursts (the size bound) and pauses (the age bound)

    threads = [threading.Thread(target=appender, args=(a,), daemon=True) for a in agents]
    for t in threads:
        t.start()
    time.sleep(2.0)
    with lock:  # no append is acknowledged while the flush runs, so each ack is before or after it
        client.flushdb()
        flushed_at = time.monotonic()
        before = list(acks)
    # The load goes on: the agents are rebuilt from the store. Both appenders may be in a pause
    # (0.6 s) at the flush, so wait for an append after it rather than a fixed time.
    time.sleep(0.5)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        with lock:
            if len(acks) > len(before):
                break
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(10)
    assert before and len(acks) > len(before)
    if svc.core.behind is not None:
        svc.core.behind.close()
    present = {a: {**held(client, a), **stored(store, a)} for a in agents}
    lost = [ack for ack in acks if present[ack[0]].get(ack[3]) != ack[2]]
    for agent in agents:
        assert len([a for a in lost if a[0] == agent]) <= max_messages, lost
    slack = 0.5  # the idle check's store write, on a loaded machine
    assert all(flushed_at - acked_at <= max_s + slack for *_, acked_at in lost), (flushed_at, lost)
    # Every acknowledged key retried: kept ones replay their first answer; lost ones append once.
    for agent, key, content, message_id, acked_at in acks:
        again = svc.append(agent, "user", content, idempotency_key=key)
        if (agent, key, content, message_id, acked_at) in lost:
            assert not again.replayed
        else:
            assert again.replayed and again.message_id == message_id
    for agent in agents:
        contents = list({**held(client, agent), **stored(store, agent)}.values())
        mine = sorted(c for a, _, c, _, _ in acks if a == agent)
        assert sorted(c for c in contents if c in set(mine)) == mine  # each exactly once


def held(client: redis.Redis, agent: str) -> dict[str, str]:
    """Messages Redis holds for the agent (FIFO and pending batches), by id."""
    raw = client.hgetall(keys.key(agent, keys.MESSAGES))
    return {str(mid): str(json.loads(body)["content"]) for mid, body in raw.items()}
