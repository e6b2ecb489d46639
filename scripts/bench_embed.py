#!/usr/bin/env python3
"""A query embedding on ONNX Runtime, the sleeping session against the spinning one, and on
OpenVINO (``[embedding] backend = "openvino"``: bfloat16 where the CPU has it), on idle cores
and with other work sharing them (a benchmark, not a test).

    .venv/bin/python scripts/bench_embed.py [--data LOCOMO_JSON] [--turns 200] [--busy 0,1,2]
        [--reps 2] [--no-openvino] [--json OUT]

The queries are what a prompt build embeds: a LoCoMo conversation's user turns (the first
speaker's), each alone or, when it names a speaker, with its name-free form in one padded batch
(``vcm.store.authors``, as ``[recall] query_vector_without_authors`` does). Each is embedded by
the configured ONNX model's two sessions (:class:`vcm.tasks.embedding_onnx.OnnxRunner`): the
one whose pool threads sleep between operators, and the one ``[embedding] spin_when_idle`` uses
on idle CPUs, whose threads spin within a run and stop at its end, and by OpenVINO's session of
the same export. Sessions take turns going first, query by query. ``--busy N``: N processes
spinning a pure-Python loop while the row is measured (the cores shared with other work).
Reported per row: p50 and p95 ms of single texts and of pairs, and the process's CPU seconds
per wall second.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vcm.eval.bench import add_data_flag, add_json_flag, data_path, percentile, write_json
from vcm.eval.conversation import parse_sample, speaker_name
from vcm.settings import load_settings
from vcm.store import authors
from vcm.tasks.embedding_onnx import OnnxEmbedder, OnnxRunner, open_session


def queries(data: Path, turns: int) -> list[list[str]]:
    """The first conversation's user turns, each with its name-free form when that differs."""
    conv = parse_sample(json.loads(data.read_text(encoding="utf-8"))[0])
    names = [speaker_name(s) for s in conv.speakers]
    out: list[list[str]] = []
    for turn in conv.turns:
        if turn.speaker != conv.speakers[0]:
            continue
        free = authors.without_names(turn.text, authors.mentioned(turn.text, names))
        out.append([turn.text] if free == turn.text else [turn.text, free])
        if len(out) == turns:
            break
    return out


def _spin_forever() -> None:
    while True:
        pass


def measure(runners: dict[str, OnnxRunner], texts: Sequence[list[str]], reps: int) -> dict[str, Any]:
    samples: dict[str, dict[int, list[float]]] = {name: {1: [], 2: []} for name in runners}
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for rep in range(reps):
        for i, query in enumerate(texts):
            names = list(runners)
            first = (i + rep) % len(names)
            order = names[first:] + names[:first]
            for name in order:
                t0 = time.perf_counter()
                runners[name].encode(query, batch_size=32)
                samples[name][len(query)].append((time.perf_counter() - t0) * 1000)
    cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    out: dict[str, Any] = {"cpu_per_wall": round(cpu, 2)}
    for name, by_size in samples.items():
        for size, values in by_size.items():
            label = "single" if size == 1 else "pair"
            if values:
                out[f"{name}_{label}"] = {
                    "n": len(values), "p50": round(statistics.median(values), 2),
                    "p95": round(percentile(values, 0.95), 2),
                }  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add_data_flag(parser)
    add_json_flag(parser)
    parser.add_argument("--turns", type=int, default=200, help="user turns embedded per row")
    parser.add_argument("--busy", default="0,1,2", help="rows: how many busy processes share the cores")
    parser.add_argument("--reps", type=int, default=2, help="passes over the turns per row")
    parser.add_argument(
        "--openvino", action=argparse.BooleanOptionalAction, default=True, help="also the openvino backend's session"
    )
    args = parser.parse_args(argv)
    settings = load_settings(environ={}).embedding
    backend = settings.backend if settings.backend.startswith("onnx") else "onnx"
    # The sleeping session is the embedder's own; the spinning one its twin over the same export.
    embedder = OnnxEmbedder(settings.model_copy(update={"backend": backend, "spin_when_idle": False}))
    sleeping = embedder.runner
    spinning = OnnxRunner(
        open_session(embedder.export.path, settings.threads, spin=True), sleeping.tokenizer, sleeping.pooling,
        sleeping.normalize, sleeping.max_seq_length,
    )  # fmt: skip
    runners = {"sleeping": sleeping, "spinning": spinning}
    precision = None
    if args.openvino:
        from vcm.tasks import embedding_openvino

        runners["openvino"] = OnnxEmbedder(settings.model_copy(update={"backend": "openvino"})).runner
        precision = embedding_openvino.precision()
    texts = queries(data_path(args.data), args.turns)
    for runner in runners.values():
        runner.encode(texts[0], batch_size=32)  # warm
    rows: dict[str, Any] = {}
    for busy in [int(x) for x in args.busy.split(",") if x.strip()]:
        workers = [multiprocessing.Process(target=_spin_forever, daemon=True) for _ in range(busy)]
        for w in workers:
            w.start()
        try:
            rows[str(busy)] = measure(runners, texts, args.reps)
        finally:
            for w in workers:
                w.terminate()
                w.join()
        row = rows[str(busy)]
        print(f"busy processes {busy} (cpu/wall {row['cpu_per_wall']}):", file=sys.stderr)
        for name in runners:
            single, pair = row.get(f"{name}_single", {}), row.get(f"{name}_pair", {})
            print(
                f"  {name:9s} single p50 {single.get('p50', 0):6.2f} p95 {single.get('p95', 0):6.2f} ms"
                f"   pair p50 {pair.get('p50', 0):6.2f} p95 {pair.get('p95', 0):6.2f} ms",
                file=sys.stderr,
            )
    write_json(
        args.json,
        {
            "model": settings.model or "bundled all-MiniLM-L6-v2",
            "backend": backend, "openvino_precision": precision, "threads": settings.threads,
            "cpus": os.cpu_count(), "turns": len(texts),
            "pairs": sum(len(q) == 2 for q in texts), "reps": args.reps, "rows": rows,
            "python": platform.python_version(),
        },
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
