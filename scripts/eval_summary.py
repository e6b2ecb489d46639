#!/usr/bin/env python3
"""How many facts the recursive summary keeps: LoCoMo conversations replayed through a small window.

    .venv/bin/python scripts/eval_summary.py [--data LOCOMO_JSON] [--json OUT]
        [--summarizer old|new] [--model vcm-demo-4k] [--embed model|hash] [--limit N] [--quick]

Each conversation goes turn by turn into a fresh agent through the hot path (``HotState.append``,
the speaker as the message's ``name``, an image turn with its caption; the hot state's clock set
to the session's ``date_time``, so messages carry it as ``created_at``), and every eviction batch
is committed in process by the cold path's own ``vcm.tasks.evict.evict_batch`` (fakeredis, a
temporary embedded SQLite store), the way ``scripts/bench_evict.py`` drives it. After each batch
the summary is scored against LoCoMo's ``observation`` facts whose evidence turns have all been
evicted by then:

* **fact retention**: a fact counts as retained when at least ``--overlap`` (default 0.5) of its
  content words appear in the summary. Content words: lower case words of two or more characters
  that are not stop words (a fixed English list, below), a plural ``-s`` removed; so entities,
  numbers, nouns, verbs and adjectives count, function words do not. Reported for the facts of the
  newest batch (pooled over batches) and for all facts evicted so far (mean over batches, and at
  the end of each conversation).
* **tokens**: the summary's tokens as the main context holds it, against the summary cap.
* **filler**: the share of the summary's tokens in lines with fewer than two content words once
  small talk (greetings, reactions, thanks) is also left out.
* **fragments**: the share of the summary's clauses a reader cannot understand without the
  conversation (:mod:`vcm.eval.fragments`: one starting with a conjunction, preposition or
  relative pronoun, one whose only referent is a pronoun, one of fewer than three words), over
  the batches and in the final summaries, with examples in the JSON.

``--summarizer old`` is the earlier centrality summariser (``vcm.tasks.summary.centrality.by_centrality``),
``new`` the fact-keeping default (``vcm.tasks.summary.recursive.extractive``). ``--embed hash`` replaces
the embedding model (used for the drift cosine, and by the old summariser to pick sentences) by a
hashed bag of words: no model to load, for ``--quick`` and tests. ``--quick``: the first
conversation's first 160 turns, hash embedding.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import fakeredis
import numpy as np

from vcm.dispatch import RecordingDispatcher
from vcm.eval.bench import add_data_flag, add_json_flag, data_path, write_json
from vcm.eval.conversation import FixedClock, observations, session_time
from vcm.eval.fragments import measure
from vcm.hotpath.budget import Budget
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store import open_store
from vcm.tasks import evict
from vcm.tasks.deps import Deps, Summarizer
from vcm.tasks.summary import centrality
from vcm.tasks.summary import recursive as summarize
from vcm.tasks.summary.selection import Vectors

# A plain English stopword list of the evaluation's own, kept apart from the summariser's (which
# also drops chat filler) so that the score does not grade the summariser by its own rules.
STOP = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "i'm",
        "i've",
        "i'll",
        "i'd",
        "you're",
        "it's",
        "that's",
        "there's",
        "don't",
        "didn't",
        "can't",
        "won't",
        "also",
        "really",
    ]
)
SMALL_TALK = frozenset(
    [
        "hey",
        "hi",
        "hello",
        "wow",
        "oh",
        "yeah",
        "yes",
        "yep",
        "ok",
        "okay",
        "thanks",
        "thank",
        "sure",
        "cool",
        "great",
        "awesome",
        "nice",
        "glad",
        "amazing",
        "good",
        "lol",
        "haha",
        "omg",
        "aw",
        "awww",
        "congrats",
        "congratulations",
        "sounds",
        "sound",
        "love",
        "bye",
        "care",
        "luck",
        "totally",
        "absolutely",
        "definitely",
        "lot",
        "much",
        "well",
        "right",
    ]
)
WORD = re.compile(r"[a-z0-9][a-z0-9'\-]*")


def content_words(text: str, extra: frozenset[str] = frozenset()) -> set[str]:
    out = set()
    for w in WORD.findall(text.lower()):
        w = w.strip("'-")
        if w.endswith("'s"):
            w = w[:-2]
        if len(w) < 2 or w in STOP or w in extra:
            continue
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        out.add(w)
    return out


def is_filler(line: str) -> bool:
    body = line.split(": ", 1)[1] if re.match(r"^[\w.\-]{1,64}: ", line) else line
    return len(content_words(body, SMALL_TALK)) < 2


def hash_embed(texts: Sequence[str]) -> Vectors:
    out = np.zeros((len(texts), 256), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in WORD.findall(text.lower()):
            out[row, int(hashlib.blake2b(word.encode(), digest_size=4).hexdigest(), 16) % 256] += 1.0
        norm = float(np.linalg.norm(out[row]))
        if norm:
            out[row] /= norm
    return out


def replay(sample: Mapping[str, Any], args: argparse.Namespace, summarizer: Summarizer) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="vcm-eval-summary-"))
    settings = load_settings(environ={}, overrides={"store_url": f"sqlite:///{tmp / 'vcm.db'}"})
    clock = FixedClock()
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), settings, clock=clock)
    store = open_store(settings.store_url)
    embed = hash_embed if args.embed == "hash" else _model_embed(settings)
    deps = Deps(settings, hot, store, RecordingDispatcher(), embed, summarizer, clock=clock)
    agent = f"locomo-{uuid.uuid4().hex[:8]}"
    # Through the façade: the store holds the agent's incarnation, which evictions are fenced by.
    MemoryService(hot, store, RecordingDispatcher(), clock=clock).create_agent(
        agent, model=args.model, system_prompt="You are a helpful assistant."
    )
    cap = Budget.for_window(hot.agent(agent).window, settings.budget).summary_cap
    base = hot.summary_tokens(agent, "")
    conv = sample["conversation"]
    facts = observations(sample)
    known_ids = {str(t.get("dia_id", "")) for n in _sessions(conv) for t in conv[f"session_{n}"]}
    facts = [(f, ev) for f, ev in facts if ev and ev <= known_ids]
    words = [content_words(f) for f, _ in facts]
    dia_of: dict[str, str] = {}
    evicted: set[str] = set()
    scored: set[int] = set()  # facts already counted as "newest"
    batches: list[dict[str, Any]] = []
    turns = 0
    for n in _sessions(conv):
        at = session_time(str(conv.get(f"session_{n}_date_time", "")))
        for turn in conv[f"session_{n}"]:
            if args.max_turns and turns >= args.max_turns:
                break
            turns += 1
            if at is not None:
                clock.now = at + turns  # a second apart, in order
            text = str(turn.get("text", ""))
            if turn.get("blip_caption"):
                text = f"{text} [shared {turn['blip_caption']}]"
            speaker = str(turn.get("speaker", "user"))
            role = "user" if speaker == conv.get("speaker_a") else "assistant"
            result = hot.append(agent, role, text, name=re.sub(r"[^\w-]", "_", speaker)[:64])
            dia_of[result.message_id] = str(turn.get("dia_id", ""))
            for batch_id in hot.pending_batches(agent):
                ids = {dia_of.get(m.id, "") for m in hot.read_batch(agent, batch_id)}
                started = time.perf_counter()
                outcome = evict.evict_batch(deps, agent, batch_id)
                seconds = time.perf_counter() - started
                if outcome.outcome != "committed":
                    raise RuntimeError(f"batch {batch_id}: {outcome}")
                evicted |= ids
                batches.append(_score(store, agent, facts, words, evicted, scored, cap, base, hot, seconds))
    store.close()
    return {"turns": turns, "facts": len(facts), "summary_cap": cap, "batches": batches}


def _model_embed(settings: Any) -> Any:
    from vcm.workers.runtime import LazyEmbed

    return LazyEmbed(settings)


def _sessions(conv: Mapping[str, Any]) -> list[int]:
    return sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))


def _score(
    store: Any,
    agent: str,
    facts: list[tuple[str, frozenset[str]]],
    words: list[set[str]],
    evicted: set[str],
    scored: set[int],
    cap: int,
    base: int,
    hot: HotState,
    seconds: float,
) -> dict[str, Any]:
    summary = store.get_summary(agent)
    text = summary.text if summary is not None else ""
    held = content_words(text)
    due = [i for i, (_, ev) in enumerate(facts) if ev <= evicted]
    newest = [i for i in due if i not in scored]
    scored.update(newest)

    def kept(i: int) -> bool:
        return bool(words[i]) and len(words[i] & held) / len(words[i]) >= OVERLAP

    lines = [line for line in text.split("\n") if line.strip()]
    line_tokens = [max(0, hot.summary_tokens(agent, line) - base) for line in lines]
    events = store.query_events(agent, ["evict"], limit=1000).items  # oldest first
    payload = events[-1].payload if events else {}
    readable = measure(text, examples=8)
    return {
        "clauses": readable.clauses,
        "fragments": readable.fragments,
        "fragment_examples": readable.examples,
        "newest": len(newest),
        "newest_kept": sum(kept(i) for i in newest),
        "evicted_facts": len(due),
        "evicted_kept": sum(kept(i) for i in due),
        "tokens": summary.tokens if summary is not None else 0,
        "cap": cap,
        "lines": len(lines),
        "filler_lines": sum(is_filler(line) for line in lines),
        "line_tokens": sum(line_tokens),
        "filler_tokens": sum(t for t, line in zip(line_tokens, lines, strict=True) if is_filler(line)),
        "drift": payload.get("drift"),
        "retention": payload.get("retention"),
        "resummarized": payload.get("resummarized"),
        "seconds": round(seconds, 3),
    }


OVERLAP = 0.5


def totals(batches: list[dict[str, Any]], finals: list[dict[str, Any]]) -> dict[str, Any]:
    def share(a: float, b: float) -> float:
        return round(100.0 * a / b, 1) if b else 0.0

    cum = [b["evicted_kept"] / b["evicted_facts"] for b in batches if b["evicted_facts"]]
    return {
        "batches": len(batches),
        "newest_facts": sum(b["newest"] for b in batches),
        "newest_retained_pct": share(sum(b["newest_kept"] for b in batches), sum(b["newest"] for b in batches)),
        "cumulative_mean_pct": round(100.0 * sum(cum) / len(cum), 1) if cum else 0.0,
        "cumulative_final_pct": share(sum(f["evicted_kept"] for f in finals), sum(f["evicted_facts"] for f in finals)),
        "tokens_mean": round(sum(b["tokens"] for b in batches) / len(batches), 1) if batches else 0.0,
        "cap": batches[0]["cap"] if batches else 0,
        "filler_tokens_pct": share(sum(b["filler_tokens"] for b in batches), sum(b["line_tokens"] for b in batches)),
        "filler_lines_pct": share(sum(b["filler_lines"] for b in batches), sum(b["lines"] for b in batches)),
        "resummarized": sum(1 for b in batches if b["resummarized"]),
        "fragments_pct": share(sum(b["fragments"] for b in batches), sum(b["clauses"] for b in batches)),
        "fragments_final_pct": share(sum(f["fragments"] for f in finals), sum(f["clauses"] for f in finals)),
        "seconds_per_batch": round(sum(b["seconds"] for b in batches) / len(batches), 3) if batches else 0.0,
    }


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    samples = json.loads(Path(args.data).read_text(encoding="utf-8"))
    if args.limit:
        samples = samples[: args.limit]
    summarizer: Summarizer = centrality.by_centrality if args.summarizer == "old" else summarize.extractive
    conversations: dict[str, Any] = {}
    started = time.perf_counter()
    for sample in samples:
        name = str(sample["sample_id"])
        run = replay(sample, args, summarizer)
        run["totals"] = totals(run["batches"], run["batches"][-1:])
        conversations[name] = run
        print(f"{name}: {run['turns']} turns, {run['facts']} facts, {run['totals']}", file=sys.stderr)
    every = [b for c in conversations.values() for b in c["batches"]]
    finals = [c["batches"][-1] for c in conversations.values() if c["batches"]]
    return {
        "data": str(args.data),
        "summarizer": args.summarizer,
        "model": args.model,
        "embed": args.embed,
        "overlap": OVERLAP,
        "totals": totals(every, finals),
        "conversations": conversations,
        "seconds": round(time.perf_counter() - started, 1),
    }


def print_table(result: dict[str, Any]) -> None:
    head = (
        f"{'conversation':<14}{'batches':>8}{'facts':>7}{'newest %':>10}{'cum mean %':>12}{'cum end %':>11}"
        f"{'tokens':>8}{'cap':>6}{'filler %':>10}{'redo':>6}{'fragm. %':>9}{'end':>6}"
    )
    print(
        f"summary fact retention ({result['summarizer']} summariser, window {result['model']}, "
        f"content-word overlap >= {result['overlap']}, embed {result['embed']})"
    )
    print(head)
    print("-" * len(head))
    rows = [(name, c["totals"], c["facts"]) for name, c in result["conversations"].items()]
    rows.append(("all", result["totals"], sum(c["facts"] for c in result["conversations"].values())))
    for name, t, n in rows:
        print(
            f"{name:<14}{t['batches']:>8}{n:>7}{t['newest_retained_pct']:>10}{t['cumulative_mean_pct']:>12}"
            f"{t['cumulative_final_pct']:>11}{t['tokens_mean']:>8}{t['cap']:>6}{t['filler_tokens_pct']:>10}"
            f"{t['resummarized']:>6}{t['fragments_pct']:>9}{t['fragments_final_pct']:>6}"
        )


def main(argv: list[str] | None = None) -> int:
    global OVERLAP
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_flag(parser)
    add_json_flag(parser)
    parser.add_argument("--summarizer", choices=["old", "new"], default="new")
    parser.add_argument("--model", default="vcm-demo-4k", help="a model of [models]: sets the window")
    parser.add_argument("--embed", choices=["model", "hash"], default="model")
    parser.add_argument("--overlap", type=float, default=OVERLAP, help="content-word share for a fact to count")
    parser.add_argument("--limit", type=int, default=0, help="the first N conversations only")
    parser.add_argument("--max-turns", type=int, default=0, help="the first N turns of each conversation only")
    parser.add_argument("--quick", action="store_true", help="one conversation, 160 turns, hash embedding")
    args = parser.parse_args(argv)
    args.data = data_path(args.data)
    if args.quick:
        args.limit, args.max_turns, args.embed = 1, args.max_turns or 160, "hash"
    OVERLAP = args.overlap
    result = evaluate(args)
    print_table(result)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
