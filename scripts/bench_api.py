#!/usr/bin/env python3
"""HTTP API benchmark (not a test): append and context-read latency as agents reach them.

    .venv/bin/python scripts/bench_api.py [--modes production,embedded] [--clients 1,8,32]
        [--seconds 4] [--redis redis://127.0.0.1:6379/11] [--json out.json]

Starts a real ``vcm serve`` process per mode and drives it over loopback HTTP, one keep-alive
connection per client:

* ``production``: hot state and Celery broker on the real Redis given by ``--redis`` (its database
  must be empty, and is flushed after; ``--flush`` empties it first), no worker running, so what is
  measured is the API's own path (auth, the append, handing the cold-path work over);
* ``embedded``: ``vcm serve`` with no services (in-process fakeredis, ``memory://`` broker, the
  in-process cold path) while the cold path is kept busy: a background loader keeps an archival
  ingestion job running, so the embedding model works through the whole measurement, and every
  append is spooled and embedded as well;
* ``embedded-idle``: the same with nothing queued on the cold path but the appends' own spools;
* ``embedded-inproc``: ``embedded`` with the embedding model in the serving process
  (``[embedding] subprocess = false``), for comparison.

Per mode and client count it measures ``POST /v1/agents/{id}/messages`` (~100-token messages,
``gpt-4o`` agents, no evictions: a client moves to a fresh agent before the warning threshold)
and ``GET /v1/agents/{id}/context`` (an agent holding 50 such messages), and, as the floor, a
Redis PING and ``GET /healthz`` of the same server. The load generator (``raw``) is a minimal
HTTP/1.1 client on asyncio streams, a few microseconds a request, so the figures are the
server's; rows marked ``httpx`` repeat a measurement with one synchronous httpx client, as an
application would call (httpx adds ~0.4 ms a request here). Clients and server share the
machine's cores: at 32 clients read the rows as throughput under contention. Prints a table with
the load average; ``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from vcm.eval.bench import add_json_flag, percentile, write_json
from vcm.eval.serving import vcm_serve

ROOT = Path(__file__).resolve().parent.parent
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jolly vexing bards".split()  # noqa: SIM905
ADMIN_TOKEN = "bench-admin-" + secrets.token_urlsafe(24)
MODEL = "gpt-4o"
# 128k window, warning at 70 %: ~870 appends of ~103 tokens; move on well before.
APPENDS_PER_AGENT = 600
CONTEXT_MESSAGES = 50


def message(i: int, tokens: int = 100) -> str:
    # ~1 token per word for these common words; a counter makes each message distinct.
    words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(tokens - 8)]
    return f"msg {i}: " + " ".join(words)


def document(n_words: int, seed: int) -> str:
    """A distinct document of sentences (a new seed, a new archival job)."""
    out, rng = [], seed * 7919 + 1
    for s in range(n_words // 12):
        rng = (rng * 1103515245 + 12345) % 2**31
        words = [WORDS[(rng >> (k % 16) ^ s * 31 + k) % len(WORDS)] for k in range(12)]
        out.append(f"Part {seed}.{s}: " + " ".join(words) + ".")
    return " ".join(out)


def summary(samples_ms: list[float], elapsed_s: float) -> dict[str, float]:
    return {
        "n": len(samples_ms),
        "p50_ms": percentile(samples_ms, 0.50),
        "p95_ms": percentile(samples_ms, 0.95),
        "p99_ms": percentile(samples_ms, 0.99),
        "max_ms": max(samples_ms) if samples_ms else float("nan"),
        "per_s": len(samples_ms) / elapsed_s if elapsed_s > 0 else 0.0,
    }


# --- the server -------------------------------------------------------------------------------


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def serve(mode: str, redis_url: str, workdir: Path) -> Iterator[Server]:
    if mode == "production":
        env = {"VCM_REDIS_URL": redis_url, "VCM_BROKER_URL": redis_url, "VCM_WORKER__BROKER_PREFIX": "bench:"}
    else:
        env = {"VCM_REDIS_URL": "", "VCM_BROKER_URL": "memory://"}
    if mode == "embedded-inproc":  # the model in the serving process, as before the child process
        env["VCM_EMBEDDING__SUBPROCESS"] = "false"
    log = workdir / f"serve-{mode}.log"
    vcm = ROOT / ".venv" / "bin" / "vcm"
    with vcm_serve(vcm, workdir / mode, admin_token=ADMIN_TOKEN, env=env, log=log, cwd=workdir) as (proc, url):
        yield Server(url, proc, log)


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class Agents:
    """Pre-created agents with their tokens; each client takes a fresh one every APPENDS_PER_AGENT."""

    url: str
    prefix: str
    _seq: Iterator[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def new(self, client: httpx.Client) -> tuple[str, dict[str, str]]:
        with self._lock:
            n = next(self._seq)
        agent_id = f"{self.prefix}-{n}"
        r = client.post(f"{self.url}/v1/agents", json={"agent_id": agent_id, "model": MODEL}, headers=ADMIN)
        r.raise_for_status()
        return agent_id, {"Authorization": f"Bearer {r.json()['token']}"}


# --- load -------------------------------------------------------------------------------------

# (method, path, headers, JSON body or None): the next request of one client.
Request = tuple[str, str, dict[str, str], Any]
Next = Callable[[int], Request]


class Connection:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: requests with a JSON body,
    responses with a Content-Length (all vcm sends). It spends a few microseconds per request,
    where httpx spends about 0.4 ms here, so the figures are the server's and the loopback's."""

    def __init__(self, url: str) -> None:
        parsed = httpx.URL(url)
        self.host, self.port = parsed.host, parsed.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        payload = json.dumps(body).encode() if body is not None else b""
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(payload)}"]
        if body is not None:
            head.append("Content-Type: application/json")
        head += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        status_line = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def run_load(url: str, nexts: list[Next], seconds: float) -> tuple[list[float], float]:
    """One connection per ``nexts`` entry, each sending its requests back to back for ``seconds``."""

    async def main() -> tuple[list[float], float]:
        conns = [Connection(url) for _ in nexts]
        samples: list[float] = []

        async def one(conn: Connection, next_request: Next, warm: int, stop: float) -> None:
            i = 0
            while i < warm or (not warm and time.perf_counter() < stop):
                method, path, headers, body = next_request(i)
                t = time.perf_counter()
                status, text = await conn.request(method, path, headers, body)
                if not warm:
                    samples.append((time.perf_counter() - t) * 1000)
                if status >= 400:
                    raise RuntimeError(f"{method} {path}: {status} {text[:300]!r}")
                i += 1

        try:
            await asyncio.gather(*(one(c, n, 10, 0.0) for c, n in zip(conns, nexts, strict=True)))
            start = time.perf_counter()
            await asyncio.gather(*(one(c, n, 0, start + seconds) for c, n in zip(conns, nexts, strict=True)))
            return samples, time.perf_counter() - start
        finally:
            for c in conns:
                await c.close()

    return asyncio.run(main())


def run_httpx(url: str, next_request: Next, seconds: float) -> tuple[list[float], float]:
    """The same with one synchronous httpx client (keep-alive), as an application would call."""
    with httpx.Client(base_url=url, timeout=30) as client:
        samples: list[float] = []
        i, start = 0, 0.0
        while not start or time.perf_counter() - start < seconds:
            method, path, headers, body = next_request(i)
            t = time.perf_counter()
            r = client.request(method, path, headers=headers, json=body)
            if start:
                samples.append((time.perf_counter() - t) * 1000)
            check(r)
            i += 1
            if i == 10:
                start = time.perf_counter()
        return samples, time.perf_counter() - start


def check(r: httpx.Response) -> None:
    if r.status_code >= 400:
        raise RuntimeError(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:300]}")


def appender(agents: Agents, setup: httpx.Client, seconds: float, clients: int) -> Next:
    """One client's appends: ~100-token messages, a fresh agent every APPENDS_PER_AGENT. Its
    agents are created now (enough for ~2 000 appends/s), so none is created while measuring."""
    fresh = [agents.new(setup) for _ in range(max(2, int(seconds * 2000 / clients / APPENDS_PER_AGENT) + 2))]
    current = [fresh.pop()]  # the agent appended to now, and how many it has taken
    count = [0]

    def next_request(i: int) -> Request:
        if count[0] >= APPENDS_PER_AGENT and fresh:
            current[0], count[0] = fresh.pop(), 0
        agent_id, headers = current[0]
        count[0] += 1
        body = {"role": "user" if i % 2 else "assistant", "content": message(i * 31 + len(fresh))}
        return "POST", f"/v1/agents/{agent_id}/messages", headers, body

    return next_request


def context_reader(agents: Agents, setup: httpx.Client) -> Next:
    """Reads of one agent's context holding CONTEXT_MESSAGES messages (~5k tokens)."""
    agent_id, headers = agents.new(setup)
    for i in range(CONTEXT_MESSAGES):
        check(
            setup.post(f"/v1/agents/{agent_id}/messages", json={"role": "user", "content": message(i)}, headers=headers)
        )
    return lambda i: ("GET", f"/v1/agents/{agent_id}/context", headers, None)


def health(i: int) -> Request:
    return "GET", "/healthz", {}, None


def bench_ping(redis_url: str, n: int = 3000) -> dict[str, float]:
    client = redis.Redis.from_url(redis_url)
    for _ in range(100):
        client.ping()
    out = []
    start = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        client.ping()
        out.append((time.perf_counter() - t) * 1000)
    return summary(out, time.perf_counter() - start)


class ColdPathLoad:
    """Keeps the embedded cold path embedding: archival ingestion jobs, one after another (a
    new one is queued as soon as the previous one is done), on an agent of its own."""

    def __init__(self, url: str, agents: Agents, words: int) -> None:
        self.url, self.words = url, words
        self.client = httpx.Client(base_url=url, timeout=60)
        self.agent_id, self.headers = agents.new(self.client)
        self.stop = threading.Event()
        self.running = threading.Event()
        self.jobs_done = 0
        self.chunks_done = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _job(self, seed: int) -> str:
        r = self.client.post(
            f"/v1/agents/{self.agent_id}/archival",
            json={"text": document(self.words, seed), "source": f"bench-{seed}"},
            headers=self.headers,
        )
        check(r)
        return str(r.json()["job_id"])

    def _run(self) -> None:
        seed = 0
        while not self.stop.is_set():
            job = self._job(seed)
            seed += 1
            while not self.stop.is_set():
                r = self.client.get(f"/v1/agents/{self.agent_id}/archival/jobs/{job}", headers=self.headers)
                check(r)
                state = r.json()
                if state["status"] == "running":
                    self.running.set()
                if state["status"] in ("done", "failed"):
                    self.jobs_done += 1
                    self.chunks_done += int((state.get("result") or {}).get("chunks", 0))
                    break
                time.sleep(0.2)

    def start(self) -> None:
        self.thread.start()
        # Measure only once a job runs: the model is loaded and the cold path is embedding.
        if not self.running.wait(180):
            raise RuntimeError("the background ingestion job did not start within 180 s")
        time.sleep(1.0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.client.close()


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_mode(mode: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    if mode == "production":
        scratch = redis.Redis.from_url(args.redis)
        if scratch.dbsize() and not args.flush:
            raise SystemExit(f"{args.redis} is not empty (another user's?); pick an empty database or pass --flush")
        scratch.flushdb()
    out: dict[str, Any] = {"mode": mode, "load_before": load_average(), "rows": []}
    seconds = args.seconds

    def row(op: str, client: str, clients: int, measured: tuple[list[float], float]) -> None:
        out["rows"].append({"op": op, "client": client, "clients": clients, "load1": load_average()[0]})
        out["rows"][-1].update(summary(*measured))

    with serve(mode, args.redis, workdir) as server, httpx.Client(base_url=server.url, timeout=60) as setup:
        agents = Agents(server.url, f"bench-{mode}")
        load = None
        if mode in ("embedded", "embedded-inproc"):  # embedded-idle: nothing but the appends' own spools
            load = ColdPathLoad(server.url, agents, args.doc_words)
            load.start()
        try:
            row("GET /healthz", "raw", 1, run_load(server.url, [health], min(seconds, 2.0)))
            row("GET /healthz", "httpx", 1, run_httpx(server.url, health, min(seconds, 2.0)))
            for clients in args.clients:
                nexts = [appender(agents, setup, seconds, clients) for _ in range(clients)]
                row("append", "raw", clients, run_load(server.url, nexts, seconds))
                if clients == 1:  # beside it, before more clients leave a backlog behind
                    row("append", "httpx", 1, run_httpx(server.url, appender(agents, setup, seconds, 1), seconds))
            reader = context_reader(agents, setup)
            for clients in args.clients:
                row("context", "raw", clients, run_load(server.url, [reader] * clients, seconds))
        finally:
            if load is not None:
                load.close()
                out["cold_path"] = {"ingest_jobs_done": load.jobs_done, "chunks_embedded": load.chunks_done}
    out["load_after"] = load_average()
    if mode == "production":
        redis.Redis.from_url(args.redis).flushdb()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/11", help="scratch database (flushed)")
    parser.add_argument("--flush", action="store_true", help="flush --redis even when it holds keys")
    parser.add_argument("--modes", default="production,embedded")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--seconds", type=float, default=4.0, help="per measured row")
    parser.add_argument("--doc-words", type=int, default=4000, help="size of each background archival document")
    add_json_flag(parser, "write the figures to this file")
    args = parser.parse_args()
    args.clients = [int(c) for c in args.clients.split(",") if c]
    modes = [m for m in args.modes.split(",") if m]

    workdir = Path(tempfile.mkdtemp(prefix="vcm-bench-api-"))
    results: dict[str, Any] = {"cpus": os.cpu_count(), "ping": bench_ping(args.redis), "modes": []}
    try:
        for mode in modes:
            results["modes"].append(run_mode(mode, args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    ping = results["ping"]
    print(f"Redis PING (redis-py): p50 {ping['p50_ms']:.3f} ms, p99 {ping['p99_ms']:.3f} ms")
    columns = [("mode", "<17"), ("request", "<14"), ("client", "<7"), ("clients", ">8"), ("n", ">7")]
    columns += [("p50 ms", ">8"), ("p95 ms", ">8"), ("p99 ms", ">8"), ("max ms", ">8"), ("req/s", ">7"), ("load", ">6")]
    header = "".join(f"{name:{spec}}" for name, spec in columns)
    print(header)
    print("-" * len(header))
    for m in results["modes"]:
        for row in m["rows"]:
            print(
                f"{m['mode']:<17}{row['op']:<14}{row['client']:<7}{row['clients']:>8}{row['n']:>7}"
                f"{row['p50_ms']:>8.2f}{row['p95_ms']:>8.2f}{row['p99_ms']:>8.2f}{row['max_ms']:>8.1f}"
                f"{row['per_s']:>7.0f}{row['load1']:>6.1f}"
            )
        extra = f", cold path: {m['cold_path']}" if "cold_path" in m else ""
        print(f"  {m['mode']}: load average before {m['load_before']}, after {m['load_after']}{extra}")
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
