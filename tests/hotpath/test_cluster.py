"""The hot state on a real three-master Redis Cluster (private redis-server processes).

Redis itself lets a script without flags touch any key its node serves, so "every Lua script
stays in one slot" is checked here by watching the servers: MONITOR on every master records
each script call and every command the script ran, and each must name keys of a single slot.
Reads across agents (sweeper, reconcile, metrics) must see agents on every master.
"""

from __future__ import annotations

import hashlib
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from tests.doubles.coldpath import MODEL, create_agent, make_deps, small_settings
from tests.redis_legs import cluster_client
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath import keys, lua
from vcm.hotpath.connection import connect
from vcm.hotpath.state import HotState
from vcm.obs.metrics_state import StateCollector
from vcm.service.tokens import digest
from vcm.settings import load_settings
from vcm.tasks import maintenance
from vcm.tools.chains import HeartbeatGovernor
from vcm.types import AgentImage

pytestmark = pytest.mark.redis

# Commands the client or the servers send that name no key (the rest name one at argument 1).
KEYLESS = {"HELLO", "CLUSTER", "COMMAND", "SCRIPT", "PING", "INFO", "MULTI", "EXEC", "DISCARD", "CLIENT",
           "READONLY", "SELECT", "FLUSHDB", "FLUSHALL", "MONITOR", "DBSIZE", "SCAN", "ECHO", "AUTH"}  # fmt: skip


ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')  # one quoted MONITOR argument


RUNS_SCRIPT = re.compile(r"(?:register_script|eval)\(\s*lua\.([A-Z_]+)")
SOURCES = ("vcm", "hotpath", "tasks", "workers")


def _scripts() -> dict[str, str]:
    """Every Lua script of :mod:`vcm.hotpath.lua` that the code runs (``register_script(lua.X)`` or
    ``eval(lua.X, ...)`` anywhere in the server's sources); fragments composing them are not."""
    root = Path(__file__).resolve().parents[2]
    names = {n for d in SOURCES for f in (root / d).rglob("*.py") for n in RUNS_SCRIPT.findall(f.read_text())}
    assert names, "no script registrations found"
    return {name: getattr(lua, name) for name in names}


def _slot(key: str) -> int:
    return int(key_slot(key.encode()))


@dataclass
class Monitor:
    """MONITOR on one master, in a thread, until :meth:`stop` sends its end mark."""

    port: int
    lines: list[dict[str, Any]] = field(default_factory=list)
    mark: str = field(default_factory=lambda: f"end-{uuid.uuid4().hex}")
    ready: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with redis.Redis(port=self.port, decode_responses=True).monitor() as m:
            self.ready.set()
            while True:
                # The raw line keeps argument boundaries (each argument quoted), which redis-py's
                # parsed form loses for arguments with spaces (script text, message JSON).
                raw = str(m.connection.read_response())  # type: ignore[union-attr]
                if self.mark in raw:
                    return
                source = raw.split("]", 1)[0]
                args = [a.encode().decode("unicode_escape") for a in ARG.findall(raw.split("]", 1)[1])]
                self.lines.append({"client_type": "lua" if " lua" in source else "tcp", "args": args})

    def stop(self) -> None:
        redis.Redis(port=self.port).echo(self.mark)


@pytest.fixture
def cluster(redis_cluster_url: str) -> Iterator[redis.Redis]:
    client = cluster_client(redis_cluster_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def _master_ports(client: redis.Redis) -> list[int]:
    return sorted(int(n.port) for n in client.get_primaries())  # type: ignore[attr-defined]


def _agents_on_every_master(client: redis.Redis, per_master: int) -> list[str]:
    """Agent ids whose hash tags land on each master ``per_master`` times."""
    by_port: dict[int, list[str]] = {p: [] for p in _master_ports(client)}
    i = 0
    while any(len(v) < per_master for v in by_port.values()):
        agent = f"ag{i}"
        node = client.get_node_from_key(keys.key(agent, keys.META))  # type: ignore[attr-defined]
        if len(by_port[int(node.port)]) < per_master:
            by_port[int(node.port)].append(agent)
        i += 1
    return [a for agents in by_port.values() for a in agents]


def _exercise_every_script(client: redis.Redis) -> None:
    settings = small_settings()
    hot = HotState(client, settings)
    for agent in _agents_on_every_master(client, 1):
        hot.create_agent(agent, model=MODEL, system_prompt="be brief")
        first = hot.put_block(agent, "notes", "likes tea", pinned=True, idempotency_key="b1")
        edited = hot.put_block(agent, "notes", "likes green tea", expected_rev=first.rev)
        hot.delete_block(agent, "notes", str(edited.rev))
        batches = []
        for i in range(40):  # warning, then flushes in a 512-token window
            r = hot.append(
                agent, "user", f"message {i} about the harbour and the ferry timetable", idempotency_key=f"k{i}"
            )
            batches += [r.batch.id] if r.batch else []
        hot.append(agent, "user", "message 0 about the harbour and the ferry timetable", idempotency_key="k0")
        assert batches, "a 512-token window must flush within 40 messages"
        hot.finish_eviction(agent, batches[0], "they talked about ferries")
        hot.replace_summary(agent, batches[0], "they talked")
        hot.evict_oldest(agent, 2, idempotency_key="ev1")
        assert hot.forget_message(agent, hot.fifo_ids(agent)[-1])["removed"]
        hot.claim(agent, "note-1", "write_recall", {"text": "x"}, {"message_id": "m999"})
        hot.jobs.open(agent, "job1", "doc1", 1.0)
        hot.jobs.progress(agent, "job1", 2.0, chunks_total=3, chunks_done=1)
        assert hot.jobs.cancel_open(agent, 3.0, "the agent was reset") == ["job1"]
        hot.snapshot(agent)  # a MULTI pipeline
        HeartbeatGovernor(hot.heartbeats, settings.heartbeat).decide(agent, requested=True, free_tokens=10_000)
        hot.tokens.put(agent, digest("token-1"))
        hot.tokens.replace_if(agent, digest("token-1"), digest("token-2"))
        hot.append(agent, "user", "as the agent", token_sha256=digest("token-2"))  # the token-guarded append
        # Another process's first append reads the agent's latest message time (its date marker).
        HotState(client, settings).append(agent, "user", "from another process")
        snap = hot.snapshot(agent)  # rebuilt under another id, as vcm.durable rebuilds a lost agent
        image = AgentImage(snap.fifo, snap.blocks, snap.summary_text, snap.summary_tokens, 1, id_floor=1000)
        assert hot.restore(f"{agent}-copy", image, model=MODEL, system_prompt="be brief")


def test_every_script_and_transaction_stays_in_one_slot(cluster: redis.Redis) -> None:
    monitors = [Monitor(port) for port in _master_ports(cluster)]
    threads = [threading.Thread(target=m.run, daemon=True) for m in monitors]
    for t, m in zip(threads, monitors, strict=True):
        t.start()
        assert m.ready.wait(5)
    try:
        _exercise_every_script(cluster)
    finally:
        for m in monitors:
            m.stop()
        for t in threads:
            t.join(10)
    scripts = _scripts()
    shas = {hashlib.sha1(text.encode()).hexdigest(): name for name, text in scripts.items()}
    ran: set[str] = set()
    calls = transactions = 0
    for m in monitors:
        group: list[str] | None = None  # keys of the script call or MULTI block being read
        kind = ""
        for line in m.lines:
            words = line["args"]
            command = words[0].upper()
            if line["client_type"] == "lua":
                assert group is not None and kind == "script", f"a script command outside a script call: {line}"
                if command not in KEYLESS:
                    group.append(words[1])
                continue
            if kind == "script" and group is not None:
                assert len({_slot(k) for k in group}) == 1, f"a script touched several slots: {group}"
                group, kind = None, ""
            if command in ("EVALSHA", "EVAL"):
                numkeys = int(words[2])
                group, kind = list(words[3 : 3 + numkeys]), "script"
                assert group, f"a script call without keys cannot be routed to a slot: {line}"
                calls += 1
                if command == "EVALSHA":
                    ran.add(shas.get(words[1], words[1]))
                else:
                    ran.update(name for name, text in scripts.items() if text == words[1])
            elif command == "MULTI":
                group, kind = [], "multi"
            elif command == "EXEC" and kind == "multi" and group is not None:
                assert len({_slot(k) for k in group}) == 1, f"a transaction touched several slots: {group}"
                transactions += 1
                group, kind = None, ""
            elif kind == "multi" and group is not None and command not in KEYLESS:
                group.append(words[1])
        if kind == "script" and group:
            assert len({_slot(k) for k in group}) == 1, f"a script touched several slots: {group}"
    assert calls > 0 and transactions > 0
    assert ran >= set(scripts), f"scripts not exercised: {sorted(set(scripts) - ran)}"


def test_cross_agent_reads_see_agents_on_every_master(cluster: redis.Redis, tmp_path: Path) -> None:
    dispatcher = RecordingDispatcher()  # spools nothing: reconcile must find every message
    deps = make_deps(tmp_path, client=cluster, settings=small_settings(), dispatcher=dispatcher)
    agents = _agents_on_every_master(cluster, 2)
    for agent in agents:
        create_agent(deps.hot, deps.store, agent)  # with its store record: the spool writes for it
        for i in range(4):
            deps.hot.append(agent, "user", f"{agent} says {i}")
        assert deps.hot.evict_oldest(agent, 1)[1] is not None
    assert sorted(deps.hot.agents()) == sorted(agents)
    assert deps.hot.agents_with_pending_batches() == {a: [1] for a in agents}
    assert maintenance.observe(deps) == {a: 1 for a in agents}
    [family] = [f for f in StateCollector(cluster, dict).collect() if f.name == "vcm_eviction_batches_pending"]
    assert family.samples[0].value == len(agents)
    for agent in agents:
        assert deps.store.get_messages(agent, deps.hot.fifo_ids(agent)) == []
    assert maintenance.reconcile_spool(deps, older_than=deps.clock() + 1) > 0
    for agent in agents:  # the FIFO's three messages of each agent (the fourth is in its batch)
        fifo = deps.hot.fifo_ids(agent)
        assert [m.message_id for m in deps.store.get_messages(agent, fifo)] == fifo
        assert deps.hot.reconciled_seq(agent) == 4
    deps.store.close()


def test_a_cluster_url_selects_the_cluster_client(redis_cluster_url: str) -> None:
    client = connect(redis_cluster_url)
    assert isinstance(client, RedisCluster) and client.ping()
    assert len(client.get_primaries()) == 3
    one_seed = redis_cluster_url.split(",")[0]  # the client finds the other masters itself
    assert len(connect(one_seed).get_primaries()) == 3  # type: ignore[attr-defined]
    assert not isinstance(connect("redis://127.0.0.1:6379/13"), RedisCluster)
    with pytest.raises(ValueError, match="database 0 only"):
        connect(one_seed + "/3")
    assert load_settings(environ={"VCM_REDIS_URL": redis_cluster_url}).redis_url == redis_cluster_url


def test_worker_delivery_counts_can_live_on_the_cluster(cluster: redis.Redis, redis_cluster_url: str) -> None:
    """With RabbitMQ as the broker the workers count deliveries in the hot state's Redis, which
    may be a cluster: each count is one key, its INCR and EXPIRE one single-slot transaction."""
    from vcm.workers.deliveries import PREFIX, RedisDeliveryLog

    log = RedisDeliveryLog(redis_cluster_url, ttl_s=60, prefix="t:")
    assert [log.record(f"task-{i}", 0) for i in range(6)] == [1] * 6
    assert log.record("task-0", 0) == 2 and log.record("task-0", 1) == 1
    assert cluster.get(f"t:{PREFIX}task-0:0") == "2" and 0 < int(cluster.ttl(f"t:{PREFIX}task-0:0")) <= 60
