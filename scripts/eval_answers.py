#!/usr/bin/env python3
"""Whether the answer is in the prompt the model sees: LoCoMo replayed through a 4k window, each
question with a gold answer asked against the agent at the end of its conversation.

    .venv/bin/python scripts/eval_answers.py --data LOCOMO_JSON [--json OUT] [--conversations N]
        [--questions N] [--model vcm-demo-4k] [--embed model|hash] [--max-turns N] [--variant K=V,...]

The replay is ``scripts/eval_context.py``'s (every turn through the façade at its session's time,
every eviction batch committed by the cold path's own task, consolidation at the end). Then, for
every question whose gold ``answer`` has content words (``scripts/eval_summary.py``'s rule: stop
words out, plural -s stripped), the share of those words present in

* **hot**: the hot context (system prompt, summary, FIFO), as ``MemoryService.context`` gives it;
* **built**: the prompt ``MemoryService.build_context(agent, query=question)`` builds (the hot
  context and the injected layers; nothing is recorded as used, so questions do not affect each
  other);
* **retrieval**: a plain-retrieval baseline of the same token count: the system prompt and the
  FIFO, then the evicted turns most similar to the question (cosine of the same embedding model
  the agent uses), each as ``[8 May 2023] Speaker: text``, taken in rank order while they fit in
  the built prompt's token count.

Reported per QA category and overall: the mean share (%) and the share of questions with at
least 80 % of the answer's words present. Category 5 (adversarial) has no gold answer and is left
out. No LLM anywhere: presence of the answer's words is what a model could use, not what it says.
``--embed hash``: a hashed bag of words instead of the model (fast, weaker recall).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from eval_context import CATEGORIES, Replay, play, start
from eval_summary import content_words, hash_embed

from vcm.eval.bench import add_data_flag, add_json_flag, data_path, settings_variant, share, write_json
from vcm.eval.prior_facts import add_prior_facts_flag, hold_facts, other_turns
from vcm.settings import load_settings

LEVELS = ("hot", "built", "retrieval")
PRESENT = 0.8  # a question counts as answered in a prompt from this share of its answer's words


def answerable(sample: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The questions with a gold answer of at least one content word."""
    out = []
    for q in sample.get("qa", []):
        if "answer" in q and content_words(str(q["answer"])):
            out.append({"question": str(q["question"]), "answer": str(q["answer"]),
                        "category": str(q.get("category", 0))})  # fmt: skip
    return out


def present(answer: str, text: str) -> float:
    """The share of the answer's content words among the text's."""
    wanted = content_words(answer)
    return len(wanted & content_words(text)) / len(wanted) if wanted else 0.0


def day(ts: float) -> str:
    """The baseline's own date format (as LoCoMo's answers write dates), whatever vcm renders."""
    at = datetime.fromtimestamp(ts, UTC)
    return f"{at.day} {at:%B %Y}"


def texts(messages: Iterable[Mapping[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


class Baseline:
    """FIFO + the evicted turns most similar to a question, within a token count."""

    def __init__(self, run: Replay, embed: Any) -> None:
        hot = run.service.context(run.agent)
        self.head = texts(m for m, layer in zip(hot.messages, hot.layers, strict=True) if layer in ("system", "fifo"))
        self.head_tokens = sum(n for n, layer in zip(hot.message_tokens, hot.layers, strict=True)
                               if layer in ("system", "fifo"))  # fmt: skip
        in_fifo = set(run.service.fifo_ids(run.agent))
        turns = [run.turn_of[d] for m, d in run.dia_of.items() if m not in in_fifo]
        times = {d: run.deps.store.get_messages(run.agent, [m])[0].created_at for m, d in run.dia_of.items()
                 if m not in in_fifo}  # fmt: skip
        self.lines = [f"[{day(times[t.dia_id])}] {t.speaker}: {t.text}" for t in turns]
        self.embed = embed
        self.vectors = np.asarray(embed([t.text for t in turns])) if turns else np.zeros((0, 1))
        self.count = run.deps.hot.counter(run.service.agent(run.agent).model)

    def text(self, question: str, budget: int) -> tuple[str, int]:
        if not self.lines:
            return self.head, self.head_tokens
        q = np.asarray(self.embed([question]))[0]
        order = np.argsort(-(self.vectors @ q))
        kept: list[str] = []
        tokens = self.head_tokens
        for i in order:
            n = self.count.message("\n".join([*kept, self.lines[int(i)]]))
            if self.head_tokens + n > budget:
                continue
            kept.append(self.lines[int(i)])
            tokens = self.head_tokens + n
        return self.head + "\n" + "\n".join(kept), tokens


def ask(
    run: Replay, questions: Sequence[Mapping[str, Any]], embed: Any, variants: Sequence[str] = ("",)
) -> dict[str, list[dict[str, Any]]]:
    """Rows per variant: each variant's built prompt (its ``[context]`` settings) against the
    baseline at that prompt's token count, on the same replayed agent."""
    service, agent = run.service, run.agent
    hot = texts(service.context(agent).messages)
    base = Baseline(run, embed)
    settings = service.core.settings
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        for spec in variants:
            context = settings.context.model_validate({**settings.context.model_dump(), **settings_variant(spec)})
            service.core.settings = settings.model_copy(update={"context": context})
            rows = out.setdefault(spec, [])
            for q in questions:
                built = service.build_context(agent, query=q["question"], user=run.conv.speakers[0], record_use=False)
                retrieved, tokens = base.text(q["question"], built.total)
                facts = [s for layer in built.injected if layer.name == "memory" for s in layer.sources
                         if s.get("kind") == "fact"]  # fmt: skip
                rows.append({
                    **q, "hot": present(q["answer"], hot), "built": present(q["answer"], texts(built.messages)),
                    "retrieval": present(q["answer"], retrieved), "built_tokens": built.total,
                    "retrieval_tokens": tokens, "layers": built.layer_tokens(), "memory_facts": len(facts),
                    "prior_facts_shown": sum(1 for f in facts if str(f["id"]).startswith("prior")),
                })  # fmt: skip
    finally:
        service.core.settings = settings
    return out


def aggregate(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per category and overall: mean share (%) and share of questions with >= 80 % present (%)."""
    groups: dict[str, list[Mapping[str, Any]]] = {"all": list(rows)}
    for row in rows:
        groups.setdefault(CATEGORIES.get(row["category"], row["category"]), []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for name in ["all", *sorted(g for g in groups if g != "all")]:
        group = groups[name]
        n = len(group)
        entry: dict[str, Any] = {"n": n}
        for level in LEVELS:
            entry[level] = {
                "mean_pct": share(sum(r[level] for r in group), n),
                "present_pct": share(sum(r[level] >= PRESENT for r in group), n),
            }
        means = (("built_tokens", 1), ("retrieval_tokens", 1), ("memory_facts", 2), ("prior_facts_shown", 2))
        for key, digits in means:
            entry[key] = round(sum(r.get(key, 0) for r in group) / n, digits) if n else 0.0
        out[name] = entry
    return out


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    every = json.loads(Path(args.data).read_text(encoding="utf-8"))
    samples = every[: args.conversations or None]
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    embed: Any = hash_embed
    if args.embed == "model":
        from vcm.workers.runtime import LazyEmbed

        embed = LazyEmbed(load_settings(environ={})).local()
    by_variant: dict[str, list[dict[str, Any]]] = {spec: [] for spec in args.variants}
    for sample in samples:
        run = start(sample, args.model, args.embed)
        try:
            play(run, args.max_turns)
            if args.prior_facts:  # facts from the other conversations' turns, by the agent's own model
                values = other_turns(every, run.conv.sample_id, args.prior_facts)
                hold_facts(run.service.store, run.agent, values, embed(values), run.clock())
            questions = answerable(sample)[: args.questions or None]
            found = ask(run, questions, embed, args.variants)
        finally:
            run.close()
        for spec, got in found.items():
            for r in got:
                r["conversation"] = run.conv.sample_id
            by_variant[spec].extend(got)
            print(f"{run.conv.sample_id} [{spec or 'defaults'}]: {len(run.message_of)} turns, {run.evictions} "
                  f"batches, {len(got)} questions, {aggregate(got)['all']}", file=sys.stderr, flush=True)  # fmt: skip
    rows = by_variant[args.variants[0]]
    return {
        "data": str(args.data), "model": args.model, "embed": args.embed, "present_at": PRESENT,
        "prior_facts": args.prior_facts, "figures": aggregate(rows), "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
        "variants": {spec: {"figures": aggregate(got), "rows": got} for spec, got in by_variant.items()},
    }  # fmt: skip


def print_table(result: Mapping[str, Any]) -> None:
    for spec, got in result["variants"].items():
        print_figures(result, spec, got["figures"])


def print_figures(result: Mapping[str, Any], spec: str, figures: Mapping[str, Any]) -> None:
    at = round(100 * result["present_at"])
    print(f"answer words in the prompt ({result['model']}, embed {result['embed']}, [context] "
          f"{spec or 'defaults'}): mean % / >= {at} % present, per category")  # fmt: skip
    head = f"{'category':<14}{'n':>5}" + "".join(f"{level:>18}" for level in LEVELS) + f"{'tokens':>8}{'facts':>7}"
    print(head)
    print("-" * len(head))
    for name, f in figures.items():
        cells = "".join(f"{f[level]['mean_pct']:>10} / {f[level]['present_pct']:>5}" for level in LEVELS)
        print(f"{name:<14}{f['n']:>5}{cells}{f['built_tokens']:>8}{f['memory_facts']:>7}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_flag(parser)
    add_json_flag(parser)
    parser.add_argument("--conversations", type=int, default=0, help="the first N conversations only")
    parser.add_argument("--questions", type=int, default=0, help="the first N answerable questions of each")
    parser.add_argument("--model", default="vcm-demo-4k", help="a model of [models]: sets the window")
    parser.add_argument("--embed", choices=["model", "hash"], default="model")
    parser.add_argument("--max-turns", type=int, default=0, help="the first N turns of each conversation only")
    add_prior_facts_flag(parser, "the questions: turns of the other conversations, a long-lived agent's other life")
    parser.add_argument(
        "--variant", dest="variants", action="append", default=None, metavar="KEY=VALUE,...",
        help="[context] settings to build with, e.g. memory=0.12,memory_messages=8 (repeat to compare "
        "variants on the same replay; the first is the headline)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.variants = args.variants or [""]
    args.data = data_path(args.data)
    result = evaluate(args)
    print_table(result)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
