#!/usr/bin/env python3
"""How much of a question's evidence the model actually sees: LoCoMo replayed through a 4k window,
every question asked as the latest user message, its evidence turns looked for in the context the
builder assembles.

    .venv/bin/python scripts/eval_context.py [--data LOCOMO_JSON] [--json OUT]
        [--conversations N] [--questions N] [--model vcm-demo-4k] [--embed model|hash]
        [--max-turns N] [--quick] [--resume]

Each conversation goes turn by turn into a fresh agent through the façade, as in
``scripts/eval_facts.py`` (``MemoryService.append``: the speaker as the message's ``name``, image
turns with their caption, the clock at the session's time), and every eviction batch is committed
in process by the cold path's ``vcm.tasks.evict.evict_batch`` (extractive summary, shadow facts
extracted before the commit, and, with the embedding model, the batch's message vectors for
hybrid recall, which the spool would otherwise write); consolidation runs once at the end.

Then each of the conversation's questions is asked through
``MemoryService.build_context(agent, query=question, user=speaker_a)``: the question is what
relevant memory and skills are chosen for, but it is *not* appended, so every question sees the
same FIFO and summary (the state at the end of the conversation). Retrieval counts as a use of
the facts it returns, so later questions see the access counts earlier ones left. An evidence
turn (a ``dia_id`` of the question, mapped to the message it was replayed as) is **present**

* in the **FIFO** when its message is in the FIFO;
* in the **summary** when the summary holds a piece taken from it: the summary's lines are
  ``Speaker: piece; piece`` (one kept clause of a turn each, see ``vcm.tasks.summary.recursive.render``);
  a piece of the turn's speaker with at least two content words (``scripts/eval_summary.py``'s
  word rule and list), at least two of them and two thirds of them words of the turn. Half of the
  turn's content words found anywhere in the summary (the rule ``eval_summary.py`` scores
  observations by) does not tell a summarised turn from one never summarised: it finds about as
  many of the turns still in the FIFO, which the summary cannot hold, as of the evicted ones
  (topic words recur). The JSON's ``summary_rule_check`` gives both rules' rates for the evicted
  and the FIFO turns of each conversation;
* in **injected memory** when an injected layer's sources hold it: a recalled message with its id,
  or a fact whose evidence points at its message (by pointer: the fact may hold only part of the
  turn, as ``scripts/eval_facts.py`` counts). The relevant-memory layer is the one that retrieves
  for the question; sticky facts and the state header count too, and ``via`` says which layer
  held what.

Reported per QA category and overall, for (a) FIFO only, (b) FIFO + summary and (c) the full
builder: the mean share of a question's evidence turns present, and the share of questions with
all of them present (LoCoMo's convention: a question without evidence counts as fully present; a
malformed or unknown evidence id is never present), with the mean tokens of each injected layer
(0 where a question got none). No LLM anywhere.

``--embed hash``: a hashed bag of words instead of the embedding model (no model to load, no
message vectors: recall ranks by BM25 alone). ``--max-turns N``: the first N turns of each
conversation, and only questions whose evidence lies in them (a malformed id still counts as a
miss). ``--quick``: the first conversation's first 200 turns, hash embedding. The JSON file is
written after each conversation, with every question's row; ``--resume`` keeps the conversations
it already holds for the same settings (a long run stopped part way goes on where it stopped).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fakeredis
from eval_summary import OVERLAP, content_words, hash_embed

from vcm.dispatch import RecordingDispatcher
from vcm.eval.bench import add_data_flag, add_json_flag, data_path, share, write_json
from vcm.eval.conversation import Conversation, FixedClock, Question, Turn, parse_sample, session_time, speaker_name
from vcm.hotpath.state import HotState
from vcm.obs.metered_store import metered
from vcm.prompt.layers import INJECTED
from vcm.service import BuiltContext, MemoryService
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.types import FactQuery
from vcm.tasks import evict
from vcm.tasks.deps import Deps
from vcm.tasks.summary.recursive import extractive

CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}
LEVELS = ("fifo", "fifo+summary", "builder")
SPEAKER = re.compile(r"[\w.\-]{1,64}")
# Of a summary piece's content words, the share that must be words of a turn for the piece to
# count as taken from it (and at least two): on locomo_dev this finds 0-5 % of the turns still in
# the FIFO, which no summary holds, against 10-18 % of the evicted ones; a half finds far more FIFO turns.
PIECE_SHARE = 2 / 3


# --- the replay (bench_context.py drives the same one) -------------------------------------------
@dataclass
class Replay:
    """One LoCoMo conversation replayed into a fresh agent, its cold path run in this process."""

    service: MemoryService
    deps: Deps
    clock: FixedClock
    conv: Conversation
    agent: str = "locomo"
    message_of: dict[str, str] = field(default_factory=dict)  # dia_id -> message id
    dia_of: dict[str, str] = field(default_factory=dict)  # message id -> dia_id
    turn_of: dict[str, Turn] = field(default_factory=dict)  # dia_id -> the turn replayed
    evictions: int = 0
    seconds: float = 0.0
    tmp: Path | None = None  # the store's directory, removed by close()

    def close(self) -> None:
        self.deps.store.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def start(sample: Mapping[str, Any], model: str, embed_kind: str, backend: str = "") -> Replay:
    """A fresh agent over fakeredis and a temporary embedded store, wired as ``vcm serve`` wires
    embedded mode (``vcm.workers.wiring.build_service``): the service embeds queries with its own
    in-process model, the cold path writes message vectors (here at eviction, as it does for what
    the spool has not reached) under the version recall compares query vectors with. ``backend``:
    the ``[embedding] backend`` ("" = the configured one)."""
    tmp = Path(tempfile.mkdtemp(prefix="vcm-eval-context-"))
    try:
        return _start(sample, model, embed_kind, tmp, backend)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _start(sample: Mapping[str, Any], model: str, embed_kind: str, tmp: Path, backend: str = "") -> Replay:
    base = base_settings()
    update: dict[str, Any] = {"store_url": f"sqlite:///{tmp / 'vcm.db'}"}
    if backend:
        # The named backend runs the batches too, so a comparison compares backends.
        update["embedding"] = base.embedding.model_copy(update={"backend": backend, "batch_backend": "same"})
    settings = base.model_copy(update=update)
    clock = FixedClock()
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), settings, clock=clock)
    store = metered(open_store(settings.store_url))
    if embed_kind == "hash":
        service = MemoryService(hot, store, RecordingDispatcher(), embed=hash_embed, clock=clock)
        deps = Deps(settings, hot, store, RecordingDispatcher(), hash_embed, extractive, clock=clock)
    else:
        from vcm.workers.runtime import LazyEmbed, LazyVectorizer

        embed = LazyEmbed(settings)
        vectorizer = LazyVectorizer(settings)
        service = MemoryService(
            hot, store, RecordingDispatcher(), embed=embed.local(), recall_version=lambda: vectorizer.version,
            clock=clock,
        )  # fmt: skip
        deps = Deps(settings, hot, store, RecordingDispatcher(), embed, extractive, clock=clock, vectorizer=vectorizer)
    run = Replay(service, deps, clock, parse_sample(dict(sample)), tmp=tmp)
    service.create_agent(run.agent, model=model, system_prompt="You are a helpful assistant.")
    return run


@functools.cache
def base_settings() -> Settings:
    """The defaults, read once: a run takes minutes, and the settings file read again later need
    not match the settings classes this process imported at its start."""
    return load_settings(environ={})


def play(run: Replay, max_turns: int = 0, after_turn: Callable[[Replay, Turn, str], None] | None = None) -> None:
    """Every turn (the first ``max_turns``) through the façade, each eviction batch committed as it
    begins; ``after_turn`` sees the agent after each turn's evictions. Consolidation at the end."""
    conv, service = run.conv, run.service
    started = time.perf_counter()
    turns = conv.turns[:max_turns] if max_turns else conv.turns
    for n, turn in enumerate(turns):
        at = session_time(turn.date_time)
        if at is not None:
            run.clock.now = at + n  # a second apart, in order
        role = "user" if turn.speaker == conv.speakers[0] else "assistant"
        res = service.append(run.agent, role, turn.text, name=speaker_name(turn.speaker))
        run.message_of[turn.dia_id] = res.message_id
        run.dia_of[res.message_id] = turn.dia_id
        run.turn_of[turn.dia_id] = turn
        for batch_id in run.deps.hot.pending_batches(run.agent):
            outcome = evict.evict_batch(run.deps, run.agent, batch_id)
            if outcome.outcome != "committed":
                raise RuntimeError(f"batch {batch_id}: {outcome}")
            run.evictions += 1
        if after_turn is not None:
            after_turn(run, turn, role)
    service.consolidate(run.agent)
    run.seconds = time.perf_counter() - started


# --- what the context holds (pure) ---------------------------------------------------------------
def summary_pieces(summary: str) -> list[tuple[str, set[str]]]:
    """(speaker, content words) of each piece of the summary with at least two content words."""
    out = []
    for line in summary.splitlines():
        who, sep, body = line.partition(": ")
        if not sep or not SPEAKER.fullmatch(who):
            who, body = "", line
        for piece in body.split("; "):
            words = content_words(piece)
            if len(words) >= 2:
                out.append((who, words))
    return out


def summary_turns(summary: str, turns: Mapping[str, Turn]) -> frozenset[str]:
    """The turns (by dia_id) a piece of the summary was taken from (see the module's doc)."""
    pieces = summary_pieces(summary)
    out = set()
    for dia, turn in turns.items():
        words, who = content_words(turn.text), speaker_name(turn.speaker)
        for speaker, piece in pieces:
            shared = len(piece & words)
            if speaker in ("", who) and shared >= 2 and shared >= PIECE_SHARE * len(piece):
                out.add(dia)
                break
    return frozenset(out)


def bag_turns(summary: str, turns: Mapping[str, Turn]) -> frozenset[str]:
    """The turns at least half of whose content words are anywhere in the summary (the rule
    rejected above, kept to show why)."""
    held = content_words(summary)
    return frozenset(d for d, t in turns.items() if (w := content_words(t.text)) and len(w & held) >= OVERLAP * len(w))


def injected_turns(
    built: BuiltContext, dia_of: Mapping[str, str], fact_turns: Callable[[str], frozenset[str]]
) -> dict[str, frozenset[str]]:
    """The turns the injected layers' sources hold, by ``layer:kind``: recalled messages
    (``memory:message``), and the evidence messages of facts (``memory:fact``, ``sticky:fact``)."""
    out: dict[str, set[str]] = {}
    for layer in built.injected:
        for source in layer.sources:
            kind, ref = str(source.get("kind")), str(source.get("id"))
            if kind == "message" and ref in dia_of:
                out.setdefault(f"{layer.name}:message", set()).add(dia_of[ref])
            elif kind == "fact":
                out.setdefault(f"{layer.name}:fact", set()).update(fact_turns(ref))
    return {k: frozenset(v) for k, v in out.items()}


def question_row(
    question: Question,
    fifo: frozenset[str],
    summary: frozenset[str],
    injected: Mapping[str, frozenset[str]],
    tokens: Mapping[str, int],
) -> dict[str, Any]:
    """One question's figures: the share of its evidence turns each level holds, whether it
    holds all, what each injected layer contributed, and the injected layers' tokens."""
    wanted = set(question.evidence)
    memory = frozenset().union(*injected.values())
    held = {"fifo": fifo, "fifo+summary": fifo | summary, "builder": fifo | summary | memory}
    row: dict[str, Any] = {
        "question": question.question, "category": question.category, "evidence": len(wanted),
        "evicted": len(wanted - fifo),
    }  # fmt: skip
    for level, turns in held.items():
        found = len(wanted & turns)
        row[level] = found / len(wanted) if wanted else 1.0
        row[f"{level}_all"] = found == len(wanted)
    row["via"] = {name: len(wanted & turns) for name, turns in injected.items() if wanted & turns}
    row["tokens"] = {name: int(tokens.get(name, 0)) for name in INJECTED}
    return row


def aggregate(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per category and overall: mean share of evidence present (%) and share of questions with
    all of it present (%) for each level; the mean tokens of each injected layer; evidence turns
    evicted, and how many of those each injected layer held."""
    groups: dict[str, list[Mapping[str, Any]]] = {"all": list(rows)}
    for row in rows:
        groups.setdefault(str(row["category"]), []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for name in ["all", *sorted(g for g in groups if g != "all")]:
        group = groups[name]
        n = len(group)
        entry: dict[str, Any] = {"n": n}
        for level in LEVELS:
            entry[level] = {
                "mean_pct": share(sum(r[level] for r in group), n),
                "all_present_pct": share(sum(r[f"{level}_all"] for r in group), n),
            }
        entry["tokens"] = {layer: round(sum(r["tokens"][layer] for r in group) / n, 1) if n else 0.0
                           for layer in INJECTED}  # fmt: skip
        entry["evidence_turns"] = sum(r["evidence"] for r in group)
        entry["evidence_evicted"] = sum(r["evicted"] for r in group)
        # Evidence turns (with repeats across questions) each source held; one turn can be held
        # by a recalled message and by a fact at once.
        entry["held_by"] = {k: sum(r["via"].get(k, 0) for r in group) for k in sorted({k for r in group
                                                                                      for k in r["via"]})}  # fmt: skip
        out[name] = entry
    return out


# --- the run ------------------------------------------------------------------------------------
def questions_of(run: Replay, max_turns: int, limit: int) -> list[Question]:
    """The conversation's questions; with ``max_turns``, those whose evidence was replayed (an id
    of no turn at all stays: it is a miss either way)."""
    every = {t.dia_id for t in run.conv.turns}
    kept = [q for q in run.conv.questions if not max_turns or all(e in run.message_of or e not in every
                                                                   for e in q.evidence)]  # fmt: skip
    return kept[:limit] if limit else kept


def ask(run: Replay, questions: Iterable[Question]) -> list[dict[str, Any]]:
    service, agent = run.service, run.agent
    fifo = frozenset(run.dia_of[m] for m in service.fifo_ids(agent) if m in run.dia_of)
    summary = summary_turns(run.deps.hot.snapshot(agent).summary_text, run.turn_of)
    cache: dict[str, frozenset[str]] = {}

    def fact_turns(fact_id: str) -> frozenset[str]:
        if fact_id not in cache:
            fact = service.get_fact(agent, fact_id)
            cache[fact_id] = frozenset(
                run.dia_of[str(e["id"])] for e in fact.evidence
                if e.get("kind", "message") == "message" and str(e.get("id")) in run.dia_of
            )  # fmt: skip
        return cache[fact_id]

    rows = []
    for q in questions:
        built = service.build_context(agent, query=q.question, user=run.conv.speakers[0])
        rows.append(question_row(q, fifo, summary, injected_turns(built, run.dia_of, fact_turns), built.layer_tokens()))
    return rows


def rule_check(run: Replay) -> dict[str, dict[str, float]]:
    """The share of the evicted turns and of the turns still in the FIFO (which no summary can
    hold) that each summary rule finds in the summary: a rule worth its name finds no FIFO turn."""
    fifo = {run.dia_of[m] for m in run.service.fifo_ids(run.agent) if m in run.dia_of}
    text = run.deps.hot.snapshot(run.agent).summary_text
    out = {}
    for name, rule in (("piece", summary_turns), ("half_of_turn_words", bag_turns)):
        held = rule(text, run.turn_of)
        evicted = [d for d in run.turn_of if d not in fifo]
        out[name] = {"evicted_pct": share(sum(d in held for d in evicted), len(evicted)),
                     "fifo_pct": share(len(held & fifo), len(fifo))}  # fmt: skip
    return out


def evaluate(args: argparse.Namespace, write: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Every conversation in turn; ``write`` gets the figures so far after each (with ``--resume``,
    conversations the JSON file already holds for the same settings are kept, not run again)."""
    samples = json.loads(Path(args.data).read_text(encoding="utf-8"))[: args.conversations or None]
    settings = {"model": args.model, "embed": args.embed, "max_turns": args.max_turns, "questions": args.questions}
    conversations: dict[str, Any] = {}
    if args.resume and args.json and args.json.exists():
        before = json.loads(args.json.read_text(encoding="utf-8"))
        if before.get("settings") == settings:
            conversations = before["conversations"]
    started = time.perf_counter()
    result: dict[str, Any] = {}
    for sample in samples:
        name = str(sample.get("sample_id"))
        if name not in conversations:
            conversations[name] = replay_and_ask(sample, args)
            c = conversations[name]
            print(f"{name}: {c['turns']} turns, {c['evictions']} batches, {c['questions']} questions, "
                  f"builder {c['figures'].get('builder', {})}, {c['replay_s']} + {c['questions_s']} s",
                  file=sys.stderr, flush=True)  # fmt: skip
        result = {
            "data": str(args.data),
            "settings": settings,
            "summary_rule": {"piece_share": round(PIECE_SHARE, 3), "min_shared_words": 2},
            "presence": aggregate([r for c in conversations.values() for r in c["rows"]]),
            "conversations": conversations,
            "seconds": round(time.perf_counter() - started, 1),
        }
        write(result)
    return result


def replay_and_ask(sample: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    run = start(sample, args.model, args.embed)
    try:
        play(run, args.max_turns)
        questions = questions_of(run, args.max_turns, args.questions)
        t0 = time.perf_counter()
        rows = ask(run, questions)
        hot = run.service.context(run.agent)
        return {
            "turns": len(run.message_of),
            "questions": len(rows),
            "evictions": run.evictions,
            "fifo_messages": len(run.service.fifo_ids(run.agent)),
            "hot_tokens": _layer_tokens(hot.layers, hot.message_tokens),
            "facts": len(run.service.list_facts(run.agent, FactQuery(statuses=["active", "shadow"], limit=1000))),
            "summary_rule_check": rule_check(run),
            "replay_s": round(run.seconds, 1),
            "questions_s": round(time.perf_counter() - t0, 1),
            "figures": aggregate(rows)["all"] if rows else {},
            "rows": rows,
        }
    finally:
        run.close()


def _layer_tokens(layers: Sequence[str], tokens: Sequence[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, n in zip(layers, tokens, strict=True):
        out[name] = out.get(name, 0) + n
    return out


def print_table(result: Mapping[str, Any]) -> None:
    print(
        f"evidence turns present in the assembled context (window {result['settings']['model']}, "
        f"embed {result['settings']['embed']}): "
        "mean share % / questions with all evidence %"
    )
    head = f"{'category':<16}{'n':>5}" + "".join(f"{label:>18}" for label in ("(a) FIFO", "(b) +summary",
                                                                              "(c) builder"))  # fmt: skip
    print(head)
    print("-" * len(head))
    for group, entry in result["presence"].items():
        label = "all" if group == "all" else f"{group} {CATEGORIES.get(group, '')}"
        cells = "".join(f"{entry[lv]['mean_pct']:>10} / {entry[lv]['all_present_pct']:>5}" for lv in LEVELS)
        print(f"{label:<16}{entry['n']:>5}{cells}")
    overall = result["presence"].get("all")
    if overall:
        tokens = ", ".join(f"{k} {v}" for k, v in overall["tokens"].items())
        held = ", ".join(f"{k} {v}" for k, v in overall["held_by"].items() if v)
        print(f"injected layers, mean tokens per question: {tokens}")
        print(f"evidence turns {overall['evidence_turns']}, evicted {overall['evidence_evicted']}; "
              f"held by injected layers: {held or 'none'}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_flag(parser)
    add_json_flag(parser)
    parser.add_argument("--model", default="vcm-demo-4k", help="a model of [models]: sets the window")
    parser.add_argument("--embed", choices=["model", "hash"], default="model")
    parser.add_argument("--conversations", type=int, default=0, help="the first N conversations only")
    parser.add_argument("--questions", type=int, default=0, help="the first N questions of each conversation only")
    parser.add_argument("--max-turns", type=int, default=0, help="the first N turns of each conversation only")
    parser.add_argument("--quick", action="store_true", help="one conversation, 200 turns, hash embedding")
    parser.add_argument("--resume", action="store_true", help="keep the conversations --json already holds")
    args = parser.parse_args(argv)
    args.data = data_path(args.data)
    if args.quick:
        args.conversations, args.max_turns, args.embed = 1, args.max_turns or 200, "hash"

    def write(result: dict[str, Any]) -> None:
        if args.json:
            write_json(args.json, result)

    print_table(evaluate(args, write))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
