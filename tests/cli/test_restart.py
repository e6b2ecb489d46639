"""Agents survive restarts: real ``vcm serve`` processes, killed and started again.

Embedded mode: the server runs on a data directory (SQLite store, in-process fakeredis and
worker); it is SIGKILLed right after an append began an eviction, started again on the same
directory, and must still have every acknowledged message in the context or in recall, the block
and the summary, and take new appends into recall.

Production stack: API and Celery worker processes on a private ``redis-server`` (hot state and
broker); after ``FLUSHALL`` the agent's hot state is rebuilt from the store on its next request
(its token too), with every acknowledged message still there.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from vcm.client import VcmClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ADMIN = "restart-test-admin-token-0123456789"
VCM = [sys.executable, "-m", "vcm.cli.main"]
MODEL = "vcm-demo-2k"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Server:
    def __init__(self, workdir: Path, env: dict[str, str], argv: list[str], name: str) -> None:
        self.workdir, self.env, self.argv, self.name = workdir, env, argv, name
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.workdir / f"{self.name}-{self.starts}.log").open("wb")
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log(self) -> str:
        return "".join(p.read_text(errors="replace")[-3000:] for p in sorted(self.workdir.glob(f"{self.name}-*.log")))


def _env(workdir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env.update(
        {
            "VCM_DATA_DIR": str(workdir / "data"),
            "VCM_API__ADMIN_TOKEN": ADMIN,
            "VCM_LOG_LEVEL": "WARNING",
            "VCM_RECALL__VECTORS": "false",  # BM25 recall: no model inference on the spool path
            "HF_HUB_OFFLINE": "1",
            **extra,
        }
    )
    return env


def _up(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def _append_all(client: VcmClient, agent: str, start: int, stop: int, acked: list[str], stop_on_batch: bool) -> bool:
    """Append messages ``start..stop``; True when it stopped right after one that began a batch."""
    for i in range(start, stop):
        text = f"Message token{i}: Alice booked the trip number {i} to Porto and paid invoice {i * 7}."
        reply = client.append(agent, "user", text, idempotency_key=f"msg-{i}")
        acked.append(reply["message_id"])
        if stop_on_batch and reply.get("batch") and i > start + 20:
            return True
    return False


def _context_ids(client: VcmClient, agent: str) -> set[str]:
    return {str(m["id"]) for m in client.context(agent)["messages"] if "id" in m}


def _found_in_recall(client: VcmClient, agent: str, i: int) -> bool:
    hits = client.search_recall(agent, f"token{i}", mode="text", limit=5)["items"]
    return any(f"token{i}:" in h["message"]["content"] for h in hits)


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def test_embedded_server_killed_mid_eviction_keeps_every_acknowledged_message(workdir: Path) -> None:
    port = free_port()
    server = Server(workdir, _env(workdir), [*VCM, "serve", "--port", str(port)], "serve")
    admin = VcmClient(f"http://127.0.0.1:{port}", ADMIN)
    try:
        server.start()
        wait_until(_up(port), 90, "vcm serve")
        admin.create_agent("alice", model=MODEL, system_prompt="Be brief.")
        admin.put_block("alice", "persona", "Alice likes green tea and trains for a marathon.", pinned=True)
        block = admin.block("alice", "persona")
        acked: list[str] = []
        assert _append_all(admin, "alice", 0, 300, acked, stop_on_batch=True), "no eviction began"
        wait_until(lambda: bool(admin.summary_versions("alice")["versions"]), 60, "a first summary")
        versions_before = admin.summary_versions("alice", limit=1000)["versions"]
        # Then on until the next eviction begins, and kill the server at once: mid-eviction.
        assert _append_all(admin, "alice", len(acked), 400, acked, stop_on_batch=True), "no second eviction"
        server.kill()  # SIGKILL, the in-process worker with it, mid-eviction

        server.start()
        wait_until(_up(port), 90, "vcm serve after the kill")
        assert admin.agents()["agents"] == ["alice"]
        again = admin.block("alice", "persona")
        assert (again["content"], again["_rev"]) == (block["content"], block["_rev"])
        versions_after = admin.summary_versions("alice", limit=1000)["versions"]
        assert versions_before and {v["batch_id"] for v in versions_before} <= {v["batch_id"] for v in versions_after}
        n = len(acked)
        _append_all(admin, "alice", n, 500, acked, stop_on_batch=False)
        assert len(acked) == 500 and len(set(acked)) == 500  # no id handed out twice

        in_context = _context_ids(admin, "alice")
        missing = [i for i, m in enumerate(acked) if m not in in_context and not _found_in_recall(admin, "alice", i)]
        assert missing == [], f"acknowledged messages neither in context nor in recall: {missing[:10]}"
        ctx = admin.context("alice")
        assert ctx["gauges"]["total"] <= ctx["gauges"]["max"]

        # The summary the context shows is the store's latest version, once the evictions the last
        # appends began have finished (between a commit and its finish the store is one ahead).
        def shows_latest() -> bool:
            latest = admin.summary_versions("alice", limit=1)["versions"]
            messages = admin.context("alice")["messages"]
            return not latest or any(latest[0]["text"][:40] in str(m.get("content", "")) for m in messages)

        wait_until(shows_latest, 60, "the context showing the latest summary")
    except BaseException:
        print(server.log())
        raise
    finally:
        admin.close()
        server.kill()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not on PATH")
def test_production_stack_rebuilds_hot_state_after_flushall(workdir: Path) -> None:
    rport, port = free_port(), free_port()
    redis_server = subprocess.Popen(
        ["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    r = redis.Redis(port=rport)
    wait_until(lambda: _pings(r), 20, "redis-server")
    env = _env(
        workdir,
        VCM_REDIS_URL=f"redis://127.0.0.1:{rport}/0",
        VCM_BROKER_URL=f"redis://127.0.0.1:{rport}/1",
        VCM_STORE_URL=f"sqlite:///{workdir / 'vcm.db'}",
        VCM_DURABILITY__MESSAGES="write_through",
    )
    api = Server(workdir, env, [*VCM, "serve", "--port", str(port)], "api")
    worker = Server(workdir, env, [*VCM, "worker", "--concurrency", "1", "--loglevel", "WARNING"], "worker")
    admin = VcmClient(f"http://127.0.0.1:{port}", ADMIN)
    try:
        api.start()
        worker.start()
        wait_until(_up(port), 90, "vcm serve")
        token = admin.create_agent("bob", model=MODEL)["token"]
        agent = VcmClient(f"http://127.0.0.1:{port}", token)
        admin.put_block("bob", "goals", "Ship the report by Friday.")
        acked: list[str] = []
        _append_all(agent, "bob", 0, 150, acked, stop_on_batch=False)
        r.flushall()  # hot state and broker queues gone

        # The agent's own token still works: its hash is in the store and comes back with it.
        more: list[str] = []
        _append_all(agent, "bob", 150, 200, more, stop_on_batch=False)
        assert not set(more) & set(acked)  # ids go on above everything handed out before
        assert [b["id"] for b in agent.blocks("bob")["blocks"]] == ["goals"]
        in_context = _context_ids(agent, "bob")
        everything = acked + more
        missing = [i for i, m in enumerate(everything) if m not in in_context and not _found_in_recall(agent, "bob", i)]
        assert missing == [], f"acknowledged messages neither in context nor in recall: {missing[:10]}"
        agent.close()
    except BaseException:
        print(api.log(), worker.log())
        raise
    finally:
        admin.close()
        api.kill()
        worker.kill()
        os.killpg(redis_server.pid, signal.SIGKILL)
        redis_server.wait(10)


def _pings(r: redis.Redis) -> bool:
    try:
        return bool(r.ping())
    except redis.ConnectionError:
        return False
