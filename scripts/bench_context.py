#!/usr/bin/env python3
"""What the context builder adds to a turn on the hot path: the hot context alone against the
full built prompt, per turn of a replayed LoCoMo conversation.

    .venv/bin/python scripts/bench_context.py [--data LOCOMO_JSON] [--json OUT]
        [--model vcm-demo-4k] [--turns 200] [--warmup 10] [--torch-threads N]

The agent is the one ``scripts/eval_context.py`` replays (fakeredis and an embedded SQLite store,
as ``vcm serve`` has them in embedded mode; every eviction batch committed by the cold path's own
``evict_batch``: extractive summary, shadow facts, message vectors; consolidation at the end of
each conversation), with the real embedding model: the service embeds queries in this process
with its own copy of it (``LazyEmbed.local()``), as ``vcm serve`` does. After each user turn
(when a chat turn builds its prompt) and its evictions, timed back to back:

* **hot**: ``MemoryService.context(agent)``, the system prompt, blocks, summary and FIFO;
* **full**: ``MemoryService.build_context(agent)``, the same plus the injected layers, for the
  latest user message (the turn just appended);
* **added**: full minus hot, the builder's cost per turn. Target: p50 ≤ 30 ms.

Where the builder's time goes: the service's and the store's calls it makes are wrapped for the
run and their exclusive wall time taken per build (a wrapped call's time less that of the wrapped
calls inside it; a few microseconds of overhead each): query embeddings (and how many per build),
the fact and recall searches in the store, the listing of facts, the write that counts retrieved
facts as used, the taint marks, the hot snapshot; ``builder`` is the rest (layer assembly and
token counting). Conversations are replayed in order until ``--turns`` user turns are measured;
the first ``--warmup`` are left out. ``--torch-threads``: the model's intra-op threads (default:
one, as ``vcm serve`` runs the service's query model; 2 shows what torch's default of one per
core would cost).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from eval_context import Replay, play, start

from vcm.eval.bench import add_data_flag, add_json_flag, data_path, write_json
from vcm.eval.conversation import Turn, parse_sample

TARGET_MS = 30.0
# What build_context reaches through the service and through its store, by the name reported.
SERVICE_CALLS = {
    "embed": "embed", "hot snapshot": "context", "fact search": "rank_facts", "recall search": "search_recall",
    "working set": "working_set", "fact listing": "list_facts", "state listing": "list_state",
    "fifo ids": "fifo_ids", "fact use": "_use", "taint marks": "mark", "agent": "agent", "skills": "_skills",
}  # fmt: skip
STORE_CALLS = {
    "store fact search": "search_facts", "store recall search": "search_recall_hybrid",
    "store fact query": "query_facts", "store fact touch": "touch_facts",
}  # fmt: skip


class Profile:
    """Exclusive wall time (s) and count of named calls, since the last :meth:`take`."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._inner: list[float] = []  # per open call: time of the wrapped calls inside it

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._inner.append(0.0)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                total = time.perf_counter() - t0
                inner = self._inner.pop()
                self.spent[name] = self.spent.get(name, 0.0) + total - inner
                self.calls[name] = self.calls.get(name, 0) + 1
                if self._inner:
                    self._inner[-1] += total

        return timed

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        spent, calls = self.spent, self.calls
        self.spent, self.calls = {}, {}
        return spent, calls


def instrument(run: Replay, profile: Profile) -> None:
    """Wrap the calls the builder makes, on this service and store only (instance attributes)."""
    service, store = run.service, run.service.store
    for name, attr in SERVICE_CALLS.items():
        setattr(service, attr, profile.wrap(name, getattr(service, attr)))
    for name, attr in STORE_CALLS.items():
        setattr(store, attr, profile.wrap(name, getattr(store, attr)))


def user_turns_to(turns: Sequence[Turn], speaker: str, wanted: int) -> int:
    """How many turns to replay for ``wanted`` turns of ``speaker`` (all when there are fewer)."""
    seen = 0
    for n, turn in enumerate(turns):
        seen += turn.speaker == speaker
        if seen >= wanted:
            return n + 1
    return len(turns)


def stats(samples: Sequence[float]) -> dict[str, float]:
    if not samples:
        return {}
    a = np.asarray(samples)
    return {
        "n": len(samples),
        "mean": round(float(a.mean()), 2),
        "p50": round(float(np.percentile(a, 50)), 2),
        "p95": round(float(np.percentile(a, 95)), 2),
        "p99": round(float(np.percentile(a, 99)), 2),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    samples = json.loads(Path(args.data).read_text(encoding="utf-8"))
    rows: list[dict[str, Any]] = []
    names: list[str] = []
    profile = Profile()
    load_before = os.getloadavg()
    started = time.perf_counter()

    def after_turn(run: Replay, turn: Turn, role: str) -> None:
        if role != "user":
            return
        t0 = time.perf_counter()
        run.service.context(run.agent)
        t1 = time.perf_counter()
        profile.take()  # the hot read above is not the builder's
        built = run.service.build_context(run.agent)
        t2 = time.perf_counter()
        spent, calls = profile.take()
        full = (t2 - t1) * 1000
        phases = {name: round(s * 1000, 3) for name, s in spent.items()}
        phases["builder"] = round(full - sum(phases.values()), 3)
        rows.append({
            "conversation": run.conv.sample_id, "dia_id": turn.dia_id, "evicted": run.evictions > 0,
            "hot_ms": round((t1 - t0) * 1000, 3), "full_ms": round(full, 3),
            "phases_ms": phases, "calls": calls, "embeds": calls.get("embed", 0), "layer_tokens": built.layer_tokens(),
        })  # fmt: skip

    for sample in samples:
        wanted = args.turns + args.warmup - len(rows)
        if wanted <= 0:
            break
        conv = parse_sample(dict(sample))
        run = start(sample, args.model, "model")
        if run.service.embed is not None:
            run.service.embed(["warm"])  # the model loaded before anything is timed
        if args.torch_threads:  # after the load, which sets the query model's own default
            import torch

            torch.set_num_threads(args.torch_threads)
        instrument(run, profile)
        names.append(conv.sample_id)
        play(run, user_turns_to(conv.turns, conv.speakers[0], wanted), after_turn)
        run.close()
        print(f"{conv.sample_id}: {len(rows)} turns measured, {run.evictions} batches, {run.seconds:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
    every = rows[args.warmup :]
    later = [r for r in every if r["evicted"]]
    return {
        "data": str(args.data),
        "model": args.model,
        "conversations": names,
        "turns": len(every),
        "warmup": args.warmup,
        "target_p50_ms": TARGET_MS,
        "hot_ms": stats([r["hot_ms"] for r in every]),
        "full_ms": stats([r["full_ms"] for r in every]),
        "added_ms": stats([r["full_ms"] - r["hot_ms"] for r in every]),
        "added_ms_after_first_eviction": stats([r["full_ms"] - r["hot_ms"] for r in later]),
        "met": bool(every) and stats([r["full_ms"] - r["hot_ms"] for r in every])["p50"] <= TARGET_MS,
        "phases_ms": phase_stats(every),
        "embeds_per_build": round(sum(r["embeds"] for r in every) / len(every), 2) if every else 0.0,
        "layer_tokens_mean": mean_tokens(every),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "cpus": os.cpu_count(),
        "torch_threads": _torch_threads(),
        "python": platform.python_version(),
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }


def phase_stats(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per phase: mean and p50 ms per build, and calls per build."""
    names = sorted({k for r in rows for k in r["phases_ms"]}, key=lambda k: -sum(r["phases_ms"].get(k, 0.0)
                                                                                 for r in rows))  # fmt: skip
    return {k: {"mean": round(sum(r["phases_ms"].get(k, 0.0) for r in rows) / len(rows), 2),
                "p50": stats([r["phases_ms"].get(k, 0.0) for r in rows])["p50"],
                "calls": round(sum(r["calls"].get(k, 0) for r in rows) / len(rows), 2)} for k in names}  # fmt: skip


def mean_tokens(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    names = sorted({k for r in rows for k in r["layer_tokens"]})
    return {k: round(sum(r["layer_tokens"].get(k, 0) for r in rows) / len(rows), 1) for k in names}


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def print_table(result: Mapping[str, Any]) -> None:
    print(
        f"context builder cost per turn ({result['turns']} user turns of {', '.join(result['conversations'])}, "
        f"window {result['model']}, {result['cpus']} CPUs, torch threads {result['torch_threads']}, "
        f"load average {result['load_average']['before'][0]} -> {result['load_average']['after'][0]})"
    )
    head = f"{'':<34}{'mean':>9}{'p50':>9}{'p95':>9}{'p99':>9}"
    print(head)
    print("-" * len(head))
    for label, key in (("hot context (context)", "hot_ms"), ("full prompt (build_context)", "full_ms"),
                       ("added by the builder", "added_ms"),
                       ("added, after the first eviction", "added_ms_after_first_eviction")):  # fmt: skip
        s = result[key]
        if s:
            print(f"{label:<34}{s['mean']:>9}{s['p50']:>9}{s['p95']:>9}{s['p99']:>9}")
    verdict = "met" if result["met"] else "missed"
    print(f"target: added p50 <= {result['target_p50_ms']} ms: {verdict}")
    print("where a build's time goes (exclusive ms per build, mean / p50, and calls per build):")
    for name, s in result["phases_ms"].items():
        print(f"  {name:<26}{s['mean']:>9}{s['p50']:>9}{s.get('calls', ''):>7}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_flag(parser)
    add_json_flag(parser, "write the figures (and every turn's) here")
    parser.add_argument("--model", default="vcm-demo-4k", help="a model of [models]: sets the window")
    parser.add_argument("--turns", type=int, default=200, help="user turns measured (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=10, help="first measured turns left out")
    parser.add_argument("--torch-threads", type=int, default=0, help="0: as vcm serve's query model (1)")
    args = parser.parse_args(argv)
    args.data = data_path(args.data)
    result = measure(args)
    print_table(result)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
