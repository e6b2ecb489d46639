#!/usr/bin/env python3
"""Change-notification benchmark (not a test): how long after instance A's write instance B's
cache hears of it.

    .venv/bin/python scripts/bench_sync.py [--changes 200] [--interval 0.05]
        [--redis redis://127.0.0.1:6379/12 --apis 2] [--poll-s 0.1] [--json out.json]

Starts real ``vcm serve`` processes (embedded mode by default: in-process fakeredis, one API;
with ``--redis`` a real Redis whose database must be empty and is flushed after, and ``--apis N``
API processes on it: A writes through the first, B follows the last, so a change crosses
processes through the agent's feed in Redis). Instance B is a second process of this script
(``--follower``): a ``VcmClient`` with a local cache (``CacheConfig``) that has read the key, so
its follower thread is on the agent's change stream; it prints the time each change reached its
cache. Instance A, in this process, writes the key through its own cache ``--changes`` times,
``--interval`` apart. Latency = B's receipt minus A's acknowledged write (same machine, same
clock); also from the start of A's write. The server looks for new changes every
``[sync] poll_s`` (``--poll-s``), which bounds the latency from above.

Also measured on A: a cache hit, a read-through miss, a write-through write, ``sync()``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vcm import CacheConfig, VcmClient
from vcm.eval.bench import add_json_flag, percentile, write_json
from vcm.eval.serving import free_port, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
ADMIN_TOKEN = "bench-admin-" + secrets.token_urlsafe(24)
AGENT = "bench-sync"
KEY = "counter"


@contextmanager
def servers(count: int, redis_url: str, poll_s: float | None, workdir: Path) -> Iterator[list[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env |= {
        "VCM_API__ADMIN_TOKEN": ADMIN_TOKEN,
        "VCM_STORE_URL": f"sqlite:///{workdir / 'vcm.db'}",
        "VCM_REDIS_URL": redis_url,
        "VCM_BROKER_URL": "memory://",
        "VCM_RECALL__VECTORS": "false",
        "VCM_WORKER__PRELOAD_EMBEDDER": "false",
        "VCM_LOG_LEVEL": "WARNING",
        "HF_HUB_OFFLINE": "1",
    }
    if poll_s is not None:
        env["VCM_SYNC__POLL_S"] = str(poll_s)
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for i in range(count):
            port = free_port()
            with (workdir / f"serve-{i}.log").open("wb") as log:
                argv = [str(ROOT / ".venv" / "bin" / "vcm"), "serve", "--host", "127.0.0.1", "--port", str(port)]
                procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=workdir))
            urls.append(f"http://127.0.0.1:{port}")
        for i, (proc, url) in enumerate(zip(procs, urls, strict=True)):
            wait_healthy(proc, url, log=workdir / f"serve-{i}.log")
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def follower(url: str, token: str) -> int:
    """Instance B: print {"version", "t"} for each change of KEY its cache hears of."""
    lock = threading.Lock()

    def seen(agent_id: str, change: dict[str, Any]) -> None:
        if change.get("key") == KEY:
            with lock:
                print(json.dumps({"version": change.get("version"), "t": time.time()}), flush=True)

    with VcmClient(url, token, cache=CacheConfig(sync_interval_s=0, instance_id="bench-b")) as b:
        b.on_change(seen)
        b.state(AGENT, KEY)  # the cache holds it; the follower thread is on the stream
        with lock:
            print(json.dumps({"ready": True}), flush=True)
        sys.stdin.readline()  # until told to stop
    return 0


def summary(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {
        "n": len(ms), "mean_ms": statistics.fmean(ms), "p50_ms": percentile(ms, 0.5), "p95_ms": percentile(ms, 0.95),
        "p99_ms": percentile(ms, 0.99), "max_ms": max(ms),
    }  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    redis_url = args.redis or ""
    apis = args.apis if redis_url else 1
    with (
        tempfile.TemporaryDirectory(prefix="vcm-bench-sync-") as tmp,
        servers(apis, redis_url, args.poll_s, Path(tmp)) as urls,
    ):
        with VcmClient(urls[0], ADMIN_TOKEN) as admin:
            token = admin.create_agent(AGENT)["token"]
            admin.set_state(AGENT, KEY, 0)
        b = subprocess.Popen(
            [sys.executable, __file__, "--follower", urls[-1], token],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        assert b.stdout is not None and b.stdin is not None
        received: dict[str, float] = {}

        def read() -> None:
            assert b.stdout is not None
            for line in b.stdout:
                msg = json.loads(line)
                if "version" in msg:
                    received[str(msg["version"])] = float(msg["t"])

        assert json.loads(b.stdout.readline()) == {"ready": True}
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        config = CacheConfig(sync_interval_s=0, conflict="last_write_wins", instance_id="bench-a")
        sent: dict[str, tuple[float, float]] = {}
        reads_hit: list[float] = []
        reads_miss: list[float] = []
        writes: list[float] = []
        syncs: list[float] = []
        with VcmClient(urls[0], token, cache=config) as a:
            a.state(AGENT, KEY)
            time.sleep(1.0)  # B's follower is on the stream (its first frame is in)
            for i in range(1, args.changes + 1):
                started = time.time()
                reply = a.set_state(AGENT, KEY, i)
                acked = time.time()
                sent[str(reply["_rev"])] = (started, acked)
                writes.append(acked - started)
                t0 = time.perf_counter()
                a.state(AGENT, KEY)  # just written through: a hit
                reads_hit.append(time.perf_counter() - t0)
                time.sleep(args.interval)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not set(sent) <= set(received):
                time.sleep(0.05)
            for i in range(20):  # a read-through miss: another key each time
                admin_key = f"miss-{i}"
                with VcmClient(urls[0], token) as plain:
                    plain.set_state(AGENT, admin_key, i)
                t0 = time.perf_counter()
                a.state(AGENT, admin_key)
                reads_miss.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                a.sync()
                syncs.append(time.perf_counter() - t0)
            metrics = a.sync_metrics()
        b.stdin.write("stop\n")
        b.stdin.flush()
        b.wait(timeout=30)
    after_ack = [received[v] - ack for v, (_, ack) in sent.items() if v in received]
    after_start = [received[v] - start for v, (start, _) in sent.items() if v in received]
    return {
        "mode": f"redis, {apis} API process(es)" if redis_url else "embedded (fakeredis), 1 API process",
        "poll_s": args.poll_s if args.poll_s is not None else "default (0.1)",
        "changes": len(sent),
        "missed": len(set(sent) - set(received)),
        "notification_after_ack": summary(after_ack) if after_ack else None,
        "notification_after_write_start": summary(after_start) if after_start else None,
        "write_through": summary(writes),
        "cache_hit": summary(reads_hit),
        "read_through_miss": summary(reads_miss),
        "sync": summary(syncs),
        "client_metrics": metrics,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between A's writes")
    parser.add_argument("--redis", help="a real Redis (empty database) instead of the embedded one")
    parser.add_argument("--apis", type=int, default=2, help="API processes on --redis (A uses the first, B the last)")
    parser.add_argument("--poll-s", type=float, help="[sync] poll_s of the servers")
    add_json_flag(parser)
    parser.add_argument("--follower", nargs=2, metavar=("URL", "TOKEN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.follower:
        return follower(*args.follower)
    if args.redis:
        import redis

        client = redis.Redis.from_url(args.redis)
        if client.dbsize():
            parser.error(f"{args.redis} is not empty")
    try:
        out = run(args)
    finally:
        if args.redis:
            redis.Redis.from_url(args.redis).flushdb()
    print(f"{out['mode']}, poll_s {out['poll_s']}: {out['changes']} changes, {out['missed']} not heard of")
    for name in ("notification_after_ack", "notification_after_write_start", "write_through", "cache_hit",
                 "read_through_miss", "sync"):  # fmt: skip
        s = out[name]
        if s:
            print(f"  {name:32s} mean {s['mean_ms']:8.2f} ms  p50 {s['p50_ms']:8.2f}  p95 {s['p95_ms']:8.2f}  "
                  f"p99 {s['p99_ms']:8.2f}  max {s['max_ms']:8.2f}")  # fmt: skip
    cache = out["client_metrics"]["cache"]
    print(f"  A's cache: hit ratio {cache['hit_ratio']:.2f} ({cache['hits']} hits, {cache['misses']} misses)")
    if args.json:
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
