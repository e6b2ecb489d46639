#!/usr/bin/env python3
"""Embedded store throughput and latency on synthetic data (a benchmark, not a test).

    .venv/bin/python scripts/bench_store.py [--quick] [--json OUT] [--dir DIR] [--keep]

Everything goes through the embedded adapter's real paths (``spool_messages``,
``ingest_archival`` into SQLite, the tantivy and FAISS indexes it derives, ``search_recall``,
``search_archival``); the data is made here, seeded, so every run measures the same thing:

* **messages**: words drawn from a Zipf distribution (``--vocab`` words, exponent ``--zipf``;
  the top ranks are real English function words, the rest pronounceable pseudo-words), lengths
  log-normal around ~22 words, spread over many agents. Recall queries are 3 words from the same
  distribution, so common words ("the", "of") appear in them as they would.
* **archival vectors**: 384-d, clustered like real embeddings: the centres are MiniLM embeddings
  of a few hundred varied sentences; each document gets its own centre near a topic, each chunk
  lies near its document. Spread is partly along the directions real MiniLM embeddings vary in
  (their principal components) and partly isotropic, then L2-normalised. Queries are further
  chunks of existing documents; their exact top-10 is computed while the data is generated
  (numpy over every vector), so recall@10 is measured against exact search.

* **one agent** (``--agent-messages``, issue 16): a single agent grown to 1e5 then 1e6
  messages, each with a 384-d recall vector drawn like the archival vectors. At each size the
  vector half's recall@10 against exact search is measured on a quiet store, then text, vector
  and hybrid recall (limit 20) are timed (p50/p95/p99) while a writer (another process with its
  own store on the same files, or with ``--writer thread`` a thread of this one) spools messages
  with vectors into the same agent (``writer_batch`` every ``writer_pause_s``). The load
  average is recorded with each figure (the machine may be shared).

Sizes grow in steps (messages 1e5 then 1e6; vectors 1e6 then 5e6 by default), measuring at
each step, so the large sizes reuse the small ones' data. Latencies are per call, wall clock,
one thread; the first archival search after a step trains the IVF index and is timed apart.
Targets (issue 3): recall p99 <= 25 ms at 1e6 messages; archival p99 <= 50 ms at 5e6 vectors with
recall@10 >= 0.95 at the default nProbe.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from vcm.eval.bench import write_json
from vcm.eval.store_agent import bench_agent
from vcm.eval.store_bench import Config, bench_archival, bench_recall
from vcm.eval.store_report import table, targets
from vcm.eval.store_text import centre_sentences
from vcm.eval.store_vectors import F32


def real_embeddings(n: int) -> F32:
    from vcm.settings.memory import EmbeddingSettings
    from vcm.tasks.embedding import get_embedder

    embedder = get_embedder(EmbeddingSettings())
    return embedder.encode(centre_sentences(n)).astype(np.float32)


def parse_sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run (well under a minute)")
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--dir", type=Path, help="where the stores go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the stores afterwards")
    parser.add_argument("--messages", type=parse_sizes, help="message counts to measure at (default 1e5,1e6)")
    parser.add_argument("--vectors", type=parse_sizes, help="vector counts to measure at (default 1e6,5e6)")
    parser.add_argument("--nprobe", type=parse_sizes, help="nProbe sweep besides the default (default 1,8,32)")
    parser.add_argument("--queries", type=int, help="queries per measurement (default 500 recall, 300 archival)")
    parser.add_argument("--skip", choices=("recall", "archival", "agent"), action="append", default=[])
    parser.add_argument(
        "--agent-messages",
        type=parse_sizes,
        help="single-agent recall run with vectors at these sizes (default 1e5,1e6; quick 4000)",
    )
    parser.add_argument(
        "--store-dir",
        type=Path,
        help="cache of loaded one-agent stores (--agent-messages): each size is loaded from empty once, "
        "closed after its first search built the message index, and kept here under a key of the "
        "data parameters (size, vocabulary, vector spec, train threshold); later runs with the same "
        "parameters copy it instead of loading (minutes at 1e6) and the writer writes into the copy",
    )
    parser.add_argument(
        "--writer",
        choices=("process", "thread"),
        default="process",
        help="where the concurrent writer of --agent-messages runs: another process with its own store on the "
        "same files (default; as the cold path's workers write) or a thread of this process (it then also "
        "competes for this process's GIL)",
    )
    args = parser.parse_args(argv)

    quick = args.quick
    cfg = Config(
        message_sizes=args.messages or ([3_000, 10_000] if quick else [100_000, 1_000_000]),
        # Quick sizes still pass the 10 000-vector training threshold, so IVF is exercised.
        vector_sizes=args.vectors or ([12_000, 20_000] if quick else [1_000_000, 5_000_000]),
        agents=50 if quick else 1_000,
        recall_queries=args.queries or (50 if quick else 500),
        archival_queries=args.queries or (30 if quick else 300),
        n_probes=args.nprobe or [1, 8, 32],
        vocab=30_000,
        zipf=1.1,
        centres=100 if quick else 400,
        spool_batch=2_000,
        ingest_batch=5_000,
        docs_per_block=600 if quick else 6_250,
        agent_sizes=args.agent_messages or ([4_000] if quick else [100_000, 1_000_000]),
        agent_train_threshold=2_000 if quick else 10_000,
        agent_queries=args.queries or (20 if quick else 300),
        store_dir=args.store_dir,
        writer=args.writer,
    )
    directory = args.dir or Path(tempfile.mkdtemp(prefix="vcm-bench-store-"))
    directory.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3, 1),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
        "ingest": {"messages": [], "archival": []},
        "recall": [],
        "archival": [],
        "agent": [],
    }
    started = time.monotonic()
    try:
        if "recall" not in args.skip:
            report["ingest"]["messages"], report["recall"] = bench_recall(cfg, directory)
        if "archival" not in args.skip:
            report["ingest"]["archival"], report["archival"] = bench_archival(cfg, directory, real_embeddings)
        if "agent" not in args.skip:
            report["agent"] = bench_agent(cfg, directory, real_embeddings)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    report["targets"] = targets(report)
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["total_s"] = round(time.monotonic() - started, 1)
    print(table(report))
    write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
