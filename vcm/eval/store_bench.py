"""The store benchmark's configuration and measurements over many agents: message ingest and recall
latency, archival ingest, search latency and recall@10 by nProbe (``scripts/bench_store.py``)."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from vcm.eval.bench import latency_ms, timed
from vcm.eval.store_text import ZipfText, message_batches
from vcm.eval.store_vectors import DIM, F32, TOP_K, ExactTopK, VectorSource, VectorSpec
from vcm.store.embedded import EmbeddedStore
from vcm.store.types import ArchivalChunk

AGENT_VERSION = "bench-msg-v1"


def peak_rss_gb() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 2)


def dir_size_gb(directory: Path, prefix: str) -> float:
    total = 0
    for path in directory.glob(f"{prefix}*"):
        if path.is_file():
            total += path.stat().st_size
        else:
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return round(total / 1024**3, 3)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Config:
    message_sizes: list[int]
    vector_sizes: list[int]
    agents: int
    recall_queries: int
    archival_queries: int
    n_probes: list[int]
    vocab: int
    zipf: float
    centres: int
    spool_batch: int
    ingest_batch: int
    docs_per_block: int
    agent_sizes: list[int] = field(default_factory=list)
    agent_queries: int = 300
    agent_train_threshold: int = 10_000  # the store's default; --quick lowers it to reach IVF fast
    writer_batch: int = 20
    writer_pause_s: float = 0.05
    store_dir: Path | None = None  # cache of loaded one-agent stores (--store-dir)
    writer: str = "process"  # the concurrent writer: another process (as workers are) or a thread
    spec: VectorSpec = field(default_factory=VectorSpec)


def bench_recall(cfg: Config, directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Grow one store through ``message_sizes``; at each size, ingest rate and recall latency."""
    text = ZipfText(cfg.vocab, cfg.zipf, seed=1)
    queries = ZipfText(cfg.vocab, cfg.zipf, seed=2)
    seq: dict[str, int] = {}
    ingest: list[dict[str, Any]] = []
    recall: list[dict[str, Any]] = []
    done = 0
    with EmbeddedStore(str(directory / "messages.db")) as store:
        for size in cfg.message_sizes:
            spool_s, generate_s, added = 0.0, 0.0, 0
            batches = message_batches(text, size - done, done, cfg.agents, cfg.spool_batch, seq)
            while True:
                gen_s, batch = timed(lambda batches=batches: next(batches, None))  # type: ignore[misc]  # a lambda's default arguments
                generate_s += gen_s
                if batch is None:
                    break
                took, n = timed(lambda b=batch: store.spool_messages(b))  # type: ignore[misc]  # a lambda's default arguments
                spool_s += took
                added += n
            # The background indexer ran during spooling; what is left is the catch-up lag.
            flush_s, _ = timed(store.flush_text_index)
            done = size
            ingest.append(
                {
                    "messages": size,
                    "added": added,
                    "spool_s": round(spool_s, 2),
                    "messages_per_s": round(added / spool_s, 1),
                    "text_index_catch_up_s": round(flush_s, 2),
                    "generate_s": round(generate_s, 2),
                }
            )
            log(f"spooled {added} messages ({added / spool_s:,.0f}/s), text index caught up in {flush_s:.1f}s")
            agents = sorted(seq)
            rng = np.random.default_rng(size)
            hits: list[int] = []

            def one(agents: list[str] = agents, rng: np.random.Generator = rng) -> tuple[float, int]:
                agent, query = agents[int(rng.integers(len(agents)))], queries.query()
                took, page = timed(lambda: store.search_recall(agent, query, limit=20))
                return took, len(page.items)

            for _ in range(min(20, cfg.recall_queries)):  # warm caches and the searcher
                one()
            runs = [one() for _ in range(cfg.recall_queries)]
            samples, hits = [t for t, _ in runs], [h for _, h in runs]
            row = {
                "messages": size,
                "agents": len(agents),
                "queries": len(samples),
                "limit": 20,
                **latency_ms(samples),
                "mean_hits": round(statistics.fmean(hits), 2),
            }
            recall.append(row)
            log(f"recall at {size}: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms")
        recall_disk = dir_size_gb(directory, "messages.db")
    for row in recall:
        row["disk_gb_at_end"] = recall_disk
    return ingest, recall


def chunk_text_pool(cfg: Config) -> str:
    return " ".join(ZipfText(cfg.vocab, cfg.zipf, seed=3).messages(2_000))


def bench_archival(
    cfg: Config, directory: Path, embed_centres: Callable[[int], F32]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Grow one store through ``vector_sizes``; at each size, ingest rate, index build, nProbe sweep."""
    log(f"embedding {cfg.centres} centre sentences with MiniLM")
    source = VectorSource(embed_centres(cfg.centres), cfg.spec)
    first_blocks = max(1, cfg.vector_sizes[0] // (cfg.docs_per_block * cfg.spec.chunks_per_doc))
    queries = source.queries(cfg.archival_queries, first_blocks, cfg.docs_per_block)
    exact = ExactTopK(queries, TOP_K)
    pool = chunk_text_pool(cfg)
    rng = np.random.default_rng(9)
    agent = "agent-archive"
    ingest: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    n = 0  # chunks ingested = the next chunk's global number
    block = 0
    with EmbeddedStore(str(directory / "archival.db")) as store:
        for size in cfg.vector_sizes:
            ingest_s, generate_s, exact_s, added = 0.0, 0.0, 0.0, 0
            while n < size:
                gen_s, (vectors, owner, index) = timed(lambda b=block: source.chunks(b, cfg.docs_per_block))  # type: ignore[misc]  # a lambda's default arguments
                take = min(len(vectors), size - n)
                vectors, owner, index = vectors[:take], owner[:take], index[:take]
                took, _ = timed(lambda v=vectors, first=n: exact.add(v, first))  # type: ignore[misc]  # a lambda's default arguments
                exact_s += took
                starts = rng.integers(0, len(pool) - 600, size=take).tolist()
                lengths = rng.integers(300, 600, size=take).tolist()
                chunks = [
                    ArchivalChunk(
                        agent_id=agent,
                        doc_id=f"b{block}-d{int(owner[i])}",
                        chunk_index=int(index[i]),
                        text=pool[starts[i] : starts[i] + lengths[i]],
                        embedding=cast(Sequence[float], vectors[i]),
                        metric="cosine",
                        embedding_version="bench-v1",
                        model_id="sentence-transformers/all-MiniLM-L6-v2",
                        char_start=int(index[i]) * 500,
                        char_end=int(index[i]) * 500 + lengths[i],
                        source="bench_store",
                        metadata={"n": n + i},
                    )
                    for i in range(take)
                ]
                generate_s += gen_s
                for at in range(0, take, cfg.ingest_batch):
                    took, got = timed(lambda part=chunks[at : at + cfg.ingest_batch]: store.ingest_archival(part))  # type: ignore[misc]  # a lambda's default arguments
                    ingest_s += took
                    added += got
                n += take
                block += 1
                if block % 20 == 0:
                    log(f"  {n:,} chunks ingested ({added / max(ingest_s, 1e-9):,.0f}/s)")
            ingest.append(
                {
                    "vectors": size,
                    "added": added,
                    "ingest_s": round(ingest_s, 2),
                    "chunks_per_s": round(added / ingest_s, 1),
                    "generate_s": round(generate_s, 2),
                    "exact_ground_truth_s": round(exact_s, 2),
                }
            )
            log(f"ingested {added} chunks ({added / ingest_s:,.0f}/s); building the index")
            truth = exact.ids.copy()
            build_s, _ = timed(lambda: store.search_archival(agent, queries[0].tolist(), k=TOP_K))
            space = next(s for s in store.health().details["vector_spaces"] if s["embedding_version"] == "bench-v1")
            log(f"index at {size}: {space['kind']} nLists={space['n_lists']} built in {build_s:.1f}s")
            sweep = []
            for probe in [*cfg.n_probes, None]:
                point = archival_sweep_point(store, agent, queries, truth, probe)
                sweep.append(point)
                log(f"  nProbe={point['n_probe']}: recall@10 {point['recall_at_10']}, p99 {point['p99_ms']} ms")
            results.append(
                {
                    "vectors": size,
                    "dimension": DIM,
                    "index": space["kind"],
                    "n_lists": space["n_lists"],
                    "default_n_probe": space.get("default_n_probe"),
                    "build_s": round(build_s, 2),
                    "queries": len(queries),
                    "exact_top1_mean_cosine": round(float(exact.scores[:, 0].mean()), 4),
                    "exact_top10_mean_cosine": round(float(exact.scores[:, TOP_K - 1].mean()), 4),
                    "disk_gb": dir_size_gb(directory, "archival.db"),
                    "peak_rss_gb": peak_rss_gb(),
                    "sweep": sweep,
                }
            )
    return ingest, results


def archival_sweep_point(
    store: EmbeddedStore, agent: str, queries: F32, truth: npt.NDArray[np.int64], probe: int | None
) -> dict[str, Any]:
    for q in queries[: min(10, len(queries))]:  # warm-up at this nProbe
        store.search_archival(agent, q.tolist(), k=TOP_K, n_probe=probe)
    samples: list[float] = []
    recalls: list[float] = []
    for q, want in zip(queries, truth, strict=True):
        vector = q.tolist()
        took, page = timed(lambda v=vector: store.search_archival(agent, v, k=TOP_K, n_probe=probe))  # type: ignore[misc]  # a lambda's default arguments
        samples.append(took)
        got = {int(h.chunk.metadata["n"]) for h in page.items}
        recalls.append(len(got & set(want.tolist())) / TOP_K)
    return {
        "n_probe": "default" if probe is None else probe,
        **latency_ms(samples),
        "recall_at_10": round(statistics.fmean(recalls), 4),
    }
