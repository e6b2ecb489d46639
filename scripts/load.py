#!/usr/bin/env python3
"""Load run on this machine (loopback only, bounded in time): N agents, M concurrent clients,
K ``vcm serve`` API processes and W ``celery worker`` processes, with the hot state on one
Redis or on a three-master Redis Cluster; prints one table row per hot-state mode.

    .venv/bin/python scripts/load.py [--mode single|cluster|both] [--agents 20] [--clients 8]
        [--apis 2] [--workers 1] [--duration 20] [--search-share 0.1] [--model vcm-small-8k]
        [--broker redis|amqp] [--no-confirm] [--drain-timeout 300] [--json out.json] [--keep]

Everything is private to the run (a temporary directory, ``redis-server`` processes on free
ports in 7000-7099; with ``--broker amqp`` the local RabbitMQ, ``VCM_LOAD_AMQP_URL``): the hot
state (one server, or three cluster masters), a separate Redis as the Celery broker, one SQLite
store file. Each client thread loops for ``--duration`` seconds: it picks an agent and an API at
random and appends a message under its own Idempotency-Key (retried with the same key, on another
API, after any failure), or with probability ``--search-share`` runs a recall search (BM25,
``mode=text``: the API processes load no embedding model). Message vectors are off
(``[recall] vectors = false``) so spooling writes rows only; evictions still summarise with the
real model in the workers, which is what the eviction backlog measures.

After the load: the cold path drains (no pending batch, every numbered message stored; bounded
by ``--drain-timeout``), then every acknowledged append is looked up in the store by its key:
*lost* = acknowledged but not stored under its message id with its content; *duplicated* = one
key stored under two message ids. Exit status 0 only when both are 0 and the drain finished.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from vcm.eval.bench import add_json_flag, percentile, write_json
from vcm.eval.processes import Processes, free_ports, start_cluster, start_redis, wait_until
from vcm.eval.serving import free_port
from vcm.hotpath import keys
from vcm.hotpath.connection import connect
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.workers.signals import WARM_MESSAGE

BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
MARK = "load-key"  # content marker: "[load-key <key>]" ends every message the run appends
WORDS = ["harbour", "ferry", "timetable", "pier", "ticket", "station", "bridge", "market", "museum", "garden"]
AMQP_URL = os.environ.get("VCM_LOAD_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


# --- clients -------------------------------------------------------------------------------------
@dataclass
class Ack:
    agent: str
    key: str
    content: str
    message_id: str


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    acks: list[Ack] = field(default_factory=list)
    append_ms: list[float] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    unacked: int = 0  # appends still failing when the run ended (never acknowledged: not "lost")


def client_loop(
    n: int, urls: list[str], agents: dict[str, str], tally: Tally, stop: threading.Event, share: float
) -> None:
    rng = random.Random(n)
    http = [httpx.Client(base_url=u, timeout=30) for u in urls]
    names = sorted(agents)
    i = 0
    try:
        while not stop.is_set():
            agent = rng.choice(names)
            auth = {"Authorization": f"Bearer {agents[agent]}"}
            start = time.perf_counter()
            if rng.random() < share:
                try:
                    r = rng.choice(http).get(
                        f"/v1/agents/{agent}/recall", params={"query": rng.choice(WORDS), "mode": "text", "limit": 10},
                        headers=auth,
                    )  # fmt: skip
                    r.raise_for_status()
                except httpx.HTTPError as exc:
                    with tally.lock:
                        tally.errors[f"search {type(exc).__name__}"] += 1
                    continue
                with tally.lock:
                    tally.search_ms.append((time.perf_counter() - start) * 1000)
                continue
            i += 1
            key = f"c{n}-{i}"
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
            content = f"{words} [{MARK} {key}]"
            ack = None
            for attempt in range(20):  # the same key on the next API until acknowledged
                try:
                    r = http[(i + attempt) % len(http)].post(
                        f"/v1/agents/{agent}/messages", json={"role": "user", "content": content},
                        headers={**auth, "Idempotency-Key": key},
                    )  # fmt: skip
                    if r.status_code < 300:
                        ack = Ack(agent, key, content, str(r.json()["message_id"]))
                        break
                    with tally.lock:
                        tally.errors[f"append {r.status_code}"] += 1
                except httpx.HTTPError as exc:
                    with tally.lock:
                        tally.errors[f"append {type(exc).__name__}"] += 1
                time.sleep(0.05 * (attempt + 1))
            with tally.lock:
                if ack is None:
                    tally.unacked += 1
                else:
                    tally.acks.append(ack)
                    tally.append_ms.append((time.perf_counter() - start) * 1000)
    finally:
        for h in http:
            h.close()


# --- one run -------------------------------------------------------------------------------------
def backlog(client: redis.Redis, agents: list[str]) -> int:
    """Eviction batches begun and not finished, all agents (one pipeline; per-agent keys on a
    cluster are grouped by node by redis-py)."""
    pipe = client.pipeline(transaction=False)
    for agent in agents:
        pipe.zcard(keys.key(agent, keys.BATCHES))
    return sum(int(n) for n in pipe.execute())


def all_messages(store: MemoryStore, agent: str) -> Iterator[Any]:
    after = -1
    while True:
        page = store.list_messages(agent, after_seq=after, limit=1000)
        if not page:
            return
        yield from page
        after = page[-1].seq


def drained(client: redis.Redis, store: MemoryStore, agents: list[str]) -> bool:
    for agent in agents:
        if client.zcard(keys.key(agent, keys.BATCHES)):
            return False
        seq = int(client.hget(keys.key(agent, keys.META), "msg_seq") or 0)
        ids = [f"m{i}" for i in range(1, seq + 1)]
        if len(store.get_messages(agent, ids)) < len(ids):
            return False
    return True


def run(mode: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    workdir = root / mode
    workdir.mkdir()
    procs = Processes(workdir)
    taken: set[int] = set()
    try:
        if mode == "cluster":
            hot_url = start_cluster(procs, free_ports(3, taken))
        else:
            [port] = free_ports(1, taken)
            start_redis(procs, "redis-hot", port)
            hot_url = f"redis://{HOST}:{port}/0"
        if args.broker == "amqp":
            broker_url = AMQP_URL
        else:
            [bport] = free_ports(1, taken)
            start_redis(procs, "redis-broker", bport)
            broker_url = f"redis://{HOST}:{bport}/0"
        admin = "load-admin-" + secrets.token_urlsafe(16)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_") and k != "PROMETHEUS_MULTIPROC_DIR"}
        env |= {
            "VCM_REDIS_URL": hot_url,
            "VCM_BROKER_URL": broker_url,
            "VCM_STORE_URL": f"sqlite:///{workdir / 'vcm.db'}",
            "VCM_API__ADMIN_TOKEN": admin,
            "VCM_RECALL__VECTORS": "false",
            "VCM_LOG_LEVEL": "WARNING",
            # queues of a shared RabbitMQ cannot be prefixed: the run purges them at the start
            "VCM_WORKER__BROKER_PREFIX": f"load-{secrets.token_hex(3)}:",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        if args.broker == "amqp":
            from vcm.settings import load_settings
            from vcm.workers.build import create_app

            env["VCM_WORKER__AMQP_CONFIRM_PUBLISH"] = "false" if args.no_confirm else "true"
            create_app(load_settings(environ=env)).control.purge()
        worker = [str(BIN / "celery"), "-A", "vcm.workers.app", "worker", "-P", "solo", "-Q", "hot,cold,maintenance",
                  "--without-mingle", "--without-gossip", "--loglevel=WARNING"]  # fmt: skip
        worker_logs = [
            procs.start(f"worker-{i}", [*worker, "-n", f"load{i}-{os.getpid()}@%h"], env) for i in range(args.workers)
        ]
        api_ports = [free_port(HOST) for _ in range(args.apis)]
        for i, port in enumerate(api_ports):
            procs.start(f"api-{i}", [str(BIN / "vcm"), "serve", "--host", HOST, "--port", str(port)], env)
        urls = [f"http://{HOST}:{p}" for p in api_ports]

        def up(url: str) -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        started = time.monotonic()
        wait_until(lambda: all(up(u) for u in urls) or not procs.alive(), args.startup_timeout, "the APIs answer")
        wait_until(
            lambda: all(WARM_MESSAGE in log.read_text(errors="replace") for log in worker_logs) or not procs.alive(),
            args.startup_timeout, "the workers are warm",
        )  # fmt: skip
        if not procs.alive():
            raise SystemExit(f"load: a process exited at start (logs in {workdir})")
        startup_s = time.monotonic() - started
        agents: dict[str, str] = {}
        with httpx.Client(base_url=urls[0], timeout=30, headers={"Authorization": f"Bearer {admin}"}) as c:
            for a in range(args.agents):
                agent = f"agent-{a:04d}"
                r = c.post("/v1/agents", json={"agent_id": agent, "model": args.model})
                r.raise_for_status()
                agents[agent] = r.json()["token"]
        hot = connect(hot_url)
        names = sorted(agents)
        tally, stop = Tally(), threading.Event()
        threads = [
            threading.Thread(target=client_loop, args=(n, urls, agents, tally, stop, args.search_share), daemon=True)
            for n in range(args.clients)
        ]
        samples: list[int] = []
        t0 = time.monotonic()
        for t in threads:
            t.start()
        while time.monotonic() - t0 < args.duration:
            time.sleep(1.0)
            samples.append(backlog(hot, names))
        stop.set()
        for t in threads:
            t.join(60)
        load_s = time.monotonic() - t0
        load_avg = os.getloadavg()
        at_stop = backlog(hot, names)
        store = open_store(f"sqlite:///{workdir / 'vcm.db'}")
        d0 = time.monotonic()
        try:
            wait_until(lambda: drained(hot, store, names), args.drain_timeout, "the cold path drained", 1.0)
            drain_ok = True
        except TimeoutError:
            drain_ok = False
        drain_s = time.monotonic() - d0
        lost, duplicated = check(store, tally.acks, names)
        batches = sum(int(hot.hget(keys.key(a, keys.META), "batch_seq") or 0) for a in names)
        store.close()
        return {
            "mode": mode,
            "broker": args.broker + (" (no confirms)" if args.broker == "amqp" and args.no_confirm else ""),
            "agents": args.agents,
            "clients": args.clients,
            "apis": args.apis,
            "workers": args.workers,
            "model": args.model,
            "startup_s": round(startup_s, 1),
            "load_s": round(load_s, 1),
            "appends": len(tally.acks),
            "appends_per_s": round(len(tally.acks) / load_s, 1),
            "append_p50_ms": round(percentile(tally.append_ms, 0.5), 2),
            "append_p99_ms": round(percentile(tally.append_ms, 0.99), 2),
            "searches": len(tally.search_ms),
            "searches_per_s": round(len(tally.search_ms) / load_s, 1),
            "search_p50_ms": round(percentile(tally.search_ms, 0.5), 2),
            "search_p99_ms": round(percentile(tally.search_ms, 0.99), 2),
            "eviction_batches": batches,
            "backlog_max": max(samples, default=0),
            "backlog_mean": round(statistics.fmean(samples), 1) if samples else 0.0,
            "backlog_at_stop": at_stop,
            "drained": drain_ok,
            "drain_s": round(drain_s, 1),
            "lost": lost,
            "duplicated": duplicated,
            "unacknowledged": tally.unacked,
            "errors": dict(tally.errors),
            "load_average": [round(x, 2) for x in load_avg],
        }
    finally:
        procs.kill_all()
        if args.broker == "amqp":
            with contextlib.suppress(Exception):  # leave the shared RabbitMQ's queues empty
                from vcm.settings import load_settings
                from vcm.workers.build import create_app

                create_app(load_settings(environ={"VCM_BROKER_URL": AMQP_URL})).control.purge()


def check(store: MemoryStore, acks: list[Ack], agents: list[str]) -> tuple[int, int]:
    """(lost, duplicated) over every acknowledged append, read back from the store."""
    by_id: dict[str, dict[str, str]] = {}
    ids_of_key: dict[tuple[str, str], set[str]] = defaultdict(set)
    listed_twice = 0
    for agent in agents:
        stored: dict[str, str] = {}
        for m in all_messages(store, agent):
            if m.message_id in stored:
                listed_twice += 1
            stored[m.message_id] = m.content
            if f"[{MARK} " in m.content:
                key = m.content.rsplit(f"[{MARK} ", 1)[1].rstrip("]")
                ids_of_key[(agent, key)].add(m.message_id)
        by_id[agent] = stored
    lost = sum(1 for a in acks if by_id[a.agent].get(a.message_id) != a.content)
    duplicated = listed_twice + sum(len(ids) - 1 for ids in ids_of_key.values() if len(ids) > 1)
    return lost, duplicated


# --- report --------------------------------------------------------------------------------------
COLUMNS = [
    ("hot state", "mode"), ("appends/s", "appends_per_s"), ("append p50/p99 ms", None),
    ("searches/s", "searches_per_s"), ("search p50/p99 ms", None), ("batches", "eviction_batches"),
    ("backlog max/stop", None), ("drain s", "drain_s"), ("lost", "lost"), ("dup", "duplicated"),
    ("load avg", None),
]  # fmt: skip


def render(rows: list[dict[str, Any]]) -> str:
    head = [c for c, _ in COLUMNS]
    body = []
    for r in rows:
        cells = []
        for name, key in COLUMNS:
            if key is not None:
                cells.append(str(r[key]))
            elif name.startswith("append"):
                cells.append(f"{r['append_p50_ms']} / {r['append_p99_ms']}")
            elif name.startswith("search"):
                cells.append(f"{r['search_p50_ms']} / {r['search_p99_ms']}")
            elif name.startswith("backlog"):
                cells.append(f"{r['backlog_max']} / {r['backlog_at_stop']}")
            else:
                cells.append(" ".join(str(x) for x in r["load_average"]))
        body.append(cells)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    r0 = rows[0]
    lines.append(
        f"\n{r0['agents']} agents, {r0['clients']} clients, {r0['apis']} API processes, {r0['workers']} workers, "
        f"model {r0['model']}, broker {r0['broker']}, {r0['load_s']} s of load each"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--mode", choices=["single", "cluster", "both"], default="both")
    p.add_argument("--agents", type=int, default=20)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--apis", type=int, default=2)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--search-share", type=float, default=0.1)
    p.add_argument("--model", default="vcm-small-8k")
    p.add_argument("--broker", choices=["redis", "amqp"], default="redis")
    p.add_argument("--no-confirm", action="store_true", help="RabbitMQ without publisher confirms")
    p.add_argument("--startup-timeout", type=float, default=180.0)
    p.add_argument("--drain-timeout", type=float, default=300.0)
    add_json_flag(p)
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, store)")
    args = p.parse_args(argv)
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        print("load: redis-server and redis-cli must be on PATH", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="vcm-load-"))
    rows = []
    try:
        for mode in ["single", "cluster"] if args.mode == "both" else [args.mode]:
            rows.append(run(mode, args, root))
            print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"load: work directory kept: {root}", file=sys.stderr)
    print(render(rows))
    write_json(args.json, rows)
    ok = all(r["drained"] and r["lost"] == 0 and r["duplicated"] == 0 for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
