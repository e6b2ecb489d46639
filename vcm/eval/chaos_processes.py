"""The chaos run's processes: its settings and command lines, starting Redis, the APIs, the workers
and beat, readiness, supervision, and injecting faults (:class:`~vcm.eval.chaos_run.ChaosRun` builds
on it)."""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import redis

from vcm.eval.chaos_cases import Cycle, Retried
from vcm.eval.chaos_load import BIN, BROKER_DB, HOST, HOT_DB, Agent, Connect, Fault, Tally
from vcm.eval.processes import Child, Supervisor, wait_until
from vcm.eval.serving import free_port
from vcm.settings import Settings, load_settings


class ChaosProcesses:
    """The processes of one chaos run. ``connect`` makes a client (:class:`vcm.client.VcmClient`),
    ``queues`` and ``warm_message`` come from the workers (``vcm.workers.routes.QUEUES``,
    ``vcm.workers.signals.WARM_MESSAGE``): this layer imports neither."""

    def __init__(self, args: argparse.Namespace, *, connect: Connect, queues: Sequence[str], warm_message: str) -> None:
        self.args = args
        self.connect = connect
        self.queues = list(queues)
        self.warm_message = warm_message
        self.rng = random.Random(args.seed)
        self.run_id = secrets.token_hex(3)
        self.workdir = Path(args.workdir or tempfile.mkdtemp(prefix="vcm-chaos-")).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logdir = self.workdir / "logs"
        self.logdir.mkdir(exist_ok=True)
        (self.workdir / "redis").mkdir(exist_ok=True)
        self.sup = Supervisor(self.workdir)
        self.redis_port = free_port(HOST)
        self.api_ports = [free_port(HOST) for _ in range(args.apis)]
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
        self.phase_s: dict[str, float] = {}
        self.retried: list[Retried] = []  # the retry phase's answers (chaos_cases.Retrier)
        self.cycles: list[Cycle] = []  # the delete-during-eviction cycles (chaos_cases.DeleteCycles)
        self.hot_summaries: dict[str, str] = {}  # re-created agents' summaries in Redis, at the end

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
        # Write-behind's loss window (production mode): what a FLUSHDB of the hot state may take.
        env["VCM_DURABILITY__WRITE_BEHIND_MAX_S"] = str(a.write_behind_max_s)
        env["VCM_DURABILITY__WRITE_BEHIND_MAX_MESSAGES"] = str(a.write_behind_max_messages)
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
            "-c", "1" if self.args.pool == "solo" else "2", "-Q", ",".join(self.queues), "-n", name,
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
        return child.alive() and (self.warm_message in text if warm else " ready." in text)

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
        elif kind == "flushdb":
            # The hot state's data gone under running processes (a failover to an empty replica
            # reads the same); the broker's db is left alone.
            self.redis_client().flushdb()
            self.faults.append(Fault(at, kind, "redis", f"db {HOT_DB}"))
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
        counts = {
            "worker_kill": a.worker_kills,
            "api_kill": a.api_kills,
            "redis_crash": a.redis_crashes,
            "flushdb": a.flushdbs,
        }
        kinds: list[str] = []
        while any(counts.values()):
            for kind in ("worker_kill", "api_kill", "redis_crash", "flushdb"):
                if counts[kind]:
                    kinds.append(kind)
                    counts[kind] -= 1
        if not kinds:
            return []
        start, end = 0.15 * a.duration, 0.8 * a.duration
        step = (end - start) / (len(kinds) - 1) if len(kinds) > 1 else 0.0
        return [(start + i * step, kind) for i, kind in enumerate(kinds)]
