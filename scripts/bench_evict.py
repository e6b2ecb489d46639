#!/usr/bin/env python3
"""Eviction job latency on CPU (not a test): one ``evict_batch`` = read the batch + summarise +
drift check + store commit + finish in Redis, with the extractive summariser and the real
embedding model.

    .venv/bin/python scripts/bench_evict.py [--samples 40] [--model vcm-small-8k[,gpt-4o,...]]
        [--backends torch,onnx,onnx-int8] [--redis redis://127.0.0.1:6379/12] [--json out.json]

The conversation is LoCoMo (``--data``, or ``$VCM_EVAL_DATA/locomo_dev.json``: real multi-session
dialogue with names and dates) when given, else generated lines. Hot state is the in-process fakeredis unless
``--redis`` names a scratch database (its agent keys are deleted afterwards); the store is a
temporary SQLite file. The embedder's load time is reported apart: workers load it once per
process, before their first job.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import fakeredis
import redis

from vcm.dispatch import RecordingDispatcher
from vcm.durable import agent_config
from vcm.eval.bench import DATA_ENV, add_data_flag, add_json_flag, data_path, percentile, write_json
from vcm.eval.prior_facts import add_prior_facts_flag, hold_prior_facts
from vcm.hotpath.budget import Budget
from vcm.hotpath.state import HotState
from vcm.settings import load_settings
from vcm.store import open_store
from vcm.tasks import evict
from vcm.tasks.deps import Deps
from vcm.workers.runtime import LazyEmbed, build_summarizer

ROOT = Path(__file__).resolve().parent.parent

T = TypeVar("T")


def turns(locomo: Path | None) -> Iterator[tuple[str, str]]:
    """(speaker, text) of a long conversation, endlessly."""
    if locomo is not None:
        samples = json.loads(locomo.read_text())
        dialogue = []
        for sample in samples:
            conv = sample["conversation"]
            n = 1
            while f"session_{n}" in conv:
                dialogue += [(t["speaker"], t["text"]) for t in conv[f"session_{n}"] if t.get("text")]
                n += 1
    else:
        dialogue = [
            ("Alice", f"On day {i} we moved ticket INV-{1000 + i} to Bob; the weather was mild.") for i in range(500)
        ]
    while True:
        yield from dialogue


class Phases:
    """Wall and CPU time spent in each wrapped step of the current job. CPU time is what the
    job costs on an idle core; wall time includes waiting for a core on a busy machine."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., T]) -> Callable[..., T]:
        def timed(*args: Any, **kwargs: Any) -> T:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - wall, time.process_time() - cpu)

        return timed

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.current[name] = self.current.get(name, 0.0) + wall
        self.current[f"{name} cpu"] = self.current.get(f"{name} cpu", 0.0) + cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--model", default="vcm-small-8k", help="models of [models], comma-separated; each window sets a batch size"
    )
    parser.add_argument(
        "--backends", default="", help="[embedding] backends to compare, comma-separated (default: the configured one)"
    )
    parser.add_argument("--redis", default="", help="scratch Redis URL (default: in-process fakeredis)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads of the job's model: 1 as each Celery worker process runs it (the default), 0 for "
        "the backend's own default (one per core), as embedded mode's model process runs it",
    )
    add_prior_facts_flag(parser, "its first job (each fact a job extracts is compared with them)")
    add_json_flag(parser)
    add_data_flag(parser)
    args = parser.parse_args()
    args.data = data_path(args.data) if args.data or os.environ.get(DATA_ENV) else None
    backends = [b for b in args.backends.split(",") if b] or [""]
    runs = [measure(args, backend, model) for model in args.model.split(",") for backend in backends]
    if len(runs) > 1:
        print(f"\n{'window':<16}{'backend':<12}{'p50 ms':>9}{'p95 ms':>9}{'embed p50':>11}{'load':>7}  p95 < 1 s")
        for r in runs:
            total = r["total"]
            print(
                f"{r['model']:<16}{r['backend']:<12}{total['wall_p50_ms']:>9}{total['wall_p95_ms']:>9}"
                f"{r['embed']['wall_p50_ms']:>11}{r['load_average_1m']:>7}  {'met' if r['met'] else 'NOT met'}"
            )
    if args.json:
        write_json(args.json, runs[0] if len(runs) == 1 else {"runs": runs})


def measure(args: argparse.Namespace, backend: str, model: str) -> dict[str, Any]:
    """The jobs of one window with one embedding backend ("" = the configured one)."""
    tmp = Path(tempfile.mkdtemp(prefix="vcm-bench-evict-"))
    overrides: dict[str, Any] = {"store_url": f"sqlite:///{tmp / 'vcm.db'}"}
    if backend:
        overrides["embedding"] = {"backend": backend, "batch_backend": "same"}  # the named one runs the job
    settings = load_settings(overrides=overrides)
    client = redis.Redis.from_url(args.redis, decode_responses=True) if args.redis else None
    hot = HotState(client or fakeredis.FakeRedis(decode_responses=True), settings)
    store = open_store(settings.store_url)
    embed = LazyEmbed(settings, threads=settings.embedding.threads or args.threads)
    started = time.perf_counter()
    embed.warm()
    load_s = time.perf_counter() - started

    phases = Phases()
    deps = Deps(settings, hot, store, RecordingDispatcher(), embed, build_summarizer(settings))
    deps.summarizer = phases.wrap("summarise+drift", deps.summarizer)
    deps.embed = phases.wrap("embed", deps.embed)
    store.commit_eviction = phases.wrap("commit", store.commit_eviction)  # type: ignore[method-assign]
    hot.finish_eviction = phases.wrap("finish", hot.finish_eviction)  # type: ignore[method-assign]

    agent = f"bench-{uuid.uuid4().hex[:8]}"
    prompt, incarnation = "You are a helpful assistant with a long memory.", uuid.uuid4().hex
    info = hot.create_agent(agent, model=model, system_prompt=prompt, incarnation=incarnation)
    # The store's record too: the job's writes are fenced by the agent's incarnation (issue 28).
    store.put_agent(agent, agent_config(info.model, prompt, ()), incarnation=incarnation)
    budget = Budget.for_window(hot.agent(agent).window, settings.budget)
    hold_prior_facts(store, agent, args.prior_facts, len(embed(["dimension"])[0]))
    source = turns(args.data)
    jobs: list[dict[str, float]] = []
    try:
        while len(jobs) < args.samples + args.warmup:
            speaker, text = next(source)
            result = hot.append(agent, "user", text, name=speaker.replace(" ", "_")[:64])
            if result.batch is None:
                continue
            for batch in hot.pending_batches(agent):
                phases.current = {}
                wall, cpu = time.perf_counter(), time.process_time()
                outcome = evict.evict_batch(deps, agent, batch)
                phases.add("total", time.perf_counter() - wall, time.process_time() - cpu)
                assert outcome.outcome == "committed", outcome
                jobs.append(dict(phases.current))
        evicted = hot.snapshot(agent).counter("evicted")  # read before a scratch Redis is cleaned up
    finally:
        if client is not None:
            for key in client.scan_iter(match=f"vcm:{{{agent}}}:*"):
                client.delete(key)
            client.srem("vcm:agents", agent)
    measured = jobs[args.warmup :]
    evicts = store.query_events(agent, ["evict"], limit=1000).items
    names = ["total", "summarise+drift", "embed", "commit", "finish"]
    figures: dict[str, Any] = {
        "model": model,
        "backend": embed.embedder().backend,  # what ran the job ("auto" resolved)
        "window": budget.window,
        "summary_cap_tokens": budget.summary_cap,
        "batches": len(measured),
        "messages_per_batch": round(evicted / len(jobs), 1),
        "embedder_load_s": round(load_s, 2),
        "prior_facts": args.prior_facts,
        "threads": args.threads,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "summary_drift_mean": round(statistics.mean(e.payload["drift"] for e in evicts), 4),
        "resummarized": sum(1 for e in evicts if e.payload["resummarized"]),
    }
    print(
        f"evict_batch on {model} with {embed.embedder().backend} on {args.threads or 'default'} threads "
        f"(window {budget.window}, summary cap "
        f"{budget.summary_cap} tokens), {figures['messages_per_batch']} messages per batch, {len(measured)} jobs, "
        f"embedder load {load_s:.1f}s, drift {figures['summary_drift_mean']} (re-summarised "
        f"{figures['resummarized']} of {len(evicts)})"
    )
    print(f"{'phase':<18}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'cpu p50':>9}{'cpu p95':>9}")
    for name in names:
        row: dict[str, float] = {}
        for suffix, key in (("", "wall"), (" cpu", "cpu")):
            values = [j.get(name + suffix, 0.0) * 1000 for j in measured]
            row |= {
                f"{key}_p50_ms": round(percentile(values, 0.5), 1),
                f"{key}_p95_ms": round(percentile(values, 0.95), 1),
                f"{key}_max_ms": round(max(values), 1),
            }
        figures[name] = row
        print(
            f"{name:<18}{row['wall_p50_ms']:>9}{row['wall_p95_ms']:>9}{row['wall_max_ms']:>9}"
            f"{row['cpu_p50_ms']:>9}{row['cpu_p95_ms']:>9}"
        )
    figures["load_average_1m"] = round(os.getloadavg()[0], 2)
    figures["cpu_count"] = os.cpu_count()
    figures["met"] = met = figures["total"]["wall_p95_ms"] < 1000
    print(
        f"target p95 < 1000 ms: {'met' if met else 'NOT met'} (wall); "
        f"load average {figures['load_average_1m']} on {os.cpu_count()} CPUs"
    )
    store.close()
    return figures


if __name__ == "__main__":
    main()
