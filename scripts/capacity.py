#!/usr/bin/env python3
"""Measures the sizes ``docs/capacity.md`` builds on (bounded, loopback only):

* Redis: memory per agent per window size, with its FIFO filled to just under the flush line
  (the most an agent holds between evictions), after one eviction has finished (the FIFO at the
  target plus a summary at its cap), and per idempotency record (kept ``idempotency_ttl_s``). A
  private ``redis-server`` on a free port in 7000-7099; ``INFO memory`` deltas and ``MEMORY USAGE``.
* The embedded store: bytes on disk per message (SQLite row, event row, text index), per message
  vector and per archival chunk at 384 and 1024 dimensions (file sizes before and after).

    .venv/bin/python scripts/capacity.py [--agents 5] [--messages 20000] [--chunks 10000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import redis

from vcm.eval.bench import add_json_flag, write_json
from vcm.eval.serving import free_port
from vcm.hotpath import keys
from vcm.hotpath.state import HotState
from vcm.settings import load_settings
from vcm.store import open_store
from vcm.store.types import ArchivalChunk, StoredMessage

WINDOWS = {"cap-2k": 2048, "cap-8k": 8192, "cap-32k": 32768, "cap-128k": 131072}
WORDS = (
    "the a we you they I it is was to of and in on for with at from by about as my your our "
    "trip train ticket harbour ferry museum garden dinner friend sister brother office project "
    "meeting invoice contract weekend morning evening yesterday tomorrow Porto Lyon Kyoto Quito "
    "moved visited wrote asked planned remembered booked cancelled finished started bought sold "
    "really quite very never always maybe perhaps because although while after before"
)
VOCAB = WORDS.split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(words)).capitalize() + "."


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def agent_bytes(client: redis.Redis, agent: str) -> int:
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in client.scan_iter(match=f"vcm:{{{agent}}}:*"))


def measure_redis(n_agents: int) -> dict[str, Any]:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="vcm-capacity-redis-"))
    server = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        client = redis.Redis(port=port, decode_responses=True)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        settings = load_settings(overrides={"models": WINDOWS}, environ={})
        hot = HotState(client, settings)
        rng = random.Random(7)
        out: dict[str, Any] = {"redis_version": client.info("server")["redis_version"]}
        for model, window in WINDOWS.items():
            client.flushall()
            base = used(client)
            row: dict[str, Any] = {"window": window}
            full, after, messages, tokens = [], [], 0, 0
            for a in range(n_agents):
                agent = f"{model}-{a}"
                hot.create_agent(agent, model=model, system_prompt=sentence(rng, 40))
                count = 0
                while True:
                    r = hot.append(agent, "user" if count % 2 == 0 else "assistant", sentence(rng, 30))
                    count += 1
                    if r.total > 0.88 * window:  # the next few appends would flush
                        break
                full.append(agent_bytes(client, agent))
                messages += count
                tokens += r.total
            row["messages_per_agent"] = messages / n_agents
            row["tokens_per_message"] = round(tokens / messages, 1)
            row["bytes_full"] = round(sum(full) / n_agents)
            row["bytes_full_info"] = round((used(client) - base) / n_agents)
            row["bytes_per_message"] = round(sum(full) / messages)
            for a in range(n_agents):
                agent = f"{model}-{a}"
                r = hot.append(agent, "user", sentence(rng, 30))
                while r.batch is None:
                    r = hot.append(agent, "user", sentence(rng, 30))
                cap = int(client.hget(keys.key(agent, keys.META), "sum_cap") or 0)
                text = sentence(rng, int(cap * 0.7))
                while hot.summary_tokens(agent, text) > cap:
                    text = text[: int(len(text) * 0.9)]
                hot.finish_eviction(agent, r.batch.id, text)
                after.append(agent_bytes(client, agent))
            row["bytes_after_eviction"] = round(sum(after) / n_agents)
            out[model] = row
        client.flushall()
        agent = "idem"
        hot.create_agent(agent, model="cap-128k")
        before = used(client)
        for i in range(2000):
            hot.append(agent, "user", sentence(rng, 30), idempotency_key=f"key-{i:06d}")
        idem = [int(client.memory_usage(k, samples=0) or 0) for k in client.scan_iter(match=f"vcm:{{{agent}}}:idem:*")]
        out["idempotency_record_bytes"] = round(sum(idem) / len(idem))
        out["keyed_append_bytes_info"] = round((used(client) - before) / 2000)
        return out
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    unit_rows: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return unit_rows


def measure_store(n_messages: int, n_chunks: int) -> dict[str, Any]:
    rng = random.Random(11)
    nrng = np.random.default_rng(11)
    out: dict[str, Any] = {}
    for dim in (384, 1024):
        workdir = Path(tempfile.mkdtemp(prefix="vcm-capacity-store-"))
        try:
            store = open_store(str(workdir / "vcm.db"))
            empty = disk(workdir)
            now = time.time()
            agents = [f"a{i}" for i in range(10)]
            batch: list[StoredMessage] = []
            chars = 0
            for i in range(n_messages):
                content = sentence(rng, 30)
                chars += len(content)
                agent = agents[i % len(agents)]
                seq = i // len(agents) + 1
                batch.append(StoredMessage(agent, f"m{seq}", seq, "user", content, 40, now + i * 0.001))
                if len(batch) == 1000:
                    store.spool_messages(batch)
                    batch = []
            if batch:
                store.spool_messages(batch)
            store.close()
            store = open_store(str(workdir / "vcm.db"))
            with_messages = disk(workdir)
            per_agent = n_messages // len(agents)
            for agent in agents:
                vectors = unit(nrng, per_agent, dim)
                ids = [f"m{s}" for s in range(1, per_agent + 1)]
                for j in range(0, per_agent, 1000):
                    store.put_message_vectors(
                        agent, list(zip(ids[j : j + 1000], vectors[j : j + 1000].tolist(), strict=True)), f"cap:{dim}"
                    )
            store.close()
            store = open_store(str(workdir / "vcm.db"))
            with_vectors = disk(workdir)
            vectors = unit(nrng, n_chunks, dim)
            chunks = []
            for i in range(n_chunks):
                text = " ".join(sentence(rng, 14) for _ in range(7))  # ~128 tokens, the default chunk
                agent, doc, index = agents[i % len(agents)], f"doc{i // 50}", i % 50
                vector = vectors[i].tolist()
                chunks.append(
                    ArchivalChunk(agent, doc, index, text, vector, "cosine", f"cap:{dim}", "cap", 0, len(text))
                )
                if len(chunks) == 1000:
                    store.ingest_archival(chunks)
                    chunks = []
            if chunks:
                store.ingest_archival(chunks)
            store.close()
            with_chunks = disk(workdir)
            out[str(dim)] = {
                "message_content_chars": round(chars / n_messages, 1),
                "bytes_per_message": round((with_messages - empty) / n_messages),
                "bytes_per_message_vector": round((with_vectors - with_messages) / n_messages),
                "bytes_per_chunk": round((with_chunks - with_vectors) / n_chunks),
            }
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="sizes for docs/capacity.md")
    p.add_argument("--agents", type=int, default=5)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--chunks", type=int, default=10_000)
    p.add_argument("--skip", choices=["redis", "store"], action="append", default=[])
    add_json_flag(p)
    args = p.parse_args(argv)
    result: dict[str, Any] = {}
    if "redis" not in args.skip:
        result["redis"] = measure_redis(args.agents)
    if "store" not in args.skip:
        result["store"] = measure_store(args.messages, args.chunks)
    print(json.dumps(result, indent=2))
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
