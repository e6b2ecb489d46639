#!/usr/bin/env python3
"""Hot-path benchmark against a real Redis (not a test): PING, append and flush-append latency,
and what durability costs an append through the service (write-behind vs write-through to the
embedded SQLite store, which holds every acknowledged message before the append returns).

    .venv/bin/python scripts/bench_hotpath.py [--redis redis://127.0.0.1:6379/12] [--json out.json]

Prints a table and writes ping/append/flush figures as JSON. The Redis database given is
flushed first: point it at a scratch database.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import redis

from vcm.eval.bench import add_json_flag, percentile, write_json
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store import open_store

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jolly vexing bards".split()  # noqa: SIM905


def message(i: int, tokens: int = 100) -> str:
    # ~1 token per word for these common words; a counter makes each message distinct.
    words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(tokens - 8)]
    return f"msg {i}: " + " ".join(words)


def bench_ping(client: redis.Redis, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        client.ping()
        out.append((time.perf_counter() - t) * 1000)
    return out


def bench_append(hot: HotState, n: int) -> tuple[list[float], float]:
    hot.create_agent("bench-append", model="gpt-4.1", system_prompt="bench")  # 1M window: no flush
    for i in range(200):  # warm-up: scripts loaded, encodings cached
        hot.append("bench-append", "user", message(i))
    out = []
    start = time.perf_counter()
    for i in range(n):
        text = message(i)
        t = time.perf_counter()
        hot.append("bench-append", "user", text)
        out.append((time.perf_counter() - t) * 1000)
    elapsed = time.perf_counter() - start
    return out, n / elapsed


def bench_flush(hot: HotState, model: str, samples: int) -> tuple[list[float], int]:
    agent = f"bench-flush-{model}"
    hot.create_agent(agent, model=model, system_prompt="bench")
    out: list[float] = []
    fifo_sizes = []
    i = 0
    while len(out) < samples:
        t = time.perf_counter()
        res = hot.append(agent, "user", message(i))
        dt = (time.perf_counter() - t) * 1000
        i += 1
        if res.batch is not None:
            out.append(dt)
            fifo_sizes.append(res.batch.count)
            hot.finish_eviction(agent, res.batch.id, f"summary after batch {res.batch.id}")
    return out, int(statistics.mean(fifo_sizes))


class _NoDispatch:
    """Publishing is measured elsewhere (scripts/bench_api.py): here only the store write counts."""

    def spool(self, agent_id: str, message_ids: object) -> None: ...

    def evict(self, agent_id: str, batch_id: int) -> None: ...

    def ingest(self, request: object) -> None: ...


def bench_durability(client: redis.Redis, mode: str, n: int) -> list[float]:
    """Service appends (the façade: id floor, audit, write-through when asked) in ``mode``."""
    settings = load_settings(overrides={"durability": {"messages": mode}}, environ={})
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/bench.db")
        service = MemoryService(HotState(client, settings), store, _NoDispatch())
        agent = f"bench-{mode}"
        service.create_agent(agent, model="gpt-4.1", system_prompt="bench")
        for i in range(200):
            service.append(agent, "user", message(i))
        out = []
        for i in range(n):
            text = message(i)
            t = time.perf_counter()
            service.append(agent, "user", text)
            out.append((time.perf_counter() - t) * 1000)
        store.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/12")
    add_json_flag(parser, "write the figures to this file")
    parser.add_argument("--pings", type=int, default=5000)
    parser.add_argument("--appends", type=int, default=5000)
    parser.add_argument("--flushes", type=int, default=200)
    args = parser.parse_args()

    client = redis.Redis.from_url(args.redis, decode_responses=True)
    client.flushdb()
    hot = HotState(client, load_settings(environ={}))
    ping = bench_ping(client, args.pings)
    append, rate = bench_append(hot, args.appends)
    flush8, evicted8 = bench_flush(hot, "vcm-small-8k", args.flushes)
    flush128, evicted128 = bench_flush(hot, "gpt-4o", max(20, args.flushes // 4))
    behind = bench_durability(client, "write_behind", args.appends // 2)
    through = bench_durability(client, "write_through", args.appends // 2)
    client.flushdb()

    figures = {
        "ping_p50_ms": percentile(ping, 0.50),
        "ping_p99_ms": percentile(ping, 0.99),
        "append_p50_ms": percentile(append, 0.50),
        "append_p99_ms": percentile(append, 0.99),
        "appends_per_s": rate,
        "append_p50_in_pings": percentile(append, 0.50) / percentile(ping, 0.50),
        "flush_p50_ms_8k": percentile(flush8, 0.50),
        "flush_p99_ms_8k": percentile(flush8, 0.99),
        "flush_p50_ms_128k": percentile(flush128, 0.50),
        "flush_p99_ms_128k": percentile(flush128, 0.99),
        "flush_batch_messages_8k": evicted8,
        "flush_batch_messages_128k": evicted128,
        "service_append_write_behind_p50_ms": percentile(behind, 0.50),
        "service_append_write_behind_p99_ms": percentile(behind, 0.99),
        "service_append_write_through_p50_ms": percentile(through, 0.50),
        "service_append_write_through_p99_ms": percentile(through, 0.99),
        "write_through_cost_p50_in_pings": (percentile(through, 0.50) - percentile(behind, 0.50))
        / percentile(ping, 0.50),
    }
    print(f"{'measure':<34}{'value':>12}")
    for key, value in figures.items():
        print(f"{key:<34}{value:>12.3f}")
    if args.json:
        write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
