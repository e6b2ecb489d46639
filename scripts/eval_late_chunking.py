#!/usr/bin/env python3
"""Retrieval quality of late vs naive chunking on LoCoMo (an evaluation, not a test).

    .venv/bin/python scripts/eval_late_chunking.py [--data LOCOMO_JSON] [--json OUT]

Each LoCoMo session is one document (turns as ``Speaker: text`` lines, image turns with their
caption); each conversation is its own corpus. Chunks are cut at turn boundaries, at two
granularities: ``turn`` (one chunk per turn, as the paper's turn retrieval) and ``group``
(consecutive turns packed up to ``--group-tokens`` tokens). Both modes use the same model, the
same chunks and the same query embeddings; only the chunk embeddings differ: ``naive`` embeds
each chunk's text alone, ``late`` pools the chunk's tokens from a pass over the whole session
(macro windows of 254 tokens overlapping by ``--window-overlap`` when a session is longer).

Recall@k per question = share of its evidence dia_ids among the turns of the top-k chunks
(exact cosine, numpy); averaged per conversation and over all questions (see DATA.md).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, get_args

import numpy as np

from vcm.eval.bench import add_data_flag, add_json_flag, data_path, write_json
from vcm.settings import load_settings
from vcm.settings.memory import ChunkingSettings, EmbeddingBackend
from vcm.tasks.embedding import get_embedder
from vcm.tasks.ingest.late_chunking import MODES, LateChunker
from vcm.tasks.recall.evaluation import chunk_turns, load_locomo, mean, recall_at_k, top_k

KS = (1, 3, 5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    corpora = load_locomo(json.loads(Path(args.data).read_text(encoding="utf-8")))
    if args.conversations:
        corpora = {k: v for k, v in corpora.items() if k in set(args.conversations)}
    cfg = load_settings(environ={}, overrides={"embedding": {"backend": args.backend}} if args.backend else None)
    embedder = get_embedder(cfg.embedding)
    chunker = LateChunker(embedder)
    overlap = cfg.chunking.window_overlap_tokens if args.window_overlap is None else args.window_overlap

    def chunking(target: int) -> ChunkingSettings:
        return ChunkingSettings(target_tokens=target, overlap_tokens=0, window_overlap_tokens=overlap)

    granularities = {
        # One chunk per turn: a turn longer than the window would be split (none is, here).
        "turn": (chunking(chunker.max_window), False),
        "group": (chunking(args.group_tokens), True),
    }
    # recalls[granularity][mode][k] -> per-question values; per conversation as well.
    recalls: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    per_conv: dict[str, dict[str, dict[str, dict[int, list[float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    )
    per_cat: dict[str, dict[str, dict[int, dict[int, list[float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    )
    corpus_stats: dict[str, dict[str, Any]] = defaultdict(dict)
    started = time.perf_counter()
    for name, (docs, questions) in corpora.items():
        queries = embedder.encode([q.text for q in questions])
        for gran, (settings, pack) in granularities.items():
            plans = [chunker.plan(d.text, settings, breaks=d.turn_starts, pack=pack) for d in docs]
            turns = [ts for d, p in zip(docs, plans, strict=True) for ts in chunk_turns(d, p.chunks)]
            corpus_stats[name][gran] = {
                "sessions": len(docs),
                "chunks": len(turns),
                "windows": sum(len(p.windows) for p in plans),
                "tokens": sum(len(p.token_ids) for p in plans),
            }
            for mode in args.modes:
                vectors = np.vstack(chunker.embed(plans, mode))
                scores = queries @ vectors.T
                for q, row in zip(questions, scores, strict=True):
                    ranked = [turns[i] for i in top_k(row, max(KS))]
                    for k in KS:
                        r = recall_at_k(q.evidence, ranked, k)
                        recalls[gran][mode][k].append(r)
                        per_conv[gran][mode][name][k].append(r)
                        per_cat[gran][mode][q.category][k].append(r)
        print(f"  {name}: {len(docs)} sessions, {len(questions)} questions", file=sys.stderr)
    return {
        "data": str(args.data),
        "model": embedder.model_id,
        "backend": embedder.backend,
        "window_tokens": chunker.max_window,
        "window_overlap_tokens": overlap,
        "group_tokens": args.group_tokens,
        "questions": sum(len(q) for _, q in corpora.values()),
        "seconds": round(time.perf_counter() - started, 1),
        "python": platform.python_version(),
        "corpora": corpus_stats,
        "recall": {g: {m: {k: mean(v) for k, v in ks.items()} for m, ks in ms.items()} for g, ms in recalls.items()},
        "recall_per_conversation": {
            g: {m: {c: {k: mean(v) for k, v in ks.items()} for c, ks in cs.items()} for m, cs in ms.items()}
            for g, ms in per_conv.items()
        },
        "recall_per_category": {
            g: {
                m: {CATEGORIES.get(c, str(c)): {k: mean(v) for k, v in ks.items()} for c, ks in sorted(cs.items())}
                for m, cs in ms.items()
            }
            for g, ms in per_cat.items()
        },
    }


def _row(label: str, values: dict[int, float]) -> str:
    return f"{label:<28}" + "".join(f"{100 * values[k]:>8.1f}" for k in KS)


def print_report(result: dict[str, Any]) -> None:
    header = f"{'':<28}" + "".join(f"{'R@' + str(k):>8}" for k in KS)
    for gran, modes in result["recall"].items():
        chunks = sum(s[gran]["chunks"] for s in result["corpora"].values())
        print(f"\n== {gran} chunks ({chunks} chunks, {result['questions']} questions; recall in %) ==")
        print(header)
        shown = [m for m in MODES if m in modes]
        for mode in shown:
            print(_row(f"all  {mode}", modes[mode]))
        if len(shown) == 2:
            delta = {k: modes["late"][k] - modes["naive"][k] for k in KS}
            print(f"{'all  late - naive':<28}" + "".join(f"{100 * delta[k]:>+8.1f}" for k in KS))
        for conv in result["recall_per_conversation"][gran][shown[0]]:
            for mode in shown:
                print(_row(f"{conv}  {mode}", result["recall_per_conversation"][gran][mode][conv]))
        for cat in result["recall_per_category"][gran][shown[0]]:
            for mode in shown:
                print(_row(f"{cat}  {mode}", result["recall_per_category"][gran][mode][cat]))
    print(f"\n({result['seconds']} s, model {result['model']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_flag(parser)
    add_json_flag(parser)
    parser.add_argument("--group-tokens", type=int, default=128, help="token budget of a 'group' chunk")
    parser.add_argument(
        "--window-overlap", type=int, help="macro-window overlap in tokens (default: chunking.window_overlap_tokens)"
    )
    parser.add_argument("--conversations", nargs="*", help="only these sample ids (e.g. conv-26)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="embedding modes to compare")
    parser.add_argument("--backend", choices=get_args(EmbeddingBackend), help="default: [embedding] backend")
    args = parser.parse_args(argv)
    args.data = data_path(args.data)
    result = evaluate(args)
    print_report(result)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
