#!/usr/bin/env python3
"""Archival ingestion throughput, late vs naive chunking (a benchmark, not a test).

    .venv/bin/python scripts/bench_ingest.py [--quick] [--data LOCOMO_JSON] [--json OUT]

Same model, same documents, same chunks; only the embedding differs: ``naive`` runs the model
over each chunk's text, ``late`` over each document (in macro windows when it is longer than the
model window) and pools the chunks from its token outputs. Two phases, each timed per mode:

* ``embed``  - plan (tokenise, chunk, window) and embed every document, ``ingest.batch_documents``
  documents per model batch, as ingestion does; no store;
* ``ingest`` - :func:`vcm.tasks.ingest.files.ingest_paths` end to end, corpus files into a fresh embedded
  store (SQLite + indexes) per repetition.

The corpus is every LoCoMo session as one document (``--data``) or, with ``--synthetic N``,
N generated documents, cut into slices of ``ingest.batch_documents`` documents. After one
untimed warm-up trial per mode, each slice gets ``--reps`` trials per mode, tightly interleaved
with the order alternating. Totals add the slices' minima (least disturbed by other load on a shared
machine; the headline figure) and medians; CPU time of the process is shown too. Target: late
within 10 % of naive.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vcm.eval.bench import add_data_flag, add_json_flag, data_path, write_json
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.tasks.embedding import Embedder, get_embedder
from vcm.tasks.ingest.files import BatchReport, ingest_paths
from vcm.tasks.ingest.late_chunking import MODES, DocumentPlan, LateChunker, Mode
from vcm.tasks.recall.evaluation import load_locomo

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


Counts = dict[str, int]
# One timed trial: (mode, slice index) -> (counts, wall seconds, CPU seconds).
Trial = Callable[[int], tuple[Counts, float, float]]


def _timed(work: Callable[[], Counts]) -> tuple[Counts, float, float]:
    start, start_cpu = time.perf_counter(), time.process_time()
    counts = work()
    return counts, time.perf_counter() - start, time.process_time() - start_cpu


def embed_trial(chunker: LateChunker, slices: list[list[str]], cfg: Settings, mode: Mode) -> Trial:
    """Plan and embed one slice of documents (one model batch group, as ingestion does)."""

    def run(i: int) -> tuple[Counts, float, float]:
        def work() -> Counts:
            plans: list[DocumentPlan] = [chunker.plan(t, cfg.chunking) for t in slices[i]]
            chunker.embed(plans, mode)
            specials = len(chunker.prefix) + len(chunker.suffix)
            spans = [w.tokens for p in plans for w in p.windows] if mode == "late" else []
            spans = spans or [c.tokens for p in plans for c in p.chunks]
            return {
                "chunks": sum(len(p.chunks) for p in plans),
                "tokens": sum(len(p.token_ids) for p in plans),
                "model_tokens": sum(n + specials for n in spans),  # what the transformer ran over
            }

        return _timed(work)

    return run


def ingest_trial(embedder: Embedder, folders: list[Path], cfg: Settings, mode: Mode) -> Trial:
    """ingest_paths over one slice's files into a fresh embedded store (opening it is not timed)."""

    def run(i: int) -> tuple[Counts, float, float]:
        with tempfile.TemporaryDirectory(prefix="vcm-bench-") as tmp:
            store = open_store(str(Path(tmp) / "vcm.db"))
            try:
                timed = _timed(
                    lambda: _report_counts(
                        ingest_paths(store, embedder, "bench", [folders[i]], mode=mode, settings=cfg)
                    )
                )
            finally:
                store.close()
        return timed

    return run


def _report_counts(report: BatchReport) -> Counts:
    if report.count("failed"):
        raise SystemExit(f"ingestion failed: {report.failures[0].error}")
    return {"chunks": report.chunks_written, "documents": report.count("ingested")}


def measure(trials: dict[str, Trial], slices: int, reps: int) -> dict[str, Any]:
    """Per slice, ``reps`` trials of each variant (a chunking mode, or a backend and mode),
    tightly interleaved (order alternating), after one untimed warm-up trial per variant. Totals
    add the slices' minima (the estimate least disturbed by other load on a shared machine) and
    medians."""
    names = list(trials)
    for name in names:
        trials[name](0)
    wall: dict[str, list[list[float]]] = {m: [[] for _ in range(slices)] for m in names}
    cpu: dict[str, list[list[float]]] = {m: [[] for _ in range(slices)] for m in names}
    counts: dict[str, list[Counts]] = {m: [{} for _ in range(slices)] for m in names}
    for i in range(slices):
        for rep in range(reps):
            for name in names if (i + rep) % 2 == 0 else names[::-1]:
                c, w, u = trials[name](i)
                counts[name][i] = c
                wall[name][i].append(w)
                cpu[name][i].append(u)
    out: dict[str, Any] = {}
    for name in names:
        total = {key: sum(c[key] for c in counts[name]) for key in counts[name][0]}
        min_s = sum(min(w) for w in wall[name])
        median_s = sum(statistics.median(w) for w in wall[name])
        out[name] = {
            **total,
            "min_s": round(min_s, 4),
            "median_s": round(median_s, 4),
            "cpu_min_s": round(sum(min(u) for u in cpu[name]), 4),
            "chunks_per_s": round(total["chunks"] / min_s, 1),
            "chunks_per_s_median": round(total["chunks"] / median_s, 1),
            "wall_s_per_slice": [[round(x, 4) for x in w] for w in wall[name]],
        }
    for prefix in dict.fromkeys(n.rpartition(" ")[0] for n in names):
        late, naive = out.get(f"{prefix} late".strip()), out.get(f"{prefix} naive".strip())
        if late is None or naive is None:
            continue
        for key, field in (("min", "min_s"), ("median", "median_s"), ("cpu", "cpu_min_s")):
            out[f"{prefix} late_over_naive_{key}".strip()] = round(late[field] / naive[field], 3)
    return out


def variants(
    make: Callable[[Embedder, Mode], Trial], embedders: dict[str, Embedder], modes: list[Mode]
) -> dict[str, Trial]:
    """One trial per (backend, mode); named by the mode alone when there is one backend."""
    out: dict[str, Trial] = {}
    for backend, embedder in embedders.items():
        for mode in modes:
            out[f"{backend} {mode}" if len(embedders) > 1 else mode] = make(embedder, mode)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_flag(parser)  # LoCoMo: its sessions become documents
    parser.add_argument("--synthetic", type=int, default=0, help="use N generated documents instead")
    parser.add_argument("--reps", type=int, default=3, help="timed trials per mode and slice")
    parser.add_argument("--docs", type=int, default=0, help="use only the first N documents")
    parser.add_argument("--window-overlap", type=int, help="override chunking.window_overlap_tokens")
    parser.add_argument("--target-tokens", type=int, help="override chunking.target_tokens")
    parser.add_argument("--threads", type=int, default=0, help="model threads (0 = torch's / ONNX Runtime's default)")
    parser.add_argument("--no-ingest", action="store_true", help="skip the end-to-end store phase")
    parser.add_argument("--quick", action="store_true", help="32 documents, 2 repetitions: a smoke run")
    parser.add_argument("--backends", default="", help="[embedding] backends to compare, e.g. torch,onnx,onnx-int8")
    parser.add_argument("--modes", default="late,naive", help="chunking modes to time (late,naive)")
    add_json_flag(parser)
    args = parser.parse_args(argv)
    if not args.synthetic:
        args.data = data_path(args.data)
    if args.quick:
        args.docs, args.reps = args.docs or 32, min(args.reps, 2)

    chunking: dict[str, int] = {}
    if args.window_overlap is not None:
        chunking["window_overlap_tokens"] = args.window_overlap
    if args.target_tokens is not None:
        chunking["target_tokens"] = args.target_tokens
    # Naive chunking is the comparison here: allowed, as [ingest] allow_naive says.
    overrides: dict[str, Any] = {"ingest": {"allow_naive": True}} | ({"chunking": chunking} if chunking else {})
    cfg = load_settings(overrides, environ={})
    texts = synthetic_corpus(args.synthetic) if args.synthetic else locomo_corpus(args.data)
    if args.docs:
        texts = texts[: args.docs]
    if args.threads:
        torch.set_num_threads(args.threads)
    backends = [b for b in args.backends.split(",") if b] or [cfg.embedding.backend]
    modes: list[Mode] = [m for m in MODES if m in args.modes.split(",")]
    # --threads: torch's process-wide threads, and each ONNX Runtime session's own.
    update: dict[str, Any] = {"threads": args.threads} if args.threads else {}
    embedders = {b: get_embedder(cfg.embedding.model_copy(update={"backend": b, **update})) for b in backends}
    embedder = embedders[backends[0]]
    chunkers = {id(e): LateChunker(e) for e in embedders.values()}

    result: dict[str, Any] = {
        "corpus": f"synthetic:{args.synthetic}" if args.synthetic else str(args.data),
        "documents": len(texts),
        "model": embedder.model_id,
        "backends": {b: e.model_id for b, e in embedders.items()},
        "load_average": list(os.getloadavg()),
        "chunking": cfg.chunking.model_dump(),
        "batch_documents": cfg.ingest.batch_documents,
        "batch_size": embedder.batch_size,
        "reps": args.reps,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    step = cfg.ingest.batch_documents
    slices = [texts[at : at + step] for at in range(0, len(texts), step)]
    result["embed"] = measure(
        variants(lambda e, m: embed_trial(chunkers[id(e)], slices, cfg, m), embedders, modes), len(slices), args.reps
    )
    if not args.no_ingest:
        with tempfile.TemporaryDirectory(prefix="vcm-bench-corpus-") as tmp:
            folders = []
            for n, docs in enumerate(slices):
                folder = Path(tmp) / f"slice{n:03d}"
                folder.mkdir()
                for i, text in enumerate(docs):
                    (folder / f"doc{i:05d}.txt").write_text(text, encoding="utf-8")
                folders.append(folder)
            result["ingest"] = measure(
                variants(lambda e, m: ingest_trial(e, folders, cfg, m), embedders, modes), len(slices), args.reps
            )
    result["load_average_after"] = list(os.getloadavg())

    print(
        f"{result['documents']} documents, {len(slices)} slices, model {result['model']}, "
        f"{result['torch_threads']} torch threads, window overlap {cfg.chunking.window_overlap_tokens}, "
        f"chunk target {cfg.chunking.target_tokens}, load average {result['load_average'][0]:.1f} -> "
        f"{result['load_average_after'][0]:.1f} on {os.cpu_count()} CPUs"
    )
    head = f"{'phase':<8}{'variant':<18}{'chunks':>8}{'model tok':>11}{'min s':>9}{'median s':>10}{'cpu s':>9}"
    print(f"{head}{'chunks/s':>10}")
    for phase in ("embed", "ingest"):
        if phase not in result:
            continue
        for name, r in result[phase].items():
            if not isinstance(r, dict):
                continue
            print(
                f"{phase:<8}{name:<18}{r['chunks']:>8}{r.get('model_tokens', ''):>11}"
                f"{r['min_s']:>9.3f}{r['median_s']:>10.3f}{r['cpu_min_s']:>9.3f}{r['chunks_per_s']:>10.1f}"
            )
        for key, ratio in result[phase].items():
            if key.endswith("late_over_naive_min"):
                verdict = "within" if ratio <= 1.10 else "OUTSIDE"
                print(f"{phase:<8}{key}: {ratio:.3f} ({verdict} the 10 % target)")
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
