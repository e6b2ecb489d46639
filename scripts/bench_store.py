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
import hashlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from vcm.store.embedded import EmbeddedStore
from vcm.store.types import ArchivalChunk, StoredMessage

F32 = npt.NDArray[np.float32]
DIM = 384
TOP_K = 10
AGENT_VERSION = "bench-msg-v1"
STRUCTURE_RANK = 128

# --- message text ---------------------------------------------------------------------------------
# The most frequent English words, in rank order: they take the top Zipf ranks so common-word
# queries hit posting lists as long as real ones.
_COMMON_TEXT = (
    "the of and to a in is you that it he was for on are as with his they i at be this have from "
    "or one had by word but not what all were we when your can said there use an each which she "
    "do how their if will up other about out many then them these so some her would make like him "
    "into time has look two more write go see number no way could people my than first water been "
    "call who oil its now find long down day did get come made may part"
)
COMMON = _COMMON_TEXT.split()
_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "st", "tr", "pl")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou")
_CODAS = ("", "n", "r", "s", "t", "l", "nd", "st", "ck", "m")


def vocabulary(size: int, seed: int = 11) -> list[str]:
    """``size`` distinct words: the common English ones first, then 1-3 syllable pseudo-words.

    Pseudo-words rather than a dictionary keep the benchmark self-contained; BM25 cost depends
    on posting-list lengths, which the Zipf ranks fix, not on spelling.
    """
    rng = np.random.default_rng(seed)
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    while len(words) < size:
        n = int(rng.integers(1, 4))
        word = "".join(
            _ONSETS[rng.integers(len(_ONSETS))]
            + _VOWELS[rng.integers(len(_VOWELS))]
            + _CODAS[rng.integers(len(_CODAS))]
            for _ in range(n)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words[:size]


class ZipfText:
    """Messages and queries whose words follow p(rank) ~ rank^-s."""

    def __init__(self, vocab_size: int, s: float, seed: int) -> None:
        self.words = np.array(vocabulary(vocab_size), dtype=object)
        ranks = np.arange(1, vocab_size + 1, dtype=np.float64)
        weights = ranks**-s
        self.cdf = np.cumsum(weights / weights.sum())
        self.rng = np.random.default_rng(seed)

    def draw(self, n: int) -> npt.NDArray[np.int64]:
        return np.minimum(np.searchsorted(self.cdf, self.rng.random(n)), len(self.cdf) - 1).astype(np.int64)

    def lengths(self, n: int) -> npt.NDArray[np.int64]:
        # Log-normal around e^3.1 ~ 22 words (mean ~25), as chat turns are: mostly short, a long tail.
        raw = self.rng.lognormal(mean=3.1, sigma=0.5, size=n)
        return np.clip(np.rint(raw), 3, 200).astype(np.int64)

    def messages(self, n: int) -> list[str]:
        lengths = self.lengths(n)
        ids = self.draw(int(lengths.sum()))
        words = self.words[ids]
        out: list[str] = []
        at = 0
        for length in lengths.tolist():
            out.append(" ".join(words[at : at + length]))
            at += length
        return out

    def query(self) -> str:
        return " ".join(self.words[self.draw(3)])


def message_batches(
    text: ZipfText, n: int, start: int, agents: int, batch: int, seq: dict[str, int]
) -> Iterator[list[StoredMessage]]:
    """Messages ``start`` .. ``start + n`` spread over ``agents`` agents, ``batch`` per call."""
    base = 1_700_000_000.0
    for at in range(start, start + n, batch):
        count = min(batch, start + n - at)
        contents = text.messages(count)
        owners = text.rng.integers(agents, size=count).tolist()
        out: list[StoredMessage] = []
        for i, (content, owner) in enumerate(zip(contents, owners, strict=True)):
            agent = f"agent-{owner:05d}"
            number = seq.get(agent, 0)
            seq[agent] = number + 1
            out.append(
                StoredMessage(
                    agent_id=agent,
                    message_id=f"m{at + i:09d}",
                    seq=number,
                    role="user" if number % 2 == 0 else "assistant",
                    content=content,
                    tokens=len(content.split()),
                    created_at=base + at + i,
                )
            )
        yield out


# --- archival vectors -----------------------------------------------------------------------------
_DOMAINS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "cooking": (
        ("The chef", "My grandmother", "Our baker", "A food critic"),
        ("slowly simmered", "praised", "burned", "seasoned"),
        ("the tomato soup", "a sourdough loaf", "the lamb stew", "fresh pasta"),
    ),
    "football": (
        ("The striker", "Our goalkeeper", "The coach", "The referee"),
        ("scored against", "complained about", "trained for", "celebrated"),
        ("the derby match", "a penalty kick", "the league final", "extra time"),
    ),
    "finance": (
        ("The central bank", "Our accountant", "The hedge fund", "A retail investor"),
        ("raised", "audited", "hedged against", "sold"),
        ("interest rates", "the quarterly report", "currency risk", "government bonds"),
    ),
    "medicine": (
        ("The surgeon", "A nurse", "The pharmacist", "Our family doctor"),
        ("prescribed", "monitored", "operated on", "diagnosed"),
        ("antibiotics", "the patient's heart rate", "a torn ligament", "type 2 diabetes"),
    ),
    "software": (
        ("The backend team", "A junior developer", "Our CI pipeline", "The database admin"),
        ("refactored", "deployed", "debugged", "rolled back"),
        ("the payment service", "a memory leak", "the schema migration", "flaky unit tests"),
    ),
    "gardening": (
        ("My neighbour", "The gardener", "Our allotment group", "A botanist"),
        ("pruned", "watered", "planted", "composted"),
        ("the rose bushes", "tomato seedlings", "the apple tree", "autumn leaves"),
    ),
    "astronomy": (
        ("The telescope", "An astronomer", "The space agency", "Amateur stargazers"),
        ("observed", "photographed", "launched", "mapped"),
        ("a distant galaxy", "Jupiter's moons", "a new satellite", "the lunar eclipse"),
    ),
    "travel": (
        ("The tourists", "Our travel agent", "A backpacker", "The airline"),
        ("booked", "cancelled", "explored", "delayed"),
        ("a flight to Tokyo", "the hotel in Lisbon", "the mountain trail", "the night train"),
    ),
    "music": (
        ("The orchestra", "A jazz pianist", "The band", "Our choir"),
        ("rehearsed", "recorded", "improvised", "performed"),
        ("a Beethoven symphony", "the new album", "a blues ballad", "the Christmas concert"),
    ),
    "law": (
        ("The judge", "Our lawyer", "The jury", "The prosecutor"),
        ("dismissed", "appealed", "reviewed", "argued"),
        ("the contract dispute", "a patent claim", "the murder case", "the tenancy agreement"),
    ),
    "weather": (
        ("The forecast", "A meteorologist", "The storm", "Heavy rain"),
        ("warned about", "predicted", "flooded", "delayed"),
        ("the coastal towns", "a heatwave", "the weekend market", "morning commuters"),
    ),
    "education": (
        ("The teacher", "A student", "The university", "Our school board"),
        ("graded", "studied", "redesigned", "failed"),
        ("the maths exam", "a history essay", "the physics curriculum", "online lectures"),
    ),
    "cars": (
        ("The mechanic", "My brother", "The dealership", "An electric car maker"),
        ("repaired", "test drove", "recalled", "charged"),
        ("the brake pads", "a used hatchback", "the battery pack", "the gearbox"),
    ),
    "pets": (
        ("Our dog", "The vet", "My cat", "The rescue shelter"),
        ("chased", "vaccinated", "adopted", "groomed"),
        ("the neighbour's rabbit", "a stray kitten", "the old labrador", "a parrot"),
    ),
    "politics": (
        ("The parliament", "The senator", "Voters", "The opposition party"),
        ("debated", "passed", "rejected", "campaigned for"),
        ("the budget bill", "a climate law", "tax reform", "the election"),
    ),
    "art": (
        ("The painter", "A museum curator", "The sculptor", "Art students"),
        ("exhibited", "restored", "sketched", "auctioned"),
        ("an oil portrait", "a marble statue", "the Renaissance fresco", "abstract prints"),
    ),
    "construction": (
        ("The builders", "An architect", "The crane operator", "Our contractor"),
        ("poured", "designed", "demolished", "inspected"),
        ("the concrete foundation", "a glass tower", "the old warehouse", "the roof beams"),
    ),
    "fitness": (
        ("The personal trainer", "A marathon runner", "My gym buddy", "The yoga class"),
        ("stretched before", "ran", "lifted", "practised"),
        ("a ten kilometre race", "heavy deadlifts", "morning sun salutations", "interval sprints"),
    ),
    "chemistry": (
        ("The chemist", "A lab technician", "The reaction", "Our research group"),
        ("synthesised", "titrated", "catalysed", "purified"),
        ("a polymer sample", "the acid solution", "an organic compound", "rare earth metals"),
    ),
    "retail": (
        ("The shop manager", "A cashier", "Online shoppers", "The supermarket"),
        ("discounted", "restocked", "returned", "ordered"),
        ("winter jackets", "the checkout queue", "fresh vegetables", "a faulty blender"),
    ),
    "family": (
        ("My sister", "Our parents", "The twins", "Grandpa"),
        ("visited", "argued with", "surprised", "phoned"),
        ("the cousins at Christmas", "a birthday party", "the wedding guests", "the new baby"),
    ),
    "energy": (
        ("The wind farm", "A solar panel installer", "The power grid", "The utility company"),
        ("generated", "installed", "overloaded", "priced"),
        ("renewable electricity", "rooftop panels", "the evening demand peak", "heating bills"),
    ),
    "history": (
        ("The historian", "Roman legions", "A medieval king", "Archaeologists"),
        ("documented", "conquered", "taxed", "excavated"),
        ("the ancient city", "a Viking settlement", "the castle ruins", "the industrial revolution"),
    ),
    "security": (
        ("The security team", "A hacker", "The firewall", "Our password manager"),
        ("blocked", "phished", "encrypted", "audited"),
        ("the login server", "employee accounts", "customer data", "a ransomware attack"),
    ),
}
_CONTEXTS = (
    "last week",
    "this morning",
    "after a long delay",
    "despite the budget cuts",
    "for the first time",
    "before the deadline",
    "in front of a large crowd",
    "without telling anyone",
    "as everyone expected",
    "during the holidays",
    "on Tuesday",
    "with surprising results",
)


def centre_sentences(n: int, seed: int = 5) -> list[str]:
    """``n`` varied sentences over many topics, to embed as cluster centres."""
    rng = np.random.default_rng(seed)
    names = sorted(_DOMAINS)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        subjects, verbs, objects = _DOMAINS[names[len(out) % len(names)]]
        parts = (subjects, verbs, objects, _CONTEXTS)
        sentence = " ".join(p[rng.integers(len(p))] for p in parts) + "."
        if sentence not in seen:
            seen.add(sentence)
            out.append(sentence)
    return out


def real_embeddings(n: int) -> F32:
    from vcm.settings.memory import EmbeddingSettings
    from vcm.tasks.embedding import get_embedder

    embedder = get_embedder(EmbeddingSettings())
    return embedder.encode(centre_sentences(n)).astype(np.float32)


@dataclass(frozen=True)
class VectorSpec:
    """How spread the synthetic embeddings are (cosine to the parent is ~1/sqrt(1 + spread^2))."""

    doc_spread: float = 0.9  # document centre around its topic centre
    chunk_spread: float = 0.55  # chunk around its document centre
    structured: float = 0.75  # share of the spread along real embeddings' principal directions
    chunks_per_doc: int = 8  # mean; documents have 1 .. 2*mean-1 chunks
    seed: int = 2024


class VectorSource:
    """Chunks of documents in a fixed order; block ``b`` is reproducible on its own."""

    def __init__(self, centres: F32, spec: VectorSpec) -> None:
        self.spec = spec
        self.centres = centres
        centred = centres - centres.mean(axis=0)
        _, singular, vt = np.linalg.svd(centred, full_matrices=False)
        # The leading directions real embeddings vary in (most of their variance; fewer random
        # draws per vector), scaled so a standard normal draw has unit expected norm.
        singular, vt = singular[:STRUCTURE_RANK], vt[:STRUCTURE_RANK]
        scale = singular / np.sqrt((singular**2).sum())
        self.basis = (scale[:, None] * vt).astype(np.float32)
        rng = np.random.default_rng(spec.seed)
        # Topic popularity: Zipf-like, as real corpora are unbalanced.
        weights = 1.0 / np.arange(1, len(centres) + 1) ** 0.8
        self.topic_p = rng.permutation(weights / weights.sum())

    def _noise(self, rng: np.random.Generator, n: int) -> F32:
        s = self.spec
        structured = rng.standard_normal((n, self.basis.shape[0]), dtype=np.float32) @ self.basis
        iso = rng.standard_normal((n, DIM), dtype=np.float32) / np.float32(np.sqrt(DIM))
        return np.sqrt(s.structured) * structured + np.sqrt(1 - s.structured) * iso

    def documents(self, block: int, n_docs: int) -> tuple[F32, npt.NDArray[np.int64]]:
        """(document centres, chunk counts) of one block of documents."""
        rng = np.random.default_rng((self.spec.seed, block, 0))
        topics = rng.choice(len(self.centres), size=n_docs, p=self.topic_p)
        docs = self.centres[topics] + self.spec.doc_spread * self._noise(rng, n_docs)
        docs /= np.linalg.norm(docs, axis=1, keepdims=True)
        counts = rng.integers(1, 2 * self.spec.chunks_per_doc, size=n_docs)
        return docs.astype(np.float32), counts.astype(np.int64)

    def chunks(self, block: int, n_docs: int) -> tuple[F32, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(unit vectors, document number within the block, chunk index) of one block."""
        docs, counts = self.documents(block, n_docs)
        rng = np.random.default_rng((self.spec.seed, block, 1))
        owner = np.repeat(np.arange(n_docs), counts)
        index = np.concatenate([np.arange(c) for c in counts.tolist()])
        vectors = docs[owner] + self.spec.chunk_spread * self._noise(rng, len(owner))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.astype(np.float32), owner, index

    def queries(self, n: int, blocks: int, n_docs: int) -> F32:
        """``n`` new chunks of documents from the first ``blocks`` blocks (never stored)."""
        rng = np.random.default_rng((self.spec.seed, 10**6))
        picks = rng.integers(blocks, size=n)
        out = np.empty((n, DIM), dtype=np.float32)
        for block in sorted(set(picks.tolist())):
            docs, _ = self.documents(block, n_docs)
            rows = np.flatnonzero(picks == block)
            chosen = docs[rng.integers(n_docs, size=len(rows))]
            v = chosen + self.spec.chunk_spread * self._noise(rng, len(rows))
            out[rows] = v / np.linalg.norm(v, axis=1, keepdims=True)
        return out


class ExactTopK:
    """Running exact top-k (cosine = inner product of unit vectors) of fixed queries."""

    def __init__(self, queries: F32, k: int) -> None:
        self.queries = queries
        self.k = k
        self.scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        self.ids = np.full((len(queries), k), -1, dtype=np.int64)

    def add(self, vectors: F32, first_id: int) -> None:
        sims = self.queries @ vectors.T
        k = min(self.k, sims.shape[1])
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        cand_scores = np.concatenate([self.scores, np.take_along_axis(sims, part, axis=1)], axis=1)
        cand_ids = np.concatenate([self.ids, part + first_id], axis=1)
        best = np.argsort(-cand_scores, axis=1, kind="stable")[:, : self.k]
        self.scores = np.take_along_axis(cand_scores, best, axis=1)
        self.ids = np.take_along_axis(cand_ids, best, axis=1)


# --- measuring ------------------------------------------------------------------------------------
def percentiles(samples_s: Sequence[float]) -> dict[str, float]:
    ms = np.asarray(samples_s, dtype=np.float64) * 1000.0
    return {
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "mean_ms": round(float(ms.mean()), 3),
        "max_ms": round(float(ms.max()), 3),
    }


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


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
                gen_s, batch = timed(lambda batches=batches: next(batches, None))
                generate_s += gen_s
                if batch is None:
                    break
                took, n = timed(lambda b=batch: store.spool_messages(b))
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
                **percentiles(samples),
                "mean_hits": round(statistics.fmean(hits), 2),
            }
            recall.append(row)
            log(f"recall at {size}: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms")
        recall_disk = dir_size_gb(directory, "messages.db")
    for row in recall:
        row["disk_gb_at_end"] = recall_disk
    return ingest, recall


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
    store: EmbeddedStore, agent: str, text: ZipfText, source: VectorSource, cfg: Config, start_id: int, stop: Any
) -> list[F32]:
    """The writer's loop: ``writer_batch`` messages with vectors, then ``writer_pause_s``, until ``stop``."""
    rng = np.random.default_rng(77)
    at, written = start_id, []
    while not stop.is_set():
        docs, _ = source.documents(int(rng.integers(1_000)), cfg.writer_batch)
        v = docs + source.spec.chunk_spread * source._noise(rng, len(docs))
        v = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
        _spool_with_vectors(store, agent, text, at, v)
        written.append(v)
        at += len(v)
        stop.wait(cfg.writer_pause_s)
    return written


def _writer_main(path: str, agent: str, centres: F32, cfg: Config, start_id: int, stop: Any, out: Any) -> None:
    """Entry point of the writer process: its own store on the same files, as a worker has."""
    try:
        with EmbeddedStore(path, train_threshold=cfg.agent_train_threshold) as store:
            source = VectorSource(centres, cfg.spec)
            text = ZipfText(cfg.vocab, cfg.zipf, seed=5)
            written = _write_batches(store, agent, text, source, cfg, start_id, stop)
        out.put(("ok", np.concatenate(written) if written else np.empty((0, DIM), dtype=np.float32)))
    except BaseException as exc:  # reported by the bench
        out.put(("error", repr(exc)))


class ProcessWriter:
    """The writer in another process (spawned, its own ``EmbeddedStore`` on the same files), as
    the cold path's workers write in production: it competes for the cores and SQLite/tantivy,
    not for the searching process's GIL."""

    def __init__(self, path: str, agent: str, source: VectorSource, cfg: Config) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.out: Any = ctx.Queue()
        self.args = (path, agent, source.centres, cfg)
        self.ctx = ctx
        self.start_id = 0
        self.vectors: list[F32] = []
        self.error: BaseException | None = None

    def __enter__(self) -> ProcessWriter:
        self.process = self.ctx.Process(
            target=_writer_main, args=(*self.args, self.start_id, self.stop, self.out), name="bench-writer"
        )
        self.process.start()
        time.sleep(2.0)  # let it open the store and start writing before the timed queries
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


def bench_agent(cfg: Config, directory: Path) -> list[dict[str, Any]]:
    """One agent grown through ``agent_sizes`` messages, each with a synthetic recall vector; at
    each size: the vector half's recall@10 against exact search (quiet), then text, vector and
    hybrid recall latency (limit 20) while a writer thread spools into the same agent.

    With ``cfg.store_dir`` each size is loaded from empty once and the closed store (after its
    first search built the index) is kept there under :func:`agent_cache_key`; later runs copy it
    into ``directory`` instead of loading (the writer then writes into the copy only), and
    recompute the exact top-10 from the same seeded vectors."""
    log(f"embedding {cfg.centres} centre sentences with MiniLM (message vectors)")
    source = VectorSource(real_embeddings(cfg.centres), cfg.spec)
    text, query_text = ZipfText(cfg.vocab, cfg.zipf, seed=3), ZipfText(cfg.vocab, cfg.zipf, seed=4)
    agent = "agent-solo"
    n_docs = cfg.docs_per_block
    first_blocks = max(1, cfg.agent_sizes[0] // (n_docs * cfg.spec.chunks_per_doc))
    queries = source.queries(cfg.agent_queries, first_blocks, n_docs)
    exact = ExactTopK(queries, TOP_K)
    rows: list[dict[str, Any]] = []
    done, block = 0, 0

    def first_search(s: EmbeddedStore) -> float:
        """The first vector search: builds (or loads) the agent's message index."""
        took, _ = timed(
            lambda: s.search_recall_hybrid(
                agent, "warm", queries[0].tolist(), mode="vector", limit=20, embedding_version=AGENT_VERSION
            )
        )
        return took

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
                took, _ = timed(lambda c=cached: _copy_agent_store(c, directory))
                while done < size:
                    vectors, _, _ = source.chunks(block, n_docs)
                    block += 1
                    vectors = vectors[: size - done]
                    exact.add(vectors, done)
                    done += len(vectors)
                log(f"reusing the cached store {cached} ({done} messages, copied in {took:.1f}s)")
                store = _open_agent_store(cfg, directory)
                load_s, build_s = float(meta["load_s"]), float(meta["index_build_s"])
                open_s = first_search(store)
                log(f"persisted index loaded by the first search in {open_s:.1f}s")
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
                            lambda p=part, first=done + at, s=store: _spool_with_vectors(s, agent, text, first, p)
                        )
                        load_s += took
                    done += len(vectors)
                store.flush_text_index()
                log(f"agent holds {done} messages with vectors (loaded in {load_s:.1f}s)")
                build_s = first_search(store)
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
                            lambda q=q, mode=mode, store=store: store.search_recall_hybrid(
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
                    modes[mode] = {**percentiles(samples), "mean_hits": round(statistics.fmean(hits), 2)}
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


def chunk_text_pool(cfg: Config) -> str:
    return " ".join(ZipfText(cfg.vocab, cfg.zipf, seed=3).messages(2_000))


def bench_archival(cfg: Config, directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Grow one store through ``vector_sizes``; at each size, ingest rate, index build, nProbe sweep."""
    log(f"embedding {cfg.centres} centre sentences with MiniLM")
    source = VectorSource(real_embeddings(cfg.centres), cfg.spec)
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
                gen_s, (vectors, owner, index) = timed(lambda b=block: source.chunks(b, cfg.docs_per_block))
                take = min(len(vectors), size - n)
                vectors, owner, index = vectors[:take], owner[:take], index[:take]
                took, _ = timed(lambda v=vectors, first=n: exact.add(v, first))
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
                    took, got = timed(lambda part=chunks[at : at + cfg.ingest_batch]: store.ingest_archival(part))
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
        took, page = timed(lambda v=vector: store.search_archival(agent, v, k=TOP_K, n_probe=probe))
        samples.append(took)
        got = {int(h.chunk.metadata["n"]) for h in page.items}
        recalls.append(len(got & set(want.tolist())) / TOP_K)
    return {
        "n_probe": "default" if probe is None else probe,
        **percentiles(samples),
        "recall_at_10": round(statistics.fmean(recalls), 4),
    }


# --- report ---------------------------------------------------------------------------------------
def targets(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    recall_1m = [r for r in report["recall"] if r["messages"] >= 1_000_000]
    if recall_1m:
        p99 = recall_1m[-1]["p99_ms"]
        out["recall_p99_le_25ms_at_1e6"] = {"p99_ms": p99, "met": p99 <= 25.0}
    agent_1m = [r for r in report.get("agent", []) if r["messages"] >= 1_000_000]
    if agent_1m:
        p99 = agent_1m[-1]["hybrid"]["p99_ms"]
        rec = agent_1m[-1]["vector_recall_at_10"]
        out["hybrid_p99_le_25ms_recall_ge_095_one_agent_1e6"] = {
            "p99_ms": p99,
            "recall_at_10": rec,
            "met": p99 <= 25.0 and rec >= 0.95,
        }
    big = [r for r in report["archival"] if r["vectors"] >= 5_000_000]
    if big:
        default = next(p for p in big[-1]["sweep"] if p["n_probe"] == "default")
        met = default["p99_ms"] <= 50.0 and default["recall_at_10"] >= 0.95
        out["archival_p99_le_50ms_recall_ge_095_at_5e6"] = {
            "p99_ms": default["p99_ms"],
            "recall_at_10": default["recall_at_10"],
            "met": met,
        }
    return out


def table(report: dict[str, Any]) -> str:
    lines = [f"{'measure':<44}{'size':>10}{'p50 ms':>10}{'p99 ms':>10}{'recall@10':>11}  note"]

    def row(measure: str, size: int, p50: Any = "", p99: Any = "", rec: Any = "", note: str = "") -> None:
        lines.append(f"{measure:<44}{human(size):>10}{p50!s:>10}{p99!s:>10}{rec!s:>11}  {note}")

    for r in report["ingest"]["messages"]:
        row(
            "ingest: spool_messages",
            r["messages"],
            note=f"{r['messages_per_s']:,.0f} msg/s; index catch-up {r['text_index_catch_up_s']} s",
        )
    for r in report["recall"]:
        row(
            "recall BM25, limit 20",
            r["messages"],
            r["p50_ms"],
            r["p99_ms"],
            note=f"{r['agents']} agents, {r['queries']} queries, {r['mean_hits']} hits/query",
        )
    for r in report["ingest"]["archival"]:
        row("ingest: ingest_archival", r["vectors"], note=f"{r['chunks_per_s']:,.0f} chunks/s")
    for r in report["archival"]:
        row(
            "archival index build (first search)",
            r["vectors"],
            note=f"{r['index']} nLists={r['n_lists']}, {r['build_s']} s",
        )
        for p in r["sweep"]:
            label = f"default={r['default_n_probe']}" if p["n_probe"] == "default" else str(p["n_probe"])
            row(f"archival top-10, nProbe {label}", r["vectors"], p["p50_ms"], p["p99_ms"], p["recall_at_10"])
    for r in report["agent"]:
        row(
            "one agent: index build (first search)",
            r["messages"],
            note=f"{r['index']} nLists={r['n_lists']}, {r['index_build_s']} s",
        )
        for mode in ("text", "vector", "hybrid"):
            m = r[mode]
            row(
                f"one agent: {mode} recall, limit 20",
                r["messages"],
                m["p50_ms"],
                m["p99_ms"],
                r["vector_recall_at_10"] if mode == "vector" else "",
                f"p95 {m['p95_ms']} ms; writer {r['writer_messages']} msgs; load {r['load_average_during'][0]}",
            )
    for name, t in report["targets"].items():
        figures = json.dumps({k: v for k, v in t.items() if k != "met"})
        lines.append(f"target {name}: {'MET' if t['met'] else 'NOT MET'} {figures}")
    return "\n".join(lines)


def human(n: int) -> str:
    for unit, scale in (("M", 1_000_000), ("k", 1_000)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return str(n)


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
            report["ingest"]["archival"], report["archival"] = bench_archival(cfg, directory)
        if "agent" not in args.skip:
            report["agent"] = bench_agent(cfg, directory)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    report["targets"] = targets(report)
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report["total_s"] = round(time.monotonic() - started, 1)
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
