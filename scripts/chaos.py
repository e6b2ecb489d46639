#!/usr/bin/env python3
"""Chaos run (not a test by itself; ``tests/test_chaos.py`` drives a short one): the production
process layout on loopback, under concurrent keyed appends, while workers, API processes and
Redis are SIGKILLed and restarted; then a drain and an exactly-once audit of what was acknowledged.

    .venv/bin/python scripts/chaos.py [--duration 60] [--json report.json] [--agents 3]
        [--appenders 3] [--apis 2] [--workers 2] [--worker-kills 3] [--api-kills 3]
        [--redis-crashes 2] [--no-vectors] [--seed 1] [--keep]

Everything is private to the run, in a temporary directory (removed after a passing run unless
``--keep``; ``--workdir`` names one): a ``redis-server`` on a free port (AOF, ``appendfsync
everysec``; hot state in db 0, the Celery broker in db 1), ``vcm serve`` API processes over one
SQLite store file, ``celery worker`` processes on every queue and one ``celery beat`` (its
sweeper re-drives batches and spools messages whose dispatch died with a killed process). The
Redis on 6379 is never touched. Each child runs in its own process group (and dies with this
script, through ``setpriv --pdeathsig`` where available); every group is SIGKILLed on exit,
Ctrl-C, SIGTERM and exceptions included.

Load: appender threads (``--appenders`` per agent) POST messages, each with its own
Idempotency-Key, and retry that key on any API after any failure (refused, reset, timeout, 5xx)
until a 2xx acknowledges it. ``--twins`` of the keys are sent twice at once, to both APIs. Faults
(SIGKILL a worker and start a new one; SIGKILL an API and restart it on its port; SIGKILL Redis
and restart it from its AOF) are interleaved over 15-80 % of the load phase.

Phases and their bounds: start-up (``--startup-timeout``), load with faults (``--duration``),
settling the last unacknowledged appends (``--settle``), the drain of the cold path
(``--drain-timeout``: no pending batch, every numbered message stored), then the checks:

* lost: an acknowledged (message id, content) found neither in the agent's FIFO (``GET context``)
  nor under that id with that content in the store;
* duplicated: a run message's content stored (or held in the FIFO) under two message ids, or one
  message id listed twice by the store; twin sends that got two messages, or two non-replayed
  replies, are idempotency violations;
* audit rows: every committed eviction batch has exactly one ``flush`` and one ``evict`` row in
  ``memory_events``; missing and duplicated rows are counted per kind, and each batch missing its
  ``flush`` row is classified by how it was begun, as far as the acknowledgements tell.

Exit status 0 only when the cold path drained and nothing was lost, duplicated or missing.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import redis

from vcm.client import VcmClient
from vcm.errors import VcmError
from vcm.hotpath.state import HotState
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.store.types import MemoryEvent
from vcm.workers import routes
from vcm.workers.signals import WARM_MESSAGE

BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
HOT_DB, BROKER_DB = 0, 1
# Content marker of this run's messages: notices vcm appends itself never carry it.
MARK = "chaos"

# Options echoed in the report.
CONFIG_KEYS = ("duration", "agents", "appenders", "apis", "workers", "pool", "model", "seed", "pause", "no_vectors")

SUBJECTS = ["Alice", "Bob", "Carmen", "Dmitri", "Esther", "Farid", "Greta", "Hiro"]
VERBS = ["moved to", "visited", "wrote about", "asked about", "planned a trip to", "remembered"]
PLACES = ["Porto", "Lyon", "Kyoto", "Recife", "Tallinn", "Accra", "Hobart", "Quito", "Bergen"]
THINGS = ["train ticket", "guest house", "bicycle", "museum pass", "cooking class", "ferry"]


# --- child processes ------------------------------------------------------------------------------
@dataclass
class Child:
    """One managed process slot (``redis``, ``api-0``, ``worker-1``, ``beat``); restarts reuse it."""

    name: str
    argv: list[str]
    env: dict[str, str]
    logdir: Path
    proc: subprocess.Popen[bytes] | None = None
    generation: int = 0

    @property
    def log(self) -> Path:
        # One log per generation, so "warm" and errors are read for the process that runs now.
        return self.logdir / f"{self.name}.{self.generation}.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Supervisor:
    """Starts children in their own process groups and kills whole groups.

    Every group ever started is remembered: a worker's pool children outlive a SIGKILLed parent,
    and the clean-up must reach them too. All starts happen on the main thread, because the
    parent-death signal fires when the *thread* that forked the child exits."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.groups: set[int] = set()
        self.lock = threading.Lock()
        setpriv = shutil.which("setpriv")
        self.prefix = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []

    def start(self, child: Child) -> None:
        assert threading.current_thread() is threading.main_thread(), "children are started on the main thread"
        child.generation += 1
        with child.log.open("wb") as out:
            child.proc = subprocess.Popen(
                [*self.prefix, *child.argv],
                cwd=self.workdir,
                env=child.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        with self.lock:
            self.groups.add(child.proc.pid)

    def kill(self, child: Child) -> None:
        """SIGKILL the child's whole process group and reap it."""
        if child.proc is None:
            return
        _killpg(child.proc.pid)
        # Unkillable for now (D state): the final sweep kills its group again.
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(10)

    def kill_all(self) -> None:
        with self.lock:
            groups = sorted(self.groups)
        for pgid in groups:
            _killpg(pgid)


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the whole group is gone already
        os.killpg(pgid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting until {what}")
        time.sleep(interval_s)


# --- records --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ack:
    agent: str
    key: str
    content: str
    message_id: str
    seq: int
    attempts: int
    replayed: bool
    batch: int | None  # the eviction batch this append's reply says it began
    wait_s: float  # first attempt to acknowledgement


@dataclass
class Tally:
    """What the appenders saw; shared by their threads."""

    acks: list[Ack] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    abandoned: list[dict[str, str]] = field(default_factory=list)
    twin_sends: int = 0
    idempotency_violations: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, kind: str) -> None:
        with self.lock:
            self.errors[kind] += 1

    def twins(self, a: Ack | None, b: Ack | None) -> None:
        """Two concurrent sends of one key: one message, written once."""
        with self.lock:
            self.twin_sends += 1
            if a is None or b is None:
                return
            if a.message_id != b.message_id or not (a.replayed or b.replayed):
                self.idempotency_violations.append(
                    {"key": a.key, "ids": [a.message_id, b.message_id], "replayed": [a.replayed, b.replayed]}
                )


@dataclass(frozen=True)
class Fault:
    at_s: float  # since the load started
    kind: str  # worker_kill | api_kill | redis_crash
    target: str
    detail: str = ""


@dataclass(frozen=True)
class Agent:
    agent_id: str
    token: str


# --- the appenders --------------------------------------------------------------------------------
def content_for(key: str, n: int, rng: random.Random) -> str:
    """A unique, sentence-shaped message (~40 tokens), so the extractive summariser has real
    sentences to pick from and evictions come every few dozen appends in a 2k window."""
    s1, s2 = rng.sample(SUBJECTS, 2)
    p1, p2 = rng.sample(PLACES, 2)
    return (
        f"[{MARK} {key}] {s1} {rng.choice(VERBS)} {p1} on day {n} and said the {rng.choice(THINGS)} "
        f"cost {rng.randint(5, 400)} euros. {s2} agreed, and asked about {p2} for the next trip."
    )


def retryable(exc: VcmError) -> bool:
    # 5xx: the API or Redis is down or restarting; 429: back-pressure; TOKEN_BUDGET_EXCEEDED: a
    # refusal that frees up once the cold path installs its summaries (pending batches share one
    # placeholder, so it is rare; retrying it keeps the exactly-once audit meaningful).
    return exc.status >= 500 or exc.status == 429 or str(exc.code) == "TOKEN_BUDGET_EXCEEDED"


class Appender(threading.Thread):
    """Appends keyed messages to one agent until told to stop; each key is retried, on any API,
    until a 2xx acknowledges it (or the settle deadline passes after the stop).

    A share of the keys (``twins``) is sent twice at once, to both APIs, as a client does that
    retries on a timeout while its first request still runs: both replies must name the same
    message, and at most one may say it was not a replay."""

    def __init__(
        self,
        agent: Agent,
        index: int,
        urls: Sequence[str],
        tally: Tally,
        stop: threading.Event,
        give_up_at: list[float],
        *,
        pause_s: float,
        timeout_s: float,
        twins: float,
        seed: int,
    ) -> None:
        super().__init__(name=f"append-{agent.agent_id}-{index}", daemon=True)
        self.agent = agent
        self.index = index
        self.urls = list(urls)
        self.tally = tally
        self.stop = stop
        self.give_up_at = give_up_at  # [monotonic deadline], set by the main thread at the stop
        self.pause_s = pause_s
        self.timeout_s = timeout_s
        self.twins = twins
        self.rng = random.Random(seed)

    def clients(self) -> list[VcmClient]:
        return [VcmClient(url, self.agent.token, timeout=self.timeout_s) for url in self.urls]

    def run(self) -> None:
        clients = self.clients()
        try:
            n = 0
            while not self.stop.is_set():
                n += 1
                key = f"{self.agent.agent_id}.{self.index}.{n}"
                role = "user" if n % 2 else "assistant"
                self.send(clients, key, role, content_for(key, n, self.rng))
                time.sleep(self.pause_s * self.rng.uniform(0.5, 1.5))
        finally:
            for c in clients:
                c.close()

    def send(self, clients: Sequence[VcmClient], key: str, role: str, content: str) -> None:
        api = self.rng.randrange(len(clients))
        twin: list[Ack | None] = [None]
        helper: threading.Thread | None = None
        if self.rng.random() < self.twins:
            rng = random.Random(self.rng.random())

            def other() -> None:
                # Its own clients: the twin must not wait for the first request's connection.
                own = self.clients()
                try:
                    twin[0] = self.until_acked(own, key, role, content, (api + 1) % len(own), rng)
                finally:
                    for c in own:
                        c.close()

            helper = threading.Thread(target=other, name=f"{self.name}-twin", daemon=True)
            helper.start()
        ack = self.until_acked(clients, key, role, content, api, self.rng)
        if helper is not None:
            helper.join()
            self.tally.twins(ack, twin[0])
            ack = ack or twin[0]
        if ack is not None:
            with self.tally.lock:
                self.tally.acks.append(ack)

    def until_acked(
        self, clients: Sequence[VcmClient], key: str, role: str, content: str, api: int, rng: random.Random
    ) -> Ack | None:
        """The acknowledgement of this key, or None when it was refused or abandoned (recorded)."""
        first = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                body = clients[api].append(self.agent.agent_id, role, content, idempotency_key=key)
            except httpx.TransportError as exc:  # refused, reset mid-request, timed out
                self.tally.error(f"transport:{type(exc).__name__}")
            except VcmError as exc:
                if not retryable(exc):
                    with self.tally.lock:
                        self.tally.rejected.append(
                            {"agent": self.agent.agent_id, "key": key, "status": exc.status, "code": str(exc.code)}
                        )
                    return None
                self.tally.error(f"http:{exc.status}:{exc.code}")
            else:
                batch = body.get("batch")
                return Ack(
                    agent=self.agent.agent_id,
                    key=key,
                    content=content,
                    message_id=str(body["message_id"]),
                    seq=int(body["seq"]),
                    attempts=attempt,
                    replayed=bool(body.get("replayed")),
                    batch=int(batch["id"]) if isinstance(batch, dict) else None,
                    wait_s=time.monotonic() - first,
                )
            if self.stop.is_set() and time.monotonic() > self.give_up_at[0]:
                with self.tally.lock:
                    self.tally.abandoned.append({"agent": self.agent.agent_id, "key": key})
                return None
            # Another API next: the one that failed may be the one being restarted.
            api = (api + 1) % len(clients)
            time.sleep(min(0.5, 0.025 * 2 ** min(attempt, 5)) * rng.uniform(0.5, 1.0))


# --- the run --------------------------------------------------------------------------------------
class ChaosRun:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.run_id = secrets.token_hex(3)
        self.workdir = Path(args.workdir or tempfile.mkdtemp(prefix="vcm-chaos-")).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logdir = self.workdir / "logs"
        self.logdir.mkdir(exist_ok=True)
        (self.workdir / "redis").mkdir(exist_ok=True)
        self.sup = Supervisor(self.workdir)
        self.redis_port = free_port()
        self.api_ports = [free_port() for _ in range(args.apis)]
        self.admin_token = "chaos-admin-" + secrets.token_urlsafe(24)
        self.env = self._env()
        self.settings: Settings = load_settings(environ=self.env)
        self.redis_child = Child("redis", self._redis_argv(), self.env, self.logdir)
        vcm = str(BIN / "vcm")
        self.apis = [
            Child(f"api-{i}", [vcm, "serve", "--host", HOST, "--port", str(p)], self.env, self.logdir)
            for i, p in enumerate(self.api_ports)
        ]
        self.workers = [Child(f"worker-{i}", [], self.env, self.logdir) for i in range(args.workers)]
        celery = str(BIN / "celery")
        beat_argv = [celery, "-A", "vcm.workers.app", "beat", "-s", str(self.workdir / "beat-schedule")]
        self.beat = Child("beat", [*beat_argv, "--loglevel=WARNING"], self.env, self.logdir)
        self.tally = Tally()
        self.faults: list[Fault] = []
        self.unexpected: list[dict[str, Any]] = []
        self.not_ready: dict[str, str] = {}
        self.agents: list[Agent] = []
        self.t0 = 0.0
        self.load_s = 0.0

    # --- settings and command lines -----------------------------------------------------------
    def _env(self) -> dict[str, str]:
        a = self.args
        base = f"redis://{HOST}:{self.redis_port}"
        # Nothing of the caller's vcm settings (a VCM_CONFIG, a store URL) may leak into the run.
        env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_") and k != "PROMETHEUS_MULTIPROC_DIR"}
        env |= {
            "VCM_REDIS_URL": f"{base}/{HOT_DB}",
            "VCM_BROKER_URL": f"{base}/{BROKER_DB}",
            "VCM_STORE_URL": f"sqlite:///{self.workdir / 'vcm.db'}",
            "VCM_API__ADMIN_TOKEN": self.admin_token,
            "VCM_LOG_LEVEL": "WARNING",
            # Short limits so that a killed worker's task comes back within the run: the
            # visibility timeout must exceed the hard limit plus the longest retry countdown.
            "VCM_WORKER__TASK_TIME_LIMIT_S": str(a.task_time_limit),
            "VCM_WORKER__TASK_SOFT_TIME_LIMIT_S": str(a.task_time_limit - 1),
            "VCM_WORKER__RETRY_BACKOFF_S": "0.2",
            "VCM_WORKER__RETRY_BACKOFF_MAX_S": "1",
            "VCM_WORKER__VISIBILITY_TIMEOUT_S": str(a.task_time_limit + 2),
            "VCM_WORKER__RESTORE_INTERVAL_S": "1",
            "VCM_WORKER__SOFT_SHUTDOWN_TIMEOUT_S": "0",
            # The sweeper heals what died with a process (a batch dispatch, a spool) within the run.
            "VCM_MAINTENANCE__SWEEP_INTERVAL_S": str(a.sweep_interval),
            "VCM_MAINTENANCE__SWEEP_GRACE_S": str(a.sweep_interval),
            "VCM_MAINTENANCE__REDRIVE_DEAD_LETTERS_AFTER_S": str(a.sweep_interval),
            # The embedding model ships with the package; never reach the network for it.
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
        if a.no_vectors:
            # Spooling then only writes rows; evictions still embed (summary and drift).
            env["VCM_RECALL__VECTORS"] = "false"
        return env

    def _redis_argv(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("chaos: redis-server is not on PATH")
        return [
            binary, "--port", str(self.redis_port), "--bind", HOST, "--dir", str(self.workdir / "redis"),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--maxmemory-policy", "noeviction", "--daemonize", "no",
        ]  # fmt: skip

    def _worker_argv(self, child: Child) -> list[str]:
        # A fresh node name per generation: a restarted worker is a new member of the cluster.
        name = f"chaos-{self.run_id}-{child.name}-g{child.generation + 1}@{socket.gethostname()}"
        return [
            str(BIN / "celery"), "-A", "vcm.workers.app", "worker", "-P", self.args.pool,
            "-c", "1" if self.args.pool == "solo" else "2", "-Q", ",".join(routes.QUEUES), "-n", name,
            "--loglevel=INFO", "--without-mingle", "--without-gossip",
        ]  # fmt: skip

    # --- process control ------------------------------------------------------------------------
    def redis_client(self, db: int = HOT_DB) -> redis.Redis:
        return redis.Redis(host=HOST, port=self.redis_port, db=db, decode_responses=True, socket_timeout=5)

    def redis_up(self) -> bool:
        try:
            return bool(self.redis_client().ping())
        except redis.exceptions.RedisError:  # refused, or still loading its AOF
            return False

    def api_up(self, port: int) -> bool:
        try:
            return httpx.get(f"http://{HOST}:{port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def start_worker(self, child: Child) -> None:
        child.argv = self._worker_argv(child)
        self.sup.start(child)

    def worker_ready(self, child: Child, warm: bool) -> bool:
        """Consuming its queues (celery's "ready." line), and with ``warm`` also done loading the
        embedding model; a task that arrives before that simply waits for the model."""
        text = child.text()
        return child.alive() and (WARM_MESSAGE in text if warm else " ready." in text)

    def start_all(self) -> None:
        self.sup.start(self.redis_child)
        wait_until(self.redis_up, 30, f"redis-server answers (log: {self.redis_child.log})")
        for api in self.apis:
            self.sup.start(api)
        for w in self.workers:
            self.start_worker(w)
        self.sup.start(self.beat)
        self.wait_ready(self.args.startup_timeout, warm=self.args.wait_warm)

    def wait_ready(self, timeout_s: float, *, warm: bool, heal: bool = False) -> None:
        """Wait for the APIs and workers; a child that exits meanwhile stops a start-up, and is
        restarted (and recorded) with ``heal``."""

        def ready() -> bool:
            if heal:
                self.supervise()
            for child in [*self.apis, *self.workers, self.beat]:
                if not child.alive():
                    raise RuntimeError(f"{child.name} exited during start-up:\n{child.text()[-3000:]}")
            apis = all(self.api_up(p) for p in self.api_ports)
            return apis and all(self.worker_ready(w, warm) for w in self.workers)

        wait_until(ready, timeout_s, f"APIs healthy and workers ready (logs in {self.logdir})", 0.5)

    def readiness(self) -> dict[str, str]:
        """Each API's and worker's state, for a report whose processes did not all come back."""
        out = {f"api-{i}": "healthy" if self.api_up(p) else "unhealthy" for i, p in enumerate(self.api_ports)}
        for w in self.workers:
            out[w.name] = "ready" if self.worker_ready(w, False) else ("starting" if w.alive() else "dead")
        return out

    def supervise(self) -> None:
        """Restart any child that died without being killed by a fault: that is a finding too."""
        for child in [self.redis_child, *self.apis, *self.workers, self.beat]:
            if child.proc is not None and not child.alive():
                self.unexpected.append(
                    {
                        "process": child.name,
                        "generation": child.generation,
                        "returncode": child.proc.returncode,
                        "at_s": round(time.monotonic() - self.t0, 1),
                        "log_tail": child.text()[-1500:],
                    }
                )
                if child.name.startswith("worker"):
                    self.start_worker(child)
                else:
                    self.sup.start(child)
                if child is self.redis_child:
                    wait_until(self.redis_up, 30, "redis-server answers again")

    def inject(self, kind: str) -> None:
        at = round(time.monotonic() - self.t0, 2)
        if kind == "worker_kill":
            child = self.rng.choice(self.workers)
            pid = child.proc.pid if child.proc else -1
            self.sup.kill(child)
            self.start_worker(child)
            self.faults.append(Fault(at, kind, child.name, f"pid {pid}"))
        elif kind == "api_kill":
            child = self.rng.choice(self.apis)
            pid = child.proc.pid if child.proc else -1
            self.sup.kill(child)
            self.sup.start(child)  # same port: clients keep their URLs
            self.faults.append(Fault(at, kind, child.name, f"pid {pid}"))
        else:
            pid = self.redis_child.proc.pid if self.redis_child.proc else -1
            self.sup.kill(self.redis_child)
            time.sleep(self.args.redis_down)
            self.sup.start(self.redis_child)  # same port and --dir: it loads its AOF
            started = time.monotonic()
            wait_until(self.redis_up, 60, f"redis-server reloaded its AOF (log: {self.redis_child.log})")
            self.faults.append(Fault(at, kind, "redis", f"pid {pid}; back after {time.monotonic() - started:.2f} s"))

    def schedule(self) -> list[tuple[float, str]]:
        """Faults interleaved by kind, evenly spread over 15-80 % of the load phase (the rest
        lets the last restarted processes come back while the load still runs)."""
        a = self.args
        counts = {"worker_kill": a.worker_kills, "api_kill": a.api_kills, "redis_crash": a.redis_crashes}
        kinds: list[str] = []
        while any(counts.values()):
            for kind in ("worker_kill", "api_kill", "redis_crash"):
                if counts[kind]:
                    kinds.append(kind)
                    counts[kind] -= 1
        if not kinds:
            return []
        start, end = 0.15 * a.duration, 0.8 * a.duration
        step = (end - start) / (len(kinds) - 1) if len(kinds) > 1 else 0.0
        return [(start + i * step, kind) for i, kind in enumerate(kinds)]

    # --- phases -----------------------------------------------------------------------------------
    def create_agents(self) -> None:
        with VcmClient(f"http://{HOST}:{self.api_ports[0]}", self.admin_token, timeout=30) as admin:
            for i in range(self.args.agents):
                agent_id = f"chaos-{self.run_id}-a{i}"
                body = admin.create_agent(agent_id, model=self.args.model, system_prompt="You are a travel assistant.")
                self.agents.append(Agent(agent_id, str(body["token"])))

    def load(self) -> None:
        stop = threading.Event()
        give_up_at = [math.inf]
        urls = [f"http://{HOST}:{p}" for p in self.api_ports]
        threads = [
            Appender(
                agent,
                j,
                urls,
                self.tally,
                stop,
                give_up_at,
                pause_s=self.args.pause,
                timeout_s=self.args.request_timeout,
                twins=self.args.twins,
                seed=self.rng.randrange(2**32),
            )
            for agent in self.agents
            for j in range(self.args.appenders)
        ]
        plan = self.schedule()
        self.t0 = time.monotonic()
        for t in threads:
            t.start()
        end = self.t0 + self.args.duration
        while time.monotonic() < end:
            if plan and time.monotonic() - self.t0 >= plan[0][0]:
                self.inject(plan.pop(0)[1])
            self.supervise()
            time.sleep(0.1)
        self.load_s = time.monotonic() - self.t0
        # Keys in flight keep retrying (everything is up again) until acknowledged or the deadline.
        give_up_at[0] = time.monotonic() + self.args.settle
        stop.set()
        for t in threads:
            t.join(max(0.0, give_up_at[0] - time.monotonic()) + self.args.request_timeout + 1)
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            print(f"chaos: appenders still running after the settle deadline: {stuck}", file=sys.stderr)

    def drain(self, hot: HotState, store: MemoryStore) -> tuple[bool, float, dict[str, Any]]:
        """Wait until no batch is pending and every message the hot path ever numbered is stored."""
        started = time.monotonic()
        state: dict[str, Any] = {}

        def drained() -> bool:
            self.supervise()
            state.clear()
            try:
                return self._drained(hot, store, state)
            except (redis.exceptions.RedisError, VcmError) as exc:  # a store busy timeout, say
                state["error"] = repr(exc)
                return False

        try:
            wait_until(drained, self.args.drain_timeout, "the cold path drained", 1.0)
            ok = True
        except TimeoutError:
            ok = False
        return ok, time.monotonic() - started, dict(state)

    def _drained(self, hot: HotState, store: MemoryStore, state: dict[str, Any]) -> bool:
        for agent in self.agents:
            pending = hot.pending_batches(agent.agent_id)
            seq = int(hot.snapshot(agent.agent_id).meta.get("msg_seq", 0))
            ids = [f"m{i}" for i in range(1, seq + 1)]
            stored = {m.message_id for m in store.get_messages(agent.agent_id, ids)}
            unspooled = [i for i in ids if i not in stored]
            if pending or unspooled:
                state[agent.agent_id] = {"pending_batches": pending, "unspooled": len(unspooled)}
        return not state

    # --- checks -----------------------------------------------------------------------------------
    def fifo_contents(self, agent: Agent) -> list[str]:
        """The agent's FIFO as the API shows it (GET context), from whichever API answers."""
        for port in self.api_ports:
            try:
                with VcmClient(f"http://{HOST}:{port}", agent.token, timeout=30) as c:
                    ctx = c.context(agent.agent_id)
                return [str(m.get("content", "")) for m in ctx["messages"] if m.get("role") in ("user", "assistant")]
            except (httpx.HTTPError, VcmError):
                continue
        raise RuntimeError(f"no API answered GET context for {agent.agent_id}")

    def check(
        self, store: MemoryStore, fifo: dict[str, list[str]], fifo_ids: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        acks = self.tally.acks
        lost: list[dict[str, Any]] = []
        by_agent: dict[str, list[Ack]] = defaultdict(list)
        for ack in acks:
            by_agent[ack.agent].append(ack)
        duplicated: list[dict[str, Any]] = []
        audit: dict[str, Any] = {
            "committed_batches": 0,
            "missing_flush_rows": 0,
            "missing_evict_rows": 0,
            "duplicated_flush_rows": 0,
            "duplicated_evict_rows": 0,
            "orphan_rows": 0,
            "missing_flush_batches": {},
            "missing_flush_causes": Counter(),
            "flush_writers": Counter(),
            "dead_letters": 0,
        }
        ack_keys: Counter[tuple[str, str]] = Counter((a.agent, a.key) for a in acks)
        twice_acked = [f"{agent}/{key}" for (agent, key), n in ack_keys.items() if n > 1]
        for agent in self.agents:
            aid = agent.agent_id
            stored_all = list(_all_messages(store, aid))
            stored = {m.message_id: m.content for m in stored_all}
            in_fifo = set(fifo.get(aid, []))
            for ack in by_agent.get(aid, []):
                if stored.get(ack.message_id) == ack.content:
                    continue
                if ack.content in in_fifo and fifo_ids.get(aid, {}).get(ack.message_id, ack.content) == ack.content:
                    continue
                lost.append(
                    {
                        "agent": aid,
                        "key": ack.key,
                        "message_id": ack.message_id,
                        "stored_under_id": None if ack.message_id not in stored else stored[ack.message_id][:80],
                    }
                )
            # content -> ids, over the store and the FIFO; ids listed twice by the store
            ids_of: dict[str, set[str]] = defaultdict(set)
            for m in stored_all:
                if m.content.startswith(f"[{MARK} "):
                    ids_of[m.content].add(m.message_id)
            for mid, text in fifo_ids.get(aid, {}).items():
                if text.startswith(f"[{MARK} "):
                    ids_of[text].add(mid)
            for text, ids in ids_of.items():
                if len(ids) > 1:
                    duplicated.append({"agent": aid, "ids": sorted(ids), "content": text[:80]})
            for mid, n in Counter(m.message_id for m in stored_all).items():
                if n > 1:
                    duplicated.append({"agent": aid, "ids": [mid], "stored_times": n})
            self._check_audit(store, aid, by_agent.get(aid, []), audit)
        audit["missing_flush_causes"] = dict(audit["missing_flush_causes"])
        audit["flush_writers"] = dict(audit["flush_writers"])
        return {"lost": lost, "duplicated": duplicated, "audit": audit, "twice_acknowledged_keys": twice_acked}

    def _check_audit(self, store: MemoryStore, aid: str, acks: list[Ack], audit: dict[str, Any]) -> None:
        committed = store.committed_batches(aid)
        events = list(_all_events(store, aid, ["flush", "evict"]))
        per: dict[str, Counter[int]] = {"flush": Counter(), "evict": Counter()}
        for e in events:
            per[e.kind][int(e.payload.get("batch_id", -1))] += 1
            if e.kind == "flush":
                # api:agent:<id> (the request that began it) or worker:evict_batch (a summary
                # install began it, or the commit wrote the row its beginner never did)
                audit["flush_writers"]["api" if e.actor.startswith("api:") else e.actor] += 1
        audit["committed_batches"] += len(committed)
        audit["dead_letters"] += len(list(_all_events(store, aid, ["dead_letter"])))
        begun_by = {a.batch: a.replayed for a in acks if a.batch is not None}
        missing_flush: list[int] = []
        for b in committed:
            for kind in ("flush", "evict"):
                n = per[kind][b]
                if n == 0:
                    audit[f"missing_{kind}_rows"] += 1
                elif n > 1:
                    audit[f"duplicated_{kind}_rows"] += n - 1
            if per["flush"][b] == 0:
                missing_flush.append(b)
                # How the batch was begun, as far as the acknowledgements tell: a reply that
                # said "replayed" carried a batch the first (lost) reply began; no reply at all
                # names it when a summary install began it (or its request was never answered).
                if b in begun_by:
                    cause = "append_replayed" if begun_by[b] else "append_answered"
                else:
                    cause = "summary_install_or_unanswered_request"
                audit["missing_flush_causes"][cause] += 1
        if missing_flush:
            audit["missing_flush_batches"][aid] = missing_flush
        done = set(committed)
        audit["orphan_rows"] += sum(n for kind in per for b, n in per[kind].items() if b not in done)

    def worker_tasks(self) -> dict[str, int]:
        """Tasks each worker process finished (its INFO log), to see which ones did the work."""
        return {
            path.stem: path.read_text(errors="replace").count(" succeeded in ")
            for path in sorted(self.logdir.glob("worker-*.log"))
        }

    def log_errors(self) -> tuple[dict[str, int], dict[str, list[str]]]:
        """ERROR lines and tracebacks per process slot, over all its generations, and the first
        few distinct ERROR lines of each (without their timestamps) as evidence."""
        counts: Counter[str] = Counter()
        examples: dict[str, list[str]] = defaultdict(list)
        for path in sorted(self.logdir.glob("*.log")):
            slot = path.name.split(".")[0]
            for line in path.read_text(errors="replace").splitlines():
                if "ERROR" in line or line.startswith("Traceback"):
                    counts[slot] += 1
                text = line.split("] ", 1)[-1][:300]
                if "ERROR" in line and text not in examples[slot] and len(examples[slot]) < 5:
                    examples[slot].append(text)
        return dict(sorted(counts.items())), {k: v for k, v in examples.items() if v}

    # --- all of it ------------------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        started = time.monotonic()
        self.start_all()
        setup_s = time.monotonic() - started
        self.create_agents()
        self.load()
        try:
            # Restarted workers need not be warm to drain: their first task waits for the model.
            self.wait_ready(self.args.startup_timeout, warm=False, heal=True)
        except TimeoutError:  # go on: the drain and the checks say what that cost
            self.not_ready = self.readiness()
            print(f"chaos: not all processes came back after the load: {self.not_ready}", file=sys.stderr)
        hot = HotState(self.redis_client(), self.settings)
        store = open_store(self.settings.store_url)
        try:
            drained, drain_s, undrained = self.drain(hot, store)
        finally:
            store.close()
        fifo = {a.agent_id: self.fifo_contents(a) for a in self.agents}
        fifo_ids = {a.agent_id: {m.id: m.content for m in hot.snapshot(a.agent_id).fifo} for a in self.agents}
        # The store is read after the run, with no process left writing to it.
        for child in [*self.apis, *self.workers, self.beat]:
            self.sup.kill(child)
        store = open_store(self.settings.store_url)
        try:
            found = self.check(store, fifo, fifo_ids)
        finally:
            store.close()
        return self.report(found, drained, drain_s, undrained, setup_s, time.monotonic() - started)

    def report(
        self,
        found: dict[str, Any],
        drained: bool,
        drain_s: float,
        undrained: dict[str, Any],
        setup_s: float,
        total_s: float,
    ) -> dict[str, Any]:
        acks = self.tally.acks
        waits = sorted(a.wait_s for a in acks)
        audit = found["audit"]
        faults = Counter(f.kind for f in self.faults)
        log_counts, log_examples = self.log_errors()
        out: dict[str, Any] = {
            "acknowledged": len(acks),
            "lost": len(found["lost"]),
            "duplicated": len(found["duplicated"]),
            **{k: audit[k] for k in ("missing_flush_rows", "missing_evict_rows")},
            **{k: audit[k] for k in ("duplicated_flush_rows", "duplicated_evict_rows")},
            "committed_batches": audit["committed_batches"],
            "drained": drained,
            "faults": {k: faults.get(k, 0) for k in ("worker_kill", "api_kill", "redis_crash")},
            "unexpected_exits": len(self.unexpected),
            "appends_per_s": round(len(acks) / self.load_s, 1) if self.load_s else 0.0,
            "replayed_acks": sum(a.replayed for a in acks),
            "retried_acks": sum(a.attempts > 1 for a in acks),
            "ack_wait_s": {
                "p50": round(statistics.median(waits), 3) if waits else None,
                "p99": round(waits[min(len(waits) - 1, int(0.99 * len(waits)))], 3) if waits else None,
                "max": round(waits[-1], 3) if waits else None,
            },
            "errors_seen": dict(self.tally.errors.most_common()),
            "rejected": len(self.tally.rejected),
            "abandoned": len(self.tally.abandoned),
            "twice_acknowledged_keys": len(found["twice_acknowledged_keys"]),
            "twin_sends": self.tally.twin_sends,
            "idempotency_violations": len(self.tally.idempotency_violations),
            "orphan_audit_rows": audit["orphan_rows"],
            "dead_letters": audit["dead_letters"],
            "missing_flush_causes": audit["missing_flush_causes"],
            "flush_writers": audit["flush_writers"],
            "missing_flush_batches": audit["missing_flush_batches"],
            "undrained": undrained,
            "not_ready_after_load": self.not_ready,
            "timing_s": {
                "setup": round(setup_s, 1),
                "load": round(self.load_s, 1),
                "drain": round(drain_s, 1),
                "total": round(total_s, 1),
            },
            "config": {
                k: getattr(self.args, k)
                for k in (
                    "duration",
                    "agents",
                    "appenders",
                    "apis",
                    "workers",
                    "pool",
                    "model",
                    "seed",
                    "pause",
                    "no_vectors",
                )
            },
            "fault_log": [asdict(f) for f in self.faults],
            "unexpected_exit_log": self.unexpected,
            "log_errors": log_counts,
            "log_error_examples": log_examples,
            "worker_tasks": self.worker_tasks(),
            "lost_examples": found["lost"][:20],
            "duplicated_examples": found["duplicated"][:20],
            "rejected_examples": self.tally.rejected[:20],
            "idempotency_violation_examples": self.tally.idempotency_violations[:20],
            "workdir": str(self.workdir),
        }
        out["ok"] = drained and not any(
            out[k]
            for k in (
                "lost",
                "duplicated",
                "missing_flush_rows",
                "missing_evict_rows",
                "duplicated_flush_rows",
                "duplicated_evict_rows",
                "twice_acknowledged_keys",
                "idempotency_violations",
            )
        )
        return out

    def cleanup(self) -> None:
        self.sup.kill_all()
        for child in [self.redis_child, *self.apis, *self.workers, self.beat]:
            if child.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(5)


def _all_messages(store: MemoryStore, agent_id: str) -> Iterator[Any]:
    after = -1
    while True:
        page = store.list_messages(agent_id, after_seq=after, limit=1000)
        yield from page
        if len(page) < 1000:
            return
        after = page[-1].seq


def _all_events(store: MemoryStore, agent_id: str, kinds: list[str]) -> Iterator[MemoryEvent]:
    cursor: str | None = None
    while True:
        page = store.query_events(agent_id, kinds, limit=1000, cursor=cursor)
        yield from page.items
        cursor = page.next_cursor
        if cursor is None:
            return


def render(r: dict[str, Any]) -> str:
    f = r["faults"]
    lines = [
        f"chaos run: {'OK' if r['ok'] else 'FAILED'}   (logs: {r['workdir']})",
        f"  load {r['timing_s']['load']} s, {r['config']['agents']} agents x {r['config']['appenders']} appenders, "
        f"{r['config']['apis']} APIs, {r['config']['workers']} workers ({r['config']['pool']})",
        f"  faults: {f['worker_kill']} worker kills, {f['api_kill']} API kills, {f['redis_crash']} Redis crashes; "
        f"unexpected exits: {r['unexpected_exits']}",
        f"  acknowledged {r['acknowledged']} ({r['appends_per_s']}/s), {r['retried_acks']} after retries, "
        f"{r['replayed_acks']} replayed; ack wait p50 {r['ack_wait_s']['p50']} s, max {r['ack_wait_s']['max']} s",
        f"  rejected {r['rejected']}, abandoned (unacknowledged at the end) {r['abandoned']}",
        f"  drained: {r['drained']} in {r['timing_s']['drain']} s {r['undrained'] or ''}",
        f"  lost {r['lost']}, duplicated {r['duplicated']}, keys acknowledged twice {r['twice_acknowledged_keys']}; "
        f"twin sends {r['twin_sends']}, idempotency violations {r['idempotency_violations']}",
        f"  eviction batches committed {r['committed_batches']}; audit rows missing: flush {r['missing_flush_rows']}, "
        f"evict {r['missing_evict_rows']}; duplicated: flush {r['duplicated_flush_rows']}, "
        f"evict {r['duplicated_evict_rows']}; orphan {r['orphan_audit_rows']}; dead letters {r['dead_letters']}",
    ]
    lines.append(f"  flush rows by writer: {r['flush_writers']}")
    if r["missing_flush_causes"]:
        lines.append(f"  missing flush rows by cause: {r['missing_flush_causes']}")
    if r["errors_seen"]:
        lines.append(f"  errors the appenders retried: {r['errors_seen']}")
    if r["log_errors"]:
        lines.append(f"  ERROR lines in process logs: {r['log_errors']}")
    for fault in r["fault_log"]:
        lines.append(f"    t={fault['at_s']:>6.1f} s  {fault['kind']:<12} {fault['target']:<9} {fault['detail']}")
    for e in r["unexpected_exit_log"]:
        lines.append(f"    unexpected exit: {e['process']} gen {e['generation']} rc {e['returncode']} at {e['at_s']} s")
    lines.append(f"  timing: {r['timing_s']}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load and faults (default 60)")
    p.add_argument("--json", type=Path, help="write the report here")
    p.add_argument("--agents", type=int, default=3)
    p.add_argument("--appenders", type=int, default=3, help="appender threads per agent")
    p.add_argument("--apis", type=int, default=2, choices=(1, 2))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pool", choices=("solo", "prefork"), default="solo")
    p.add_argument("--model", default="vcm-demo-2k", help="a small window, so evictions come often")
    p.add_argument("--worker-kills", type=int, default=3)
    p.add_argument("--api-kills", type=int, default=3)
    p.add_argument("--redis-crashes", type=int, default=2)
    p.add_argument("--redis-down", type=float, default=1.0, help="seconds Redis stays down per crash")
    p.add_argument("--no-vectors", action="store_true", help="spool without embedding (a lighter cold path)")
    p.add_argument("--pause", type=float, default=0.2, help="mean pause between one appender's messages")
    p.add_argument("--twins", type=float, default=0.05, help="share of keys sent twice at once, to both APIs")
    p.add_argument("--request-timeout", type=float, default=10.0)
    p.add_argument("--task-time-limit", type=int, default=8, help="worker hard time limit (s)")
    p.add_argument("--sweep-interval", type=float, default=3.0, help="beat sweep interval and grace (s)")
    p.add_argument(
        "--no-wait-warm",
        dest="wait_warm",
        action="store_false",
        help="start the load once workers consume, before they loaded the embedding model",
    )
    p.add_argument("--startup-timeout", type=float, default=180.0)
    p.add_argument("--settle", type=float, default=30.0, help="after the load, seconds to get keys acknowledged")
    p.add_argument("--drain-timeout", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", type=Path, help="default: a new temporary directory")
    p.add_argument("--keep", action="store_true", help="keep the work directory even when the run passed")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("redis-server") is None:
        print("chaos: redis-server is not on PATH", file=sys.stderr)
        return 2
    run = ChaosRun(args)
    atexit.register(run.sup.kill_all)  # a backstop: the finally below is the normal path

    def terminate(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)
    # Ctrl-C stops the run even where it was started with SIGINT ignored (a background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    report: dict[str, Any] | None = None
    try:
        report = run.execute()
    finally:
        run.cleanup()
        if report is None:
            print(f"chaos: the run did not finish; logs in {run.logdir}", file=sys.stderr)
    print(render(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    if report["ok"] and not args.keep and args.workdir is None:
        shutil.rmtree(run.workdir, ignore_errors=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
