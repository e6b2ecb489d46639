"""Child processes of a benchmark run: each in its own process group with its log, started, killed
and restarted (``scripts/chaos.py``), or all killed at the end (:class:`Processes`,
``scripts/load.py``); Redis servers and clusters; waiting for a condition; free ports for cluster nodes."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis


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


def wait_until(check: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting until {what}")
        time.sleep(interval_s)


HOST = "127.0.0.1"
# Cluster nodes: a node also listens on its bus port (port + 10000), so ports come from a low range.
PORTS = range(7000, 7100)


class Processes:
    """Children in their own process groups, all SIGKILLed when the run ends however it ends."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []
        setpriv = shutil.which("setpriv")
        self.prefix = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
        atexit.register(self.kill_all)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Path:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*self.prefix, *argv], cwd=self.workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self.procs.append(proc)
        return log

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def kill_all(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self.procs = []


def _free(port: int) -> bool:
    for p in (port, port + 10000):  # a cluster node also listens on its bus port
        with socket.socket() as s:
            try:
                s.bind((HOST, p))
            except OSError:
                return False
    return True


def free_ports(n: int, taken: set[int]) -> list[int]:
    found = [p for p in PORTS if p not in taken and _free(p)][:n]
    if len(found) < n:
        raise SystemExit(f"fewer than {n} free ports in {PORTS}")
    taken.update(found)
    return found


def _answers(port: int) -> bool:
    try:
        return bool(redis.Redis(host=HOST, port=port, socket_connect_timeout=0.5).ping())
    except redis.exceptions.RedisError:
        return False


def start_redis(procs: Processes, name: str, port: int, cluster: bool = False) -> None:
    directory = procs.workdir / name
    directory.mkdir()
    argv = [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", HOST, "--save", "",
            "--appendonly", "no", "--dir", str(directory), "--maxmemory-policy", "noeviction"]  # fmt: skip
    if cluster:
        argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"]
    procs.start(name, argv)
    wait_until(lambda: _answers(port), 20, f"redis-server {name} answers")


def start_cluster(procs: Processes, ports: list[int]) -> str:
    for port in ports:
        start_redis(procs, f"redis-node-{port}", port, cluster=True)
    create = subprocess.run(
        [shutil.which("redis-cli") or "redis-cli", "--cluster", "create", *(f"{HOST}:{p}" for p in ports),
         "--cluster-replicas", "0", "--cluster-yes"],
        capture_output=True, timeout=60,
    )  # fmt: skip
    if create.returncode != 0:
        raise SystemExit(f"redis-cli --cluster create failed: {create.stdout[-2000:]!r}")

    def formed() -> bool:
        infos = (redis.Redis(host=HOST, port=p, decode_responses=True).cluster("info") for p in ports)
        return all(i["cluster_state"] == "ok" for i in infos)

    wait_until(formed, 30, "the cluster serves every slot")
    return "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in ports)
