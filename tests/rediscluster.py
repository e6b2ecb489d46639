"""A private Redis Cluster for tests: ``masters`` real ``redis-server`` processes in cluster mode on
loopback ports (7000-7099 by default, 100 higher per xdist worker; cluster bus on port + 10000), joined with
``redis-cli --cluster create ... --cluster-replicas 0`` so every slot is served."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

from tests.redis_legs import worker_ports


class ClusterUnavailable(RuntimeError):
    """The binaries are missing or the cluster did not form; the message says which."""


def _free(port: int) -> bool:
    for p in (port, port + 10000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


class RedisClusterProcesses:
    def __init__(self, directory: Path, masters: int = 3, ports: range | None = None) -> None:
        self.directory = directory
        self.masters = masters
        self.ports = worker_ports(7000) if ports is None else ports
        self.procs: list[subprocess.Popen[bytes]] = []
        self.node_ports: list[int] = []

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.node_ports)

    def start(self, timeout_s: float = 30.0) -> str:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise ClusterUnavailable("redis-server / redis-cli not on PATH")
        candidates = (p for p in self.ports if _free(p))
        self.node_ports = [next(candidates, 0) for _ in range(self.masters)]
        if 0 in self.node_ports:
            raise ClusterUnavailable(f"fewer than {self.masters} free ports in {self.ports}")
        for port in self.node_ports:
            node_dir = self.directory / str(port)
            node_dir.mkdir(parents=True, exist_ok=True)
            log = (node_dir / "redis.log").open("wb")
            argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000", "--save", "",
                    "--appendonly", "no", "--dir", str(node_dir), "--maxmemory-policy", "noeviction"]  # fmt: skip
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout_s
        for port in self.node_ports:
            self._wait(lambda p=port: bool(redis.Redis(port=p, socket_connect_timeout=0.5).ping()), deadline)
        create = subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.node_ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True, timeout=timeout_s,
        )  # fmt: skip
        if create.returncode != 0:
            raise ClusterUnavailable(f"redis-cli --cluster create failed: {create.stdout[-2000:]!r}")

        def formed() -> bool:
            # Every node must see every slot served before a client trusts its slot map.
            return all(
                redis.Redis(port=p, decode_responses=True).cluster("info")["cluster_state"] == "ok"
                for p in self.node_ports
            )

        self._wait(formed, deadline)
        return self.url

    def _wait(self, check: object, deadline: float) -> None:
        assert callable(check)
        while True:
            if any(p.poll() is not None for p in self.procs):
                raise ClusterUnavailable(f"a redis-server exited at start (logs in {self.directory})")
            try:
                if check():
                    return
            except (redis.exceptions.RedisError, OSError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise ClusterUnavailable(f"the cluster did not form in time (logs in {self.directory})")
            time.sleep(0.05)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.procs = []


class RedisServerProcess:
    """One private ``redis-server`` (no persistence) on a free loopback port of ``ports``."""

    def __init__(self, directory: Path, ports: range | None = None) -> None:
        self.directory = directory
        self.ports = worker_ports(7000) if ports is None else ports
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> str:
        server = shutil.which("redis-server")
        if server is None:
            raise ClusterUnavailable("redis-server not on PATH")
        self.port = next((p for p in self.ports if _free(p)), 0)
        if not self.port:
            raise ClusterUnavailable(f"no free port in {self.ports}")
        self.directory.mkdir(parents=True, exist_ok=True)
        log = (self.directory / "redis.log").open("wb")
        self.proc = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory), "--maxmemory-policy", "noeviction"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise ClusterUnavailable(f"redis-server exited at start (log in {self.directory})")
            try:
                if redis.Redis(port=self.port, socket_connect_timeout=0.5).ping():
                    return self.url
            except redis.exceptions.RedisError:
                pass
            if time.monotonic() > deadline:
                raise ClusterUnavailable(f"redis-server did not answer in time (log in {self.directory})")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None
