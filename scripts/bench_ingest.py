#!/usr/bin/env python3
"""Archival ingestion throughput, late vs naive chunking (a benchmark, not a test).

    .venv/bin/python scripts/bench_ingest.py [--quick] [--data ../shared/data/locomo_dev.json] [--json OUT]

Same model, same documents, same chunks; only the embedding differs: ``naive`` runs the model
over each chunk's text, ``late`` over each document (in macro windows when it is longer than the
model window) and pools the chunks from its token outputs. Two phases, each timed per mode:

* ``embed``  - plan (tokenise, chunk, window) and embed every document, ``ingest.batch_documents``
  documents per model batch, as ingestion does; no store;
* ``ingest`` - :func:`tasks.ingest.ingest_paths` end to end, corpus files into a fresh embedded
  store (SQLite + indexes) per repetition.

The corpus is every LoCoMo session as one document (``--data``) or, with ``--synthetic N``,
N generated documents. An untimed warm-up run per mode on a few documents, then ``--reps``
repetitions with the mode order alternating; the table shows medians and minima (on a shared
machine, minima are the figure least disturbed by other load). Target: late within 10 % of naive.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from hotpath.settings import Settings, load_settings
from store import open_store
from tasks.embedding import Embedder, get_embedder
from tasks.ingest import ingest_paths
from tasks.late_chunking import MODES, DocumentPlan, LateChunker, Mode
from tasks.retrieval_eval import load_locomo

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/locomo_dev.json"
WORDS = [
    *("the", "team", "moved", "launch", "after", "review", "because", "budget", "numbers", "for"),
    *("northern", "region", "looked", "wrong", "and", "Maria", "asked", "Tom", "to", "check"),
    *("every", "invoice", "before", "Friday", "while", "new", "office", "in", "Lisbon", "opened"),
    *("with", "twelve", "engineers", "who", "build", "search", "tools", "doctors", "nurses", "it"),
]


def locomo_corpus(path: Path) -> list[str]:
    corpora = load_locomo(json.loads(path.read_text(encoding="utf-8")))
    return [d.text for docs, _ in corpora.values() for d in docs]


def synthetic_corpus(n: int, seed: int = 7) -> list[str]:
    """Documents of 20-60 sentences of 8-24 words, seeded so every run measures the same text."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(20, 60)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(8, 24))]
            sentences.append(" ".join(words).capitalize() + ".")
        docs.append(" ".join(sentences))
    return docs


def embed_once(chunker: LateChunker, texts: list[str], mode: Mode, cfg: Settings) -> dict[str, int]:
    step = cfg.ingest.batch_documents
    counts = {"chunks": 0, "tokens": 0, "windows": 0, "model_tokens": 0}
    for at in range(0, len(texts), step):
        plans: list[DocumentPlan] = [chunker.plan(t, cfg.chunking) for t in texts[at : at + step]]
        chunker.embed(plans, mode)
        for p in plans:
            counts["chunks"] += len(p.chunks)
            counts["tokens"] += len(p.token_ids)
            counts["windows"] += len(p.windows)
            specials = len(chunker.prefix) + len(chunker.suffix)
            if mode == "late":
                counts["model_tokens"] += sum(w.tokens + specials for w in p.windows)
            else:
                counts["model_tokens"] += sum(c.tokens + specials for c in p.chunks)
    return counts


def ingest_once(embedder: Embedder, folder: Path, mode: Mode, cfg: Settings) -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="vcm-bench-") as tmp:
        store = open_store(str(Path(tmp) / "vcm.db"))
        try:
            report = ingest_paths(store, embedder, "bench", [folder], mode=mode, settings=cfg)
        finally:
            store.close()
    if report.count("failed"):
        raise SystemExit(f"ingestion failed: {report.failures[0].error}")
    return {"chunks": report.chunks_written, "documents": report.count("ingested")}


def measure(run: Callable[[Mode], dict[str, int]], warm: Callable[[Mode], object], reps: int) -> dict[str, Any]:
    for mode in MODES:  # warm-up on a few documents: model pages, allocator pools, code paths
        warm(mode)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    counts: dict[str, dict[str, int]] = {}
    for rep in range(reps):
        order = MODES if rep % 2 == 0 else MODES[::-1]  # alternate, so drift hits both modes
        for mode in order:
            start, start_cpu = time.perf_counter(), time.process_time()
            counts[mode] = run(mode)
            times[mode].append(time.perf_counter() - start)
            cpu[mode].append(time.process_time() - start_cpu)
    out: dict[str, Any] = {}
    for mode in MODES:
        median = statistics.median(times[mode])
        out[mode] = {
            **counts[mode],
            "seconds": [round(t, 4) for t in times[mode]],
            "median_s": round(median, 4),
            "min_s": round(min(times[mode]), 4),
            "chunks_per_s": round(counts[mode]["chunks"] / median, 1),
            # CPU seconds of this process: on a shared machine, less disturbed by other load than wall time.
            "cpu_seconds": [round(t, 4) for t in cpu[mode]],
            "cpu_median_s": round(statistics.median(cpu[mode]), 4),
        }
    out["late_over_naive_time"] = round(out["late"]["median_s"] / out["naive"]["median_s"], 3)
    out["late_over_naive_min_time"] = round(out["late"]["min_s"] / out["naive"]["min_s"], 3)
    out["late_over_naive_cpu"] = round(out["late"]["cpu_median_s"] / out["naive"]["cpu_median_s"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON (sessions become documents)")
    parser.add_argument("--synthetic", type=int, default=0, help="use N generated documents instead")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup-docs", type=int, default=8, help="documents of the untimed warm-up run per mode")
    parser.add_argument("--docs", type=int, default=0, help="use only the first N documents")
    parser.add_argument("--window-overlap", type=int, help="override chunking.window_overlap_tokens")
    parser.add_argument("--target-tokens", type=int, help="override chunking.target_tokens")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--no-ingest", action="store_true", help="skip the end-to-end store phase")
    parser.add_argument("--quick", action="store_true", help="24 documents, 2 repetitions: a smoke run")
    parser.add_argument("--json", dest="json_out", help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.docs, args.reps = args.docs or 24, min(args.reps, 2)

    chunking: dict[str, int] = {}
    if args.window_overlap is not None:
        chunking["window_overlap_tokens"] = args.window_overlap
    if args.target_tokens is not None:
        chunking["target_tokens"] = args.target_tokens
    cfg = load_settings({"chunking": chunking} if chunking else None, environ={})
    texts = synthetic_corpus(args.synthetic) if args.synthetic else locomo_corpus(args.data)
    if args.docs:
        texts = texts[: args.docs]
    if args.threads:
        torch.set_num_threads(args.threads)
    embedder = get_embedder(cfg.embedding)
    chunker = LateChunker(embedder)

    result: dict[str, Any] = {
        "corpus": f"synthetic:{args.synthetic}" if args.synthetic else str(args.data),
        "documents": len(texts),
        "model": embedder.model_id,
        "chunking": cfg.chunking.model_dump(),
        "batch_documents": cfg.ingest.batch_documents,
        "batch_size": embedder.batch_size,
        "reps": args.reps,
        "warmup_docs": args.warmup_docs,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    warm_texts = texts[: args.warmup_docs]
    result["embed"] = measure(
        lambda m: embed_once(chunker, texts, m, cfg), lambda m: embed_once(chunker, warm_texts, m, cfg), args.reps
    )
    if not args.no_ingest:
        with tempfile.TemporaryDirectory(prefix="vcm-bench-corpus-") as tmp:
            folder, warm_folder = Path(tmp) / "corpus", Path(tmp) / "warm"
            for where, docs in ((folder, texts), (warm_folder, warm_texts)):
                where.mkdir()
                for i, text in enumerate(docs):
                    (where / f"doc{i:05d}.txt").write_text(text, encoding="utf-8")
            result["ingest"] = measure(
                lambda m: ingest_once(embedder, folder, m, cfg),
                lambda m: ingest_once(embedder, warm_folder, m, cfg),
                args.reps,
            )

    print(
        f"{result['documents']} documents, {result['embed']['late']['tokens']} tokens, model {result['model']}, "
        f"{result['torch_threads']} torch threads, window overlap {cfg.chunking.window_overlap_tokens}, "
        f"chunk target {cfg.chunking.target_tokens}"
    )
    print(
        f"{'phase':<8}{'mode':<7}{'chunks':>8}{'model tok':>11}{'median s':>10}{'min s':>9}{'cpu s':>9}{'chunks/s':>10}"
    )
    for phase in ("embed", "ingest"):
        if phase not in result:
            continue
        for mode in MODES:
            r = result[phase][mode]
            print(
                f"{phase:<8}{mode:<7}{r['chunks']:>8}{r.get('model_tokens', ''):>11}"
                f"{r['median_s']:>10.3f}{r['min_s']:>9.3f}{r['cpu_median_s']:>9.3f}{r['chunks_per_s']:>10.1f}"
            )
        ph = result[phase]
        verdict = "within" if ph["late_over_naive_time"] <= 1.10 else "OUTSIDE"
        print(
            f"{phase:<8}late/naive: median time {ph['late_over_naive_time']:.3f} ({verdict} the 10 % target), "
            f"min time {ph['late_over_naive_min_time']:.3f}, cpu time {ph['late_over_naive_cpu']:.3f}"
        )
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
