#!/usr/bin/env python3
"""Recall quality of vcm's search_recall on LoCoMo: text (BM25), vector and hybrid modes.

    .venv/bin/python scripts/eval_locomo.py [--data LOCOMO_JSON] [--json OUT] [--k 5,10,25,50]
        [--conversations conv-26 ...] [--compare-fused] [--compare-single] [--compare-depth]
        [--compare-diversity P:R ...] [--compare-authors W[:keep] ...]

Each conversation goes through vcm's own path: every turn is appended to a fresh agent through
``MemoryService.append`` (model ``vcm-demo-4k``: a 4k-token window, so most turns are evicted),
with the cold path run in-process the way the workers run it: appended messages are spooled in
batches (``vcm.tasks.spool.spool_messages`` with the ``[recall]`` vectorizer: each message embedded
by late chunking between the turns before and after it, once those after it have arrived) and
eviction batches committed by ``vcm.tasks.evict`` (spool first, as the dispatcher's queue order
does). A turn is stored as ``Speaker: text`` (an image turn adds its caption), its speaker as the
message's ``name``. Then every
question goes through ``MemoryService.search_recall`` in each mode; the ``single`` rows use
turn-alone vectors (``--compare-single``) through the store port. Metric: the LoCoMo paper's
recall@k (see ``vcm.tasks.recall.evaluation``), per question, averaged overall and per category; a
malformed or unknown evidence id is a miss. Beside it, session-level any-hit S@5 / S@10: the share
of questions with at least one of the top k turns in a session that holds evidence (a question
without evidence counts as found, as in recall@k). ``--compare-fused`` adds ``hybrid-fused``, the
hybrid ranking without ``[recall] diversity_*`` (fused as before issue 36), in the same run.
``--compare-authors W`` adds ``hybrid-wW``: the hybrid ranking with ``[recall]
other_author_weight`` W (``W:keep``: the query vector embedded with the authors' names in it;
``1:keep`` is the ranking without author anchoring).
Hot state lives in an in-process fakeredis unless ``--redis URL`` is given; the store is a
temporary embedded store. No LLM anywhere (the summarizer is the extractive one).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

import fakeredis
import redis

from vcm.eval.bench import add_data_flag, add_json_flag, data_path, write_json
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.settings.memory import EmbeddingBackend
from vcm.store import authors, open_store
from vcm.store.diversity import Diversity
from vcm.store.embedded import EmbeddedStore
from vcm.store.port import MemoryStore
from vcm.tasks import evict
from vcm.tasks.deps import Deps
from vcm.tasks.ingest.late_chunking import LateChunker
from vcm.tasks.recall.evaluation import (
    aggregate,
    conversation_turns,
    load_locomo,
    recall_of_ranked_ids,
    turn_line,
)
from vcm.tasks.recall.vectors import MessageVectorizer, Turn
from vcm.tasks.spool import spool_messages
from vcm.types import IngestRequest
from vcm.workers.runtime import LazyEmbed, build_summarizer

DRAGON = {5: 56.7, 10: 66.2, 25: 76.7, 50: 82.7}
SESSION_KS = (5, 10)
CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}


class InlineWorkers:
    """The hot path's Dispatcher, run in-process: spools in batches of ``spool_batch`` (embedding
    each batch), and commits an eviction batch after spooling what is pending."""

    def __init__(self, deps: Deps, vectorizer: MessageVectorizer, spool_batch: int) -> None:
        self.deps = deps
        self.vectorizer = vectorizer
        self.spool_batch = spool_batch
        self.pending: dict[str, list[str]] = defaultdict(list)
        self.embedded = 0
        self.evictions = 0

    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        self.pending[agent_id].extend(message_ids)
        if len(self.pending[agent_id]) >= self.spool_batch:
            self.flush(agent_id)

    def flush(self, agent_id: str) -> None:
        ids, self.pending[agent_id] = self.pending[agent_id], []
        if ids:
            out = spool_messages(self.deps.hot, self.deps.store, agent_id, ids, vectorizer=self.vectorizer)
            self.embedded += out.embedded or 0

    def evict(self, agent_id: str, batch_id: int) -> None:
        self.flush(agent_id)
        outcome = evict.evict_batch(self.deps, agent_id, batch_id)
        if outcome.outcome != "committed":
            raise RuntimeError(f"eviction batch {batch_id} of {agent_id}: {outcome}")
        self.evictions += 1

    def ingest(self, request: IngestRequest) -> None:
        raise NotImplementedError("the LoCoMo replay ingests no archival documents")


def session_of(dia_id: str) -> str:
    """LoCoMo's session of a turn id (``D3:12`` -> ``3``); "" when malformed."""
    head, sep, _ = dia_id.partition(":")
    return head[1:] if sep and head.startswith("D") and head[1:].isdigit() else ""


def session_hits(evidence: Sequence[str], ranked: Sequence[str], ks: Sequence[int]) -> dict[int, float]:
    """Session-level any-hit at each k: 1.0 when one of the first k ranked turns lies in a session
    that holds evidence (no evidence: 1.0, nothing to find), else 0.0."""
    wanted = {session_of(e) for e in evidence} - {""}
    if not evidence:
        return dict.fromkeys(ks, 1.0)
    return {k: float(any(session_of(d) in wanted for d in ranked[:k])) for k in ks}


def store_single_vectors(store: MemoryStore, agent_id: str, messages: dict[str, str], single: MessageVectorizer) -> str:
    ids = list(messages)
    vectors = single.embed([], [Turn(i, messages[m]) for i, m in enumerate(ids)])
    pairs = [(m, [float(x) for x in v]) for m, v in zip(ids, vectors, strict=True) if v is not None]
    store.put_message_vectors(agent_id, pairs, single.version)
    return single.version


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    samples = json.loads(Path(args.data).read_text(encoding="utf-8"))
    if args.conversations:
        samples = [s for s in samples if s["sample_id"] in set(args.conversations)]
    corpora = load_locomo(samples)
    tmp = Path(tempfile.mkdtemp(prefix="vcm-eval-locomo-"))
    # A named backend runs the batches too (the message vectors), so backends are compared whole.
    backend = getattr(args, "backend", None)
    embedding = {"embedding": {"backend": backend, "batch_backend": "same"}} if backend else {}
    settings = load_settings(environ={}, overrides={"store_url": f"sqlite:///{tmp / 'vcm.db'}", **embedding})
    client = redis.Redis.from_url(args.redis, decode_responses=True) if args.redis else None
    hot = HotState(client or fakeredis.FakeRedis(decode_responses=True), settings)
    recall = settings.recall
    spread = Diversity(
        penalty=recall.diversity_penalty if args.diversity_penalty is None else args.diversity_penalty,
        reach=recall.diversity_reach if args.diversity_reach is None else args.diversity_reach,
    )
    store = open_store(settings.store_url, recall_diversity=spread, other_author_weight=recall.other_author_weight)
    embed = LazyEmbed(settings)
    # As a deployment runs them: message vectors by the cold path's embedder, queries by the
    # serving process's own.
    chunker = LateChunker(embed.embedder())
    vectorizer = MessageVectorizer(
        chunker,
        mode=args.context_mode or recall.context_mode,
        context=recall.context_turns if args.context is None else args.context,
        after=recall.context_after if args.after is None else args.after,
    )
    single = MessageVectorizer(chunker, mode="single")
    deps = Deps(settings, hot, store, None, embed, build_summarizer(settings))  # type: ignore[arg-type]
    workers = InlineWorkers(deps, vectorizer, args.spool_batch)
    deps.dispatcher = workers
    service = MemoryService(hot, store, workers, embed=embed.local(), recall_version=lambda: vectorizer.version)

    ks = sorted(args.k)
    modes = ["text", "vector", "hybrid"] + (["vector-single", "hybrid-single"] if args.compare_single else [])
    if args.compare_fused:
        modes.append("hybrid-fused")
    variants = {f"hybrid-d{p:g}r{r}": Diversity(penalty=p, reach=r) for p, r in args.compare_diversity}
    modes.extend(variants)
    anchored = {f"hybrid-w{w:g}" + ("" if strip else "-keep"): (w, strip) for w, strip in args.compare_authors}
    modes.extend(anchored)
    if args.compare_depth:
        if not isinstance(store, EmbeddedStore):
            raise SystemExit("--compare-depth needs the embedded store")
        modes.append("hybrid-deep")
    rows: dict[str, list[tuple[int, dict[int, float]]]] = {m: [] for m in modes}
    session_rows: dict[str, list[tuple[int, dict[int, float]]]] = {m: [] for m in modes}
    conversations: dict[str, Any] = {}
    started = time.perf_counter()
    for sample in samples:
        name = str(sample["sample_id"])
        agent = f"locomo-{name}-{uuid.uuid4().hex[:6]}"
        info = service.create_agent(agent, model=args.model, system_prompt="You are a helpful assistant.")
        speaker_a = sample["conversation"].get("speaker_a")
        dia_of: dict[str, str] = {}
        text_of: dict[str, str] = {}
        t0 = time.perf_counter()
        for turn in conversation_turns(sample):
            line = turn_line(turn)
            role = "user" if turn.get("speaker") == speaker_a else "assistant"
            res = service.append(agent, role, line, name=turn.get("speaker") or None)
            dia_of[res.message_id] = str(turn.get("dia_id", ""))
            text_of[res.message_id] = line
        workers.flush(agent)
        ingest_s = time.perf_counter() - t0
        _, questions = corpora[name]
        single_version: str | None = None
        for mode in modes:
            if mode.endswith("-single") and single_version is None:
                # Stored only now, under their own version, which only these modes ask for (the
                # service ranks with its vectorizer's version).
                single_version = store_single_vectors(store, agent, text_of, single)
            for q in questions:
                if mode.endswith("-single"):
                    vector = [float(x) for x in embed([q.text])[0]]
                    page = store.search_recall_hybrid(
                        agent, q.text, vector, limit=max(ks), mode=mode.split("-")[0], embedding_version=single_version
                    )
                elif mode == "hybrid-deep":
                    # Both lists as deep as paging goes (cursor_max_results): the depth before
                    # hybrid_depth made it proportional to the page.
                    assert isinstance(store, EmbeddedStore)
                    store.hybrid_depth_factor, factor = 0, store.hybrid_depth_factor
                    try:
                        page = service.search_recall(agent, q.text, limit=max(ks), mode="hybrid").page
                    finally:
                        store.hybrid_depth_factor = factor
                elif mode in anchored:
                    # The store's hybrid ranking with another [recall] other_author_weight, its
                    # vector embedded from the question with or without the authors' names (what
                    # the service does under query_vector_without_authors).
                    weight, strip = anchored[mode]
                    text = q.text
                    if strip:
                        text = authors.without_names(text, authors.mentioned(text, store.message_authors(agent)))
                    vector = [float(x) for x in embed([text])[0]]
                    kept, store.recall_author_weight = store.recall_author_weight, weight  # type: ignore[attr-defined]
                    try:
                        page = store.search_recall_hybrid(
                            agent, q.text, vector, limit=max(ks), mode="hybrid", embedding_version=vectorizer.version
                        )
                    finally:
                        store.recall_author_weight = kept  # type: ignore[attr-defined]
                elif mode == "hybrid-fused" or mode in variants:
                    # The same store ranking, as fused or spread with another setting.
                    spread, store.recall_diversity = store.recall_diversity, variants.get(mode)  # type: ignore[attr-defined]
                    try:
                        page = service.search_recall(agent, q.text, limit=max(ks), mode="hybrid").page
                    finally:
                        store.recall_diversity = spread  # type: ignore[attr-defined]
                else:
                    page = service.search_recall(agent, q.text, limit=max(ks), mode=mode).page
                ranked = [dia_of.get(h.message.message_id, "") for h in page.items]
                rows[mode].append((q.category, recall_of_ranked_ids(q.evidence, ranked, ks)))
                session_rows[mode].append((q.category, session_hits(q.evidence, ranked, SESSION_KS)))
        snap = hot.snapshot(agent)
        conversations[name] = {
            "turns": len(dia_of),
            "questions": len(questions),
            "window_tokens": info.window,
            "evicted": snap.counter("evicted"),
            "in_context": len(snap.fifo),
            "stored": store.count_messages(agent),
            "ingest_s": round(ingest_s, 1),
        }
        print(f"{name}: {conversations[name]}", file=sys.stderr)
    tables = {m: aggregate(rows[m], ks) for m in modes}
    sessions = {m: aggregate(session_rows[m], SESSION_KS) for m in modes}
    return {
        "data": str(args.data),
        "ks": ks,
        "model": args.model,
        "vectors": vectorizer.version,
        "diversity": {"penalty": spread.penalty, "reach": spread.reach, "depth": spread.depth},
        "other_author_weight": getattr(store, "recall_author_weight", None),
        "query_vector_without_authors": recall.query_vector_without_authors,
        "spool_batch": args.spool_batch,
        "evictions": workers.evictions,
        "conversations": conversations,
        "recall": tables,
        "session_any_hit": {
            m: {g: {f"S@{k}": e[f"R@{k}"] for k in SESSION_KS} for g, e in t.items()} for m, t in sessions.items()
        },
        "dragon": {f"R@{k}": v for k, v in DRAGON.items()},
        "seconds": round(time.perf_counter() - started, 1),
        "python": platform.python_version(),
    }


def print_table(result: dict[str, Any]) -> None:
    ks = result["ks"]
    w = max([15, *(len(m) + 1 for m in result["recall"])])
    head = f"{'mode':<{w}}{'group':<14}{'n':>5}" + "".join(f"{'R@' + str(k):>8}" for k in ks)
    head += "".join(f"{'S@' + str(k):>8}" for k in SESSION_KS)
    print(f"LoCoMo recall@k (%) on {result['data']}; vectors {result['vectors']}, window {result['model']}")
    print(head)
    print("-" * len(head))
    for mode, table in result["recall"].items():
        for group, entry in table.items():
            label = "all" if group == "all" else f"{group} {CATEGORIES.get(group, '')}"
            hits = result["session_any_hit"][mode][group]
            print(f"{mode:<{w}}{label:<14}{entry['n']:>5}" + "".join(f"{entry[f'R@{k}']:>8}" for k in ks)
                  + "".join(f"{hits[f'S@{k}']:>8}" for k in SESSION_KS))  # fmt: skip
    print(f"{'DRAGON (paper)':<{w}}{'all':<14}{'':>5}" + "".join(f"{DRAGON.get(k, float('nan')):>8}" for k in ks))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_flag(parser)
    add_json_flag(parser)
    parser.add_argument("--k", type=lambda s: [int(x) for x in s.split(",")], default=[5, 10, 25, 50])
    parser.add_argument("--model", default="vcm-demo-4k", help="a model of [models]: sets the window")
    parser.add_argument("--context-mode", choices=["late", "single"], help="default: [recall] context_mode")
    parser.add_argument("--context", type=int, help="turns before a message read as context (default: [recall])")
    parser.add_argument("--after", type=int, help="turns after a message read as context (default: [recall])")
    parser.add_argument("--spool-batch", type=int, default=16)
    parser.add_argument("--diversity-penalty", type=float, help="default: [recall] diversity_penalty")
    parser.add_argument("--diversity-reach", type=int, help="default: [recall] diversity_reach")
    parser.add_argument("--compare-single", action="store_true", help="also rank with turn-alone vectors")
    parser.add_argument(
        "--compare-depth",
        action="store_true",
        help="also rank hybrid with both lists as deep as paging goes (the 'hybrid-deep' rows; embedded store only)",
    )
    parser.add_argument(
        "--compare-fused",
        action="store_true",
        help="also rank hybrid without [recall] diversity_* (the 'hybrid-fused' rows: the ranking before issue 36)",
    )
    parser.add_argument(
        "--compare-diversity",
        nargs="*",
        default=[],
        type=lambda s: (float(s.split(":")[0]), int(s.split(":")[1])),
        metavar="PENALTY:REACH",
        help="also rank hybrid spread with these [recall] diversity settings (rows 'hybrid-d<P>r<R>')",
    )
    parser.add_argument(
        "--compare-authors",
        nargs="*",
        default=[],
        type=lambda s: (float(s.split(":")[0]), not s.endswith(":keep")),
        metavar="WEIGHT[:keep]",
        help="also rank hybrid with this [recall] other_author_weight, the query vector without the authors' "
        "names it mentions (':keep': with them; '1:keep' is the ranking without author anchoring); "
        "rows 'hybrid-w<W>[-keep]'",
    )
    parser.add_argument("--conversations", nargs="*", help="sample_ids to keep (default: all)")
    parser.add_argument("--redis", default="", help="scratch Redis URL (default: in-process fakeredis)")
    parser.add_argument("--backend", choices=get_args(EmbeddingBackend), help="default: [embedding] backend")
    args = parser.parse_args(argv)
    args.data = data_path(args.data)
    result = evaluate(args)
    print_table(result)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
