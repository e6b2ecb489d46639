"""Real `celery worker` processes on the real Redis broker, a real SQLite store and the real
embedding model: SIGKILL mid-task, retries at every step, dead letters, Flower.

One worker process serves the module (loading the embedder takes ~10 s per process); the SIGKILL
tests kill it and leave their restarted worker for the next test. Fault rules reach the worker
through ``VCM_TEST_FAULTS`` and apply to agents by id prefix, so every test has its own agents.
The Redis server is a private ``redis-server`` started for the module (other suites flush their
databases on the shared server); ``VCM_TEST_BROKER_URL`` points the module at another server, and
without the binary it falls back to the shared server's database 9 (8 for xdist worker gw1, ...).
Broker keys carry a per-run prefix (``[worker] broker_prefix``) and agents unique ids, so runs
sharing a server do not meet. Hot-state keys (``vcm:{<agent>}:*``) live in the same database as
the prefixed broker keys.

The SIGKILL tests run again with RabbitMQ as the broker (``VCM_TEST_AMQP_URL``, default the local
server with guest/guest; skipped, saying why, when none answers): the same workers, settings and
private Redis for the hot state, which then also holds the delivery counts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from celery.signals import after_task_publish
from kombu import Connection
from prometheus_client import CollectorRegistry
from prometheus_client import multiprocess as prom_multiprocess
from prometheus_client.parser import text_string_to_metric_families

from tests.doubles.coldpath import MODEL, create_agent
from tests.redis_legs import CLI_REDIS_URL
from tests.workers.traffic import Traffic, all_message_ids, assert_exactly_once, settled, wait_until
from vcm.hotpath.state import HotState
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.tasks.faults import ENV as FAULTS_ENV
from vcm.workers import names
from vcm.workers.build import create_app
from vcm.workers.deliveries import PREFIX as DELIVERIES
from vcm.workers.dispatch import CeleryDispatcher
from vcm.workers.signals import WARM_MESSAGE

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))
SHARED_REDIS = CLI_REDIS_URL
AMQP_URL = os.environ.get("VCM_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
POINTS = [
    "evict.before_summarize",
    "evict.after_summarize",
    "commit_eviction.after_recall_append",
    "commit_eviction.before_commit",
    "evict.after_commit",
]
# Where each SIGKILL scenario stalls its evictions for 0.25 s, to be killed there.
KILL_POINTS = {"k0": "evict.before_summarize", "k1": "commit_eviction.before_commit", "k2": "evict.after_commit"}
RULES = [
    *({"point": p, "agent_prefix": f"f{i}-", "times": 2} for i, p in enumerate(POINTS)),
    {"point": "spool.before_write", "agent_prefix": "f", "times": 1},
    {"point": "evict.before_summarize", "agent_prefix": "doomed-"},
    {"point": "spool.before_write", "agent_prefix": "child-", "action": "sleep", "seconds": 1.5},
    # slow enough that two prefork children each take some of these evictions, which then fail
    {"point": "evict.before_summarize", "agent_prefix": "slowdoom-", "action": "sleep", "seconds": 0.3},
    {"point": "evict.before_summarize", "agent_prefix": "slowdoom-"},
    *({"point": p, "agent_prefix": f"{k}-", "action": "sleep", "seconds": 0.25} for k, p in KILL_POINTS.items()),
]
CONFIG = """
broker_url = "{broker}"
redis_url = "{hot}"
store_url = "sqlite:///{store}"
[models]
"{model}" = 512
[worker]
broker_prefix = "{prefix}"
visibility_timeout_s = 5
restore_interval_s = 1
task_time_limit_s = 3
task_soft_time_limit_s = 2
max_retries = 3
retry_backoff_s = 0.1
retry_backoff_max_s = 1
max_deliveries = 4
soft_shutdown_timeout_s = 0
[maintenance]
sweep_grace_s = 2
"""


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    given = os.environ.get("VCM_TEST_BROKER_URL")
    binary = shutil.which("redis-server")
    if given or binary is None:
        yield given or SHARED_REDIS
        return
    port = _free_port()
    directory = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(directory), "--maxmemory-policy", "noeviction"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        wait_until(lambda: _answers(client) or server.poll() is not None, 20, "redis-server up")
        assert server.poll() is None, "redis-server exited at start"
        yield url
    finally:
        server.terminate()
        server.wait(10)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False


def _redis_or_skip(url: str) -> redis.Redis:
    client = redis.Redis.from_url(url, decode_responses=True, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.skip(f"real Redis at {url} is not answering ({exc})")
    return client


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    name: str
    log: Path
    pool: str = "solo"

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def warm(self) -> bool:
        # solo: the worker process itself; prefork: its child (the pool process) says so
        return f"{WARM_MESSAGE} (pid {self.proc.pid if self.pool == 'solo' else ''}" in self.text()

    def dead(self) -> bool:
        return self.proc.poll() is not None


@dataclass
class Fleet:
    """The worker processes of this module, and the test side's view of the same settings.

    ``active`` consumes hot and cold; ``standby`` is warm (embedder loaded) but consumes only an
    idle queue until a SIGKILL test promotes it, so no test waits for a fresh process to load.
    """

    tmp: Path
    settings: Settings
    env: dict[str, str]
    hot: HotState
    store: MemoryStore
    broker: redis.Redis
    dispatcher: CeleryDispatcher
    active: Worker | None = None
    standby: Worker | None = None
    starts: int = 0
    agents: list[str] = field(default_factory=list)
    # RabbitMQ shows no unacknowledged messages to a client: for it, what a worker has in hand is
    # an eviction this process published whose delivery a worker counted and whose batch is pending.
    amqp: bool = False
    published: dict[str, tuple[str, int]] = field(default_factory=dict)  # task id -> (agent, batch)

    def spawn(
        self, queues: str, pool: str = "solo", *, concurrency: int = 1, env: Mapping[str, str] | None = None
    ) -> Worker:
        self.starts += 1
        name = f"vcmtest{self.starts}-{os.getpid()}@{socket.gethostname()}"
        log = self.tmp / f"worker-{self.starts}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [CELERY, "-A", "vcm.workers.app", "worker", "-P", pool, "-c", str(concurrency), "-Q", queues,
                 "--loglevel=WARNING", "-n", name, "--without-mingle", "--without-gossip"],
                cwd=ROOT, env=self.env | dict(env or {}), stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        return Worker(proc, name, log, pool)

    def wait_warm(self, worker: Worker) -> None:
        wait_until(lambda: worker.warm() or worker.dead(), 120, f"worker warm (log: {worker.log})")
        assert not worker.dead(), f"the worker exited:\n{worker.text()[-3000:]}"

    def ensure(self, standby: bool = False) -> Worker:
        """A warm active worker (and a standby on its way, if asked)."""
        if self.active is None or self.active.dead():
            self.active = self.spawn("hot,cold,maintenance")
        if standby and (self.standby is None or self.standby.dead()):
            self.standby = self.spawn("vcm-idle")
        self.wait_warm(self.active)
        return self.active

    def fail_over(self, respawn: bool) -> list[str]:
        """SIGKILL the active worker; the warm standby takes over its queues; a new standby starts
        if ``respawn``. Returns the messages the killed worker left unacknowledged."""
        assert self.active is not None and self.standby is not None
        os.kill(self.active.proc.pid, signal.SIGKILL)
        self.active.proc.wait(10)
        left = self.unacked()
        self.wait_warm(self.standby)
        app = self.dispatcher.app
        for queue in ("hot", "cold", "maintenance"):
            replies = app.control.add_consumer(queue, destination=[self.standby.name], reply=True, timeout=10)
            assert replies, f"the standby did not take queue {queue}"
        self.active, self.standby = self.standby, self.spawn("vcm-idle") if respawn else None
        return left

    def stop(self) -> None:
        for worker in (self.active, self.standby):
            if worker is not None and not worker.dead():
                worker.proc.terminate()
                try:
                    worker.proc.wait(5)
                except subprocess.TimeoutExpired:
                    worker.proc.kill()
                    worker.proc.wait(10)

    def log_text(self) -> str:
        return "".join(w.text() for w in (self.active, self.standby) if w is not None)

    def traffic(self, prefix: str) -> Traffic:
        agent = f"{prefix}-{uuid.uuid4().hex[:10]}"
        create_agent(self.hot, self.store, agent, model=MODEL, system_prompt="You are a careful assistant.")
        self.agents.append(agent)
        return Traffic(self.hot, self.dispatcher, agent)

    def unacked(self) -> list[str]:
        """Messages delivered to a worker and not yet acknowledged (raw JSON, headers readable).

        On RabbitMQ: the evictions a worker started (counted in the delivery log) and has not
        finished, as ``<task id> <agent> <batch>`` lines."""
        if not self.amqp:
            return list(self.broker.hgetall(f"{self.settings.worker.broker_prefix}unacked").values())
        return [
            f"{task_id} {agent} {batch} {names.EVICT}"
            for task_id, (agent, batch) in list(self.published.items())
            if self.deliveries(task_id) and batch in self.hot.pending_batches(agent)
        ]

    def deliveries(self, task_id: str, attempt: int = 0) -> int:
        return int(self.broker.get(f"{self.settings.worker.broker_prefix}{DELIVERIES}{task_id}:{attempt}") or 0)

    def drain(self, t: Traffic, timeout_s: float = 90) -> None:
        def done() -> bool:
            return settled(self.hot, self.store, t.agent_id, t.message_ids) and not any(
                t.agent_id in raw for raw in self.unacked()
            )

        wait_until(done, timeout_s, f"{t.agent_id} drained (logs in {self.tmp})")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Fleet]:
    yield from _fleet(tmp_path_factory, redis_url, redis_url)


@pytest.fixture(scope="module")
def rabbit_fleet(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Fleet]:
    try:
        with Connection(AMQP_URL, connect_timeout=2) as conn:  # type: ignore[no-untyped-call]
            conn.ensure_connection(max_retries=1)
    except Exception as exc:  # any transport error means: no RabbitMQ to test against
        pytest.skip(f"no RabbitMQ answers at {AMQP_URL} ({exc!r}); RabbitMQ leg skipped")
    yield from _fleet(tmp_path_factory, AMQP_URL, redis_url)


def _fleet(tmp_path_factory: pytest.TempPathFactory, broker_url: str, hot_url: str) -> Iterator[Fleet]:
    # On RabbitMQ the delivery counts live in the hot state's Redis (vcm.workers.build.delivery_log).
    amqp = broker_url.startswith("amqp")
    broker = _redis_or_skip(hot_url if amqp else broker_url)
    hot_client = _redis_or_skip(hot_url)
    tmp = tmp_path_factory.mktemp("fleet")
    prefix = f"vcmtest-{uuid.uuid4().hex[:8]}:"
    config = tmp / "vcm.toml"
    config.write_text(CONFIG.format(broker="memory://", hot=hot_url, store=tmp / "vcm.db", model=MODEL, prefix=prefix))
    # The broker URL goes in the environment: it may carry a password, which a config file must not.
    own = {"VCM_CONFIG": str(config), "VCM_BROKER_URL": broker_url}
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env |= own | {FAULTS_ENV: json.dumps(RULES), "PYTHONPATH": str(ROOT)}
    settings = load_settings(environ=own)
    store = open_store(settings.store_url)
    app = create_app(settings)
    fleet = Fleet(tmp, settings, env, HotState(hot_client, settings), store, broker, CeleryDispatcher(app), amqp=amqp)

    def record(sender: str | None = None, headers: Mapping[str, object] | None = None, **_: object) -> None:
        if sender == names.EVICT and headers is not None:
            agent, batch = json.loads(str(headers["argsrepr"]).replace("'", '"'))
            fleet.published[str(headers["id"])] = (agent, int(batch))

    if amqp:
        # RabbitMQ queues outlive a run (classic, durable): start from empty ones.
        app.control.purge()
        after_task_publish.connect(record, weak=False)
    try:
        fleet.ensure(standby=True)
        yield fleet
    finally:
        after_task_publish.disconnect(record)
        fleet.stop()
        if amqp:
            app.control.purge()
        store.close()
        for key in broker.scan_iter(match=f"{prefix}*"):
            broker.delete(key)
        for agent in fleet.agents:
            for key in hot_client.scan_iter(match=f"vcm:{{{agent}}}:*"):
                hot_client.delete(key)
            hot_client.srem("vcm:agents", agent)


def _wait_for(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("scenario", sorted(KILL_POINTS))
def test_sigkill_mid_task_loses_and_duplicates_nothing(fleet: Fleet, scenario: str) -> None:
    _sigkill_mid_task(fleet, scenario, respawn=scenario != max(KILL_POINTS))


# One kill point on RabbitMQ: what the broker adds (a dead consumer's message handed back at once)
# is the same at every point, and the other points test the store and the replay path, which the
# Redis leg covers; each scenario costs a drain with the real model (the suite's time budget).
@pytest.mark.parametrize("scenario", ["k1"])
def test_sigkill_mid_task_on_rabbitmq_loses_and_duplicates_nothing(rabbit_fleet: Fleet, scenario: str) -> None:
    left = _sigkill_mid_task(rabbit_fleet, scenario, respawn=False)  # the module's only kill on RabbitMQ
    # RabbitMQ handed the killed worker's eviction to the standby at once: delivered twice, and
    # (checked above) committed and finished once.
    assert any(rabbit_fleet.deliveries(line.split()[0]) >= 2 for line in left), left


def _sigkill_mid_task(fleet: Fleet, scenario: str, *, respawn: bool) -> list[str]:
    fleet.ensure(standby=True)
    t = fleet.traffic(scenario)
    t.send(50)
    agent = t.agent_id

    if KILL_POINTS[scenario] == "evict.after_commit":
        # committed in the store, not yet finished in Redis: the replay path must finish it
        def in_flight() -> bool:
            return bool(set(fleet.store.committed_batches(agent)) & set(fleet.hot.pending_batches(agent)))
    else:

        def in_flight() -> bool:
            return any(agent in raw and names.EVICT in raw for raw in fleet.unacked())

    assert _wait_for(in_flight, 30), "no eviction of this agent was ever in flight"
    left = fleet.fail_over(respawn=respawn)
    assert any(agent in raw for raw in left), "the kill should leave an unacknowledged task"
    t.send(20)  # the conversation goes on while the lost task waits for its visibility timeout
    fleet.drain(t)
    assert_exactly_once(fleet.hot, fleet.store, agent, t.message_ids)
    return left


def test_failures_at_every_step_are_retried_by_the_worker(fleet: Fleet) -> None:
    fleet.ensure()
    runs = [fleet.traffic(f"f{i}") for i in range(len(POINTS))]
    for t in runs:
        t.send(30)
    for t in runs:
        fleet.drain(t)
        assert_exactly_once(fleet.hot, fleet.store, t.agent_id, t.message_ids)
        assert fleet.store.query_events(t.agent_id, ["dead_letter"]).items == []
    # The spool tasks embedded the messages with the real model, between their neighbouring turns
    # ([recall] defaults).
    t = runs[0]
    after = load_settings(environ={}).recall.context_after  # the newest wait for their followers
    window = [m.id for m in fleet.hot.snapshot(t.agent_id).fifo if m.content.strip()][: -after or None]
    probe = [1.0] * 384  # any direction: vector mode returns every message that has a vector

    def embedded() -> set[str]:
        page = fleet.store.search_recall_hybrid(t.agent_id, "x", probe, mode="vector", limit=1000)
        return {h.message.message_id for h in page.items}

    # (This 512-token window evicts a message within a few turns, often before the spools of
    # its followers ran: those get no vector. With real windows a message outlives them.)
    wait_until(lambda: set(window) <= embedded(), 30, "the window's messages embedded")
    assert window and set(embedded()) <= set(all_message_ids(fleet.hot, t.agent_id))
    log = fleet.log_text()
    for i, t in enumerate(runs):
        pattern = rf"tasks\.evict_batch\('{t.agent_id}', \d+\) failed .*injected failure at {POINTS[i]}"
        retried = re.findall(pattern, log)
        assert len(retried) == 2, f"{POINTS[i]}: expected two failed deliveries in the worker log"


def test_exhausted_retries_dead_letter_and_keep_the_batch(fleet: Fleet) -> None:
    fleet.ensure()
    t = fleet.traffic("doomed")
    t.send(30)
    wait_until(lambda: bool(fleet.store.query_events(t.agent_id, ["dead_letter"]).items), 60, "dead-lettered")
    [event] = fleet.store.query_events(t.agent_id, ["dead_letter"]).items
    assert event.payload["batch_id"] == 1 and event.payload["attempts"] == fleet.settings.worker.max_retries + 1
    assert fleet.hot.pending_batches(t.agent_id)[0] == 1
    assert fleet.store.committed_batches(t.agent_id) == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_flower_lists_the_worker(fleet: Fleet) -> None:
    fleet.ensure()
    port = _free_port()
    log = fleet.tmp / "flower.log"
    env = fleet.env | {"FLOWER_UNAUTHENTICATED_API": "true"}
    with log.open("wb") as out:
        flower = subprocess.Popen(
            [CELERY, "-A", "vcm.workers.app", "flower", f"--port={port}", "--address=127.0.0.1"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    worker = fleet.ensure().name
    online = f'flower_worker_online{{worker="{worker}"}} 1.0'
    try:

        def listed() -> bool:
            try:
                return online in _get(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                return flower.poll() is not None  # stop waiting if Flower died

        wait_until(listed, 60, f"Flower reports {worker} online (log: {log})")
        assert flower.poll() is None, log.read_text()
        workers = json.loads(_get(f"http://127.0.0.1:{port}/api/workers?refresh=1"))
        assert worker in workers
    finally:
        flower.terminate()
        flower.wait(20)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_pool_child_killed_mid_task_is_retried_by_its_parent(fleet: Fleet) -> None:
    """Prefork: the parent survives its child's SIGKILL and sends the task again as a retry
    (task_retry_on_worker_lost), without waiting for the visibility timeout."""
    # Roomy time limits: a busy test machine must not make the pool kill its child first.
    limits = {"VCM_WORKER__TASK_TIME_LIMIT_S": "20", "VCM_WORKER__TASK_SOFT_TIME_LIMIT_S": "19"}
    limits["VCM_WORKER__VISIBILITY_TIMEOUT_S"] = "30"
    # A broker prefix of its own: the fleet's workers restore unacked messages older than their
    # 5 s visibility timeout, and would redeliver this retry while it loads the embedder.
    own = fleet.settings.worker.broker_prefix + "child:"
    limits["VCM_WORKER__BROKER_PREFIX"] = own
    worker_settings = fleet.settings.worker.model_copy(update={"broker_prefix": own})
    app = create_app(fleet.settings.model_copy(update={"worker": worker_settings}))
    worker = fleet.spawn("vcm-child", pool="prefork", env={"VCM_WORKER__PRELOAD_EMBEDDER": "false", **limits})

    def unacked() -> list[str]:
        return list(fleet.broker.hgetall(f"{own}unacked").values())

    try:
        fleet.wait_warm(worker)  # the child reports warm once its dependencies are built
        [child] = _children(worker.proc.pid)
        t = fleet.traffic("child")  # this agent's spools sleep 1.5 s before writing
        ids = [fleet.hot.append(t.agent_id, "user", f"note {i}").message_id for i in range(3)]
        result = app.send_task(names.SPOOL, args=[t.agent_id, ids], queue="vcm-child")
        prefix = f"{own}{DELIVERIES}{result.id}"
        wait_until(lambda: fleet.broker.exists(f"{prefix}:0") == 1, 30, "the child started the task")
        os.kill(child, signal.SIGKILL)
        wait_until(lambda: fleet.broker.exists(f"{prefix}:1") == 1 or worker.dead(), 30, f"retried ({worker.log})")
        assert not worker.dead()
        wait_until(lambda: not any(result.id in raw for raw in unacked()), 30, f"retry done ({worker.log})")
        # one delivery of attempt 0 (the killed one), then attempt 1: a retry, not a redelivery
        counts = [fleet.broker.get(f"{prefix}:{n}") for n in (0, 1)]
        assert counts == ["1", "1"], worker.text()[-3000:]
        assert [m.message_id for m in fleet.store.get_messages(t.agent_id, ids)] == ids
        assert child not in _children(worker.proc.pid)
    finally:
        worker.proc.terminate()
        worker.proc.wait(20)


def test_prefork_children_count_into_the_parents_metrics_endpoint(fleet: Fleet) -> None:
    """Two prefork children dead-letter evictions; the parent, which runs no task, serves their
    sum on [worker] metrics_port through PROMETHEUS_MULTIPROC_DIR."""
    port = _free_port()
    directory = fleet.tmp / "prometheus"
    directory.mkdir()  # as compose/start-worker does: prometheus-client needs it at import
    worker = fleet.spawn(
        "vcm-metrics",
        pool="prefork",
        concurrency=2,
        env={
            "PROMETHEUS_MULTIPROC_DIR": str(directory),
            "VCM_WORKER__METRICS_PORT": str(port),
            "VCM_WORKER__PRELOAD_EMBEDDER": "false",
        },
    )
    try:
        fleet.wait_warm(worker)
        runs = [fleet.traffic("slowdoom") for _ in range(4)]
        for t in runs:
            for i in range(3):  # (two pay for the placeholder an eviction leaves)
                fleet.hot.append(t.agent_id, "user", f"note {i} about the quarterly budget review")
            assert fleet.hot.evict_oldest(t.agent_id, 2)[1] is not None  # batch 1, not dispatched
            fleet.dispatcher.app.send_task(names.EVICT, args=[t.agent_id, 1], queue="vcm-metrics")

        def dead_lettered() -> bool:
            return all(fleet.store.query_events(t.agent_id, ["dead_letter"]).items for t in runs)

        wait_until(dead_lettered, 60, f"every eviction dead-lettered ({worker.log})")

        def counted() -> float:
            families = text_string_to_metric_families(_get(f"http://127.0.0.1:{port}/metrics"))
            return sum(
                s.value
                for f in families
                for s in f.samples
                if s.name == "vcm_dead_letters_total" and s.labels == {"task": names.EVICT}
            )

        wait_until(lambda: counted() == len(runs), 10, "the parent's endpoint reports every dead letter")
        per_child = _per_process(directory, "vcm_dead_letters_total")
        assert sum(per_child.values()) == len(runs)
        assert worker.proc.pid not in per_child  # the parent ran nothing: the counts are the children's
        assert len(per_child) == 2, f"expected both children to dead-letter some: {per_child}"
    finally:
        worker.proc.terminate()
        worker.proc.wait(20)


def _per_process(directory: Path, sample: str) -> dict[int, float]:
    """Each process's own counts of ``sample``, read from its counter file alone."""
    out: dict[int, float] = {}
    for path in directory.glob("counter_*.db"):
        pid = int(path.stem.removeprefix("counter_"))
        alone = directory.parent / f"alone-{pid}"
        alone.mkdir(exist_ok=True)
        shutil.copy(path, alone / path.name)
        registry = CollectorRegistry()
        prom_multiprocess.MultiProcessCollector(registry, path=str(alone))  # type: ignore[no-untyped-call]
        total = sum(s.value for f in registry.collect() for s in f.samples if s.name == sample)
        if total:
            out[pid] = total
    return out
