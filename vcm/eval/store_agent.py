"""The store benchmark's one-agent run: one agent grown to each size with recall vectors,
vector recall@10 on a quiet store, then text, vector and hybrid recall timed while a writer (another
process, or a thread) spools into the same agent; loaded stores cached between runs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import numpy as np

from vcm.eval.bench import latency_ms, timed
from vcm.eval.store_bench import AGENT_VERSION, Config, log
from vcm.eval.store_text import ZipfText
from vcm.eval.store_vectors import DIM, F32, TOP_K, ExactTopK, VectorSource
from vcm.store.embedded import EmbeddedStore
from vcm.store.types import StoredMessage


def _agent_messages(text: ZipfText, start: int, n: int, agent: str) -> list[StoredMessage]:
    contents = text.messages(n)
    return [
        StoredMessage(
            agent_id=agent,
            message_id=f"m{start + i:09d}",
            seq=start + i,
            role="user" if (start + i) % 2 == 0 else "assistant",
            content=content,
            tokens=len(content.split()),
            created_at=1_700_000_000.0 + start + i,
        )
        for i, content in enumerate(contents)
    ]


def _spool_with_vectors(store: EmbeddedStore, agent: str, text: ZipfText, start: int, vectors: F32) -> None:
    store.spool_messages(_agent_messages(text, start, len(vectors), agent))
    store.put_message_vectors(
        agent,
        [(f"m{start + i:09d}", cast(Sequence[float], v)) for i, v in enumerate(vectors)],
        AGENT_VERSION,
    )


class Writer:
    """A thread spooling messages (and their vectors) into the agent while recall is measured."""

    def __init__(self, store: EmbeddedStore, agent: str, text: ZipfText, source: VectorSource, cfg: Config) -> None:
        self.store, self.agent, self.text, self.source, self.cfg = store, agent, text, source, cfg
        self.vectors: list[F32] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-writer", daemon=True)
        self.start_id = 0
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.vectors = _write_batches(
                self.store, self.agent, self.text, self.source, self.cfg, self.start_id, self.stop
            )
        except BaseException as exc:  # reported by the bench, not swallowed
            self.error = exc

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _write_batches(
    store: EmbeddedStore,
    agent: str,
    text: ZipfText,
    source: VectorSource,
    cfg: Config,
    start_id: int,
    stop: Any,
    first: Any = None,
) -> list[F32]:
    """The writer's loop: ``writer_batch`` messages with vectors, then ``writer_pause_s``, until
    ``stop``; ``first`` (an event) is set once the first batch is written."""
    rng = np.random.default_rng(77)
    at, written = start_id, []
    while not stop.is_set():
        docs, _ = source.documents(int(rng.integers(1_000)), cfg.writer_batch)
        v = docs + source.spec.chunk_spread * source._noise(rng, len(docs))
        v = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
        _spool_with_vectors(store, agent, text, at, v)
        written.append(v)
        at += len(v)
        if first is not None:
            first.set()
        stop.wait(cfg.writer_pause_s)
    return written


def _writer_main(
    path: str, agent: str, centres: F32, cfg: Config, start_id: int, stop: Any, out: Any, first: Any
) -> None:
    """Entry point of the writer process: its own store on the same files, as a worker has."""
    try:
        with EmbeddedStore(path, train_threshold=cfg.agent_train_threshold) as store:
            source = VectorSource(centres, cfg.spec)
            text = ZipfText(cfg.vocab, cfg.zipf, seed=5)
            written = _write_batches(store, agent, text, source, cfg, start_id, stop, first)
        out.put(("ok", np.concatenate(written) if written else np.empty((0, DIM), dtype=np.float32)))
    except BaseException as exc:  # reported by the bench
        out.put(("error", repr(exc)))


WRITER_START_S = 120.0  # how long the writer process may take to write its first batch


class ProcessWriter:
    """The writer in another process (spawned, its own ``EmbeddedStore`` on the same files), as
    the cold path's workers write in production: it competes for the cores and SQLite/tantivy,
    not for the searching process's GIL."""

    def __init__(self, path: str, agent: str, source: VectorSource, cfg: Config) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.first = ctx.Event()
        self.out: Any = ctx.Queue()
        self.args = (path, agent, source.centres, cfg)
        self.ctx = ctx
        self.start_id = 0
        self.vectors: list[F32] = []
        self.error: BaseException | None = None

    def __enter__(self) -> ProcessWriter:
        self.process = self.ctx.Process(
            target=_writer_main, args=(*self.args, self.start_id, self.stop, self.out, self.first), name="bench-writer"
        )
        self.process.start()
        # The timed queries start once it writes: a spawned process's imports and store open take
        # seconds on a loaded machine, and a fixed wait let fast queries finish before its first batch.
        deadline = time.monotonic() + WRITER_START_S
        while not self.first.wait(0.1):
            if not self.process.is_alive() or time.monotonic() > deadline:
                self.stop.set()
                if self.process.is_alive():
                    self.process.terminate()
                status, payload = self.out.get(timeout=10) if not self.out.empty() else ("error", "no word")
                raise RuntimeError(f"the writer process wrote nothing within {WRITER_START_S} s: {status} {payload}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        status, payload = self.out.get(timeout=120)
        self.process.join(timeout=60)
        if status == "ok":
            self.vectors = [payload]
        else:
            self.error = RuntimeError(f"writer process failed: {payload}")


AGENT_CACHE_FORMAT = 1
FIRST_QUERIES = 100  # the after-load row: hybrid queries timed from the store's opening, the first included
READY_TIMEOUT_S = 1800.0


_AGENT_FILES = ("agent.db", "agent.db.tantivy", "agent.db.faiss")


def agent_cache_key(cfg: Config, size: int) -> str:
    """What a loaded one-agent store depends on; a cached store is reused only under the same key."""
    spec = {
        "format": AGENT_CACHE_FORMAT,
        "size": size,
        "vocab": cfg.vocab,
        "zipf": cfg.zipf,
        "centres": cfg.centres,
        "spec": asdict(cfg.spec),
        "docs_per_block": cfg.docs_per_block,
        "train_threshold": cfg.agent_train_threshold,
        "spool_batch": cfg.spool_batch,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _copy_agent_store(source: Path, target: Path) -> None:
    """Copy a closed one-agent store (SQLite file, tantivy and FAISS directories) into ``target``."""
    _drop_agent_store(target)
    target.mkdir(parents=True, exist_ok=True)
    for name in _AGENT_FILES:
        path = source / name
        if path.is_dir():
            shutil.copytree(path, target / name)
        elif path.exists():
            shutil.copy2(path, target / name)


def _drop_agent_store(directory: Path) -> None:
    for path in directory.glob("agent.db*"):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def _open_agent_store(cfg: Config, directory: Path) -> EmbeddedStore:
    return EmbeddedStore(str(directory / "agent.db"), train_threshold=cfg.agent_train_threshold)


def bench_agent(cfg: Config, directory: Path, embed_centres: Callable[[int], F32]) -> list[dict[str, Any]]:
    """One agent grown through ``agent_sizes`` messages, each with a synthetic recall vector; at
    each size: the vector half's recall@10 against exact search (quiet), then text, vector and
    hybrid recall latency (limit 20) while a writer thread spools into the same agent.

    With ``cfg.store_dir`` each size is loaded from empty once and the closed store (after its
    first search built the index) is kept there under :func:`agent_cache_key`; later runs copy it
    into ``directory`` instead of loading (the writer then writes into the copy only), and
    recompute the exact top-10 from the same seeded vectors."""
    log(f"embedding {cfg.centres} centre sentences with MiniLM (message vectors)")
    source = VectorSource(embed_centres(cfg.centres), cfg.spec)
    text, query_text = ZipfText(cfg.vocab, cfg.zipf, seed=3), ZipfText(cfg.vocab, cfg.zipf, seed=4)
    agent = "agent-solo"
    n_docs = cfg.docs_per_block
    first_blocks = max(1, cfg.agent_sizes[0] // (n_docs * cfg.spec.chunks_per_doc))
    queries = source.queries(cfg.agent_queries, first_blocks, n_docs)
    exact = ExactTopK(queries, TOP_K)
    rows: list[dict[str, Any]] = []
    done, block = 0, 0

    def first_search(s: EmbeddedStore) -> float:
        """Build (or load) the agent's message index now: what the upkeep thread does in the
        background (a query never builds it)."""
        took, _ = timed(lambda: s.flush_vector_indexes(agent))
        return took

    def after_load(s: EmbeddedStore) -> dict[str, Any]:
        """The first ``FIRST_QUERIES`` hybrid queries of a store just opened on the loaded files
        (nothing indexed in memory; the upkeep thread starts with the first query), the first
        included, then how long until the upkeep thread had the index built and caught up."""
        opened = time.monotonic()
        rng = np.random.default_rng(7)
        samples, cpu, partial = [], [], 0
        load_start = os.getloadavg()
        for _ in range(FIRST_QUERIES):
            q = queries[int(rng.integers(len(queries)))].tolist()
            cpu_start = time.thread_time()  # this thread's CPU: what the query costs, whatever the load
            took, page = timed(
                lambda q=q: s.search_recall_hybrid(  # type: ignore[misc]  # a lambda's default arguments
                    agent, query_text.query(), q, mode="hybrid", limit=20, embedding_version=AGENT_VERSION
                )
            )
            cpu.append(time.thread_time() - cpu_start)
            samples.append(took)
            partial += bool(page.stats is not None and page.stats.partial)
        ready_s = None
        while time.monotonic() - opened < READY_TIMEOUT_S:
            spaces = s._message_vectors.describe(agent)
            if spaces and spaces[0]["kind"] == "ivf" and not spaces[0]["partial"]:
                ready_s = round(time.monotonic() - opened, 1)
                break
            time.sleep(0.5)
        out = {
            "queries": FIRST_QUERIES,
            "first_ms": round(samples[0] * 1000, 1),
            **latency_ms(samples),
            "cpu_p50_ms": round(float(np.percentile(cpu, 50)) * 1000, 1),
            "cpu_p99_ms": round(float(np.percentile(cpu, 99)) * 1000, 1),
            "partial_queries": partial,
            "index_ready_s": ready_s,
            "load_average_during": [round(x, 2) for x in load_start],
        }
        log(
            f"first {FIRST_QUERIES} hybrid queries after the load: first {out['first_ms']} ms, "
            f"p50 {out['p50_ms']} ms, p99 {out['p99_ms']} ms "
            f"(CPU p50 {out['cpu_p50_ms']}, p99 {out['cpu_p99_ms']} ms), "
            f"{partial} partial; index ready after {ready_s}s"
        )
        return out

    store = _open_agent_store(cfg, directory)
    try:
        for size in cfg.agent_sizes:
            cached: Path | None = None
            if cfg.store_dir is not None:
                cached = cfg.store_dir / f"agent-{size}-{agent_cache_key(cfg, size)}"
                # Each size from empty, so a cached store depends on its own key only (growing
                # from the previous size would carry that size's writer messages).
                store.close()
                _drop_agent_store(directory)
                done, block, exact = 0, 0, ExactTopK(queries, TOP_K)
            meta: dict[str, Any] = {}
            reused = cached is not None and (cached / "ready.json").exists()
            if cached is not None and reused:
                meta = json.loads((cached / "ready.json").read_text())
                took, _ = timed(lambda c=cached: _copy_agent_store(c, directory))  # type: ignore[misc]  # a lambda's default arguments
                while done < size:
                    vectors, _, _ = source.chunks(block, n_docs)
                    block += 1
                    vectors = vectors[: size - done]
                    exact.add(vectors, done)
                    done += len(vectors)
                log(f"reusing the cached store {cached} ({done} messages, copied in {took:.1f}s)")
                store = _open_agent_store(cfg, directory)
                load_s, build_s = float(meta["load_s"]), float(meta["index_build_s"])
                first = after_load(store)  # the persisted index, loaded by the upkeep thread
                open_s = first_search(store)
                log(f"persisted index loaded and caught up in {open_s:.1f}s more")
            else:
                if cached is not None:
                    store = _open_agent_store(cfg, directory)
                load_s = 0.0
                while done < size:
                    vectors, _, _ = source.chunks(block, n_docs)
                    block += 1
                    vectors = vectors[: size - done]
                    exact.add(vectors, done)
                    for at in range(0, len(vectors), cfg.spool_batch):
                        part = vectors[at : at + cfg.spool_batch]
                        took, _ = timed(
                            lambda p=part, first=done + at, s=store: _spool_with_vectors(s, agent, text, first, p)  # type: ignore[misc]  # a lambda's default arguments
                        )
                        load_s += took
                    done += len(vectors)
                store.flush_text_index()
                log(f"agent holds {done} messages with vectors (loaded in {load_s:.1f}s)")
                store.close()  # the first queries come to a store that has indexed nothing
                store = _open_agent_store(cfg, directory)
                first = after_load(store)
                flush_s = first_search(store)  # what the upkeep thread left to do, if anything
                # The build ran in the upkeep thread beside the timed queries: from the store's opening.
                build_s = first["index_ready_s"] if first["index_ready_s"] is not None else flush_s
                if cached is not None:
                    store.close()
                    staging = cached.with_name(cached.name + ".partial")
                    shutil.rmtree(staging, ignore_errors=True)
                    _copy_agent_store(directory, staging)
                    meta = {"messages": done, "load_s": round(load_s, 1), "index_build_s": round(build_s, 2)}
                    (staging / "ready.json").write_text(json.dumps(meta) + "\n")
                    shutil.rmtree(cached, ignore_errors=True)
                    staging.rename(cached)
                    log(f"cached the loaded store in {cached}")
                    store = _open_agent_store(cfg, directory)
                    first_search(store)
            space = store._message_vectors.describe(agent)[0]
            found = []
            for q in queries:
                page = store.search_recall_hybrid(
                    agent, "x", q.tolist(), mode="vector", limit=TOP_K, embedding_version=AGENT_VERSION
                )
                found.append([int(h.message.message_id[1:]) for h in page.items])
            recall_at_10 = float(
                np.mean([len(set(f) & set(e.tolist())) / TOP_K for f, e in zip(found, exact.ids, strict=True)])
            )
            kind = f"{space['kind']} nLists={space['n_lists']}"
            log(f"index {kind} built in {build_s:.1f}s; recall@10 {recall_at_10:.3f}")
            rng = np.random.default_rng(size)
            modes: dict[str, dict[str, Any]] = {}
            writer: Writer | ProcessWriter
            if cfg.writer == "thread":
                writer = Writer(store, agent, text, source, cfg)
            else:
                writer = ProcessWriter(str(directory / "agent.db"), agent, source, cfg)
            writer.start_id = done
            load_start = os.getloadavg()
            with writer:
                for mode in ("text", "vector", "hybrid"):
                    samples, hits = [], []
                    for i in range(20 + cfg.agent_queries):  # 20 warm-up queries
                        q = queries[int(rng.integers(len(queries)))].tolist()
                        took, page = timed(
                            lambda q=q, mode=mode, store=store: store.search_recall_hybrid(  # type: ignore[misc]  # a lambda's default arguments
                                agent,
                                query_text.query(),
                                q,
                                mode=mode,
                                limit=20,
                                embedding_version=AGENT_VERSION,
                            )
                        )
                        if i >= 20:
                            samples.append(took)
                            hits.append(len(page.items))
                    modes[mode] = {**latency_ms(samples), "mean_hits": round(statistics.fmean(hits), 2)}
                    log(f"{mode} recall at {done}: p50 {modes[mode]['p50_ms']} ms, p99 {modes[mode]['p99_ms']} ms")
            if writer.error is not None:
                raise writer.error
            written = sum(len(v) for v in writer.vectors)
            for v in writer.vectors:
                exact.add(v, done)
                done += len(v)
            rows.append(
                {
                    "messages": size,
                    "messages_at_end": done,
                    "queries": cfg.agent_queries,
                    "limit": 20,
                    "index": space["kind"],
                    "n_lists": space["n_lists"],
                    "index_build_s": round(build_s, 2),
                    "load_s": round(load_s, 1),
                    "store_cached": reused,
                    "after_load": first,
                    "vector_recall_at_10": round(recall_at_10, 4),
                    "writer_messages": written,
                    "writer": cfg.writer,
                    "load_average_during": [round(x, 2) for x in load_start],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()],
                    **modes,
                }
            )
    finally:
        store.close()
    return rows
