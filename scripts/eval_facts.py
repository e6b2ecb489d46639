#!/usr/bin/env python3
"""Which facts of a conversation survive eviction as structured memory: LoCoMo replayed through a
4k window, scored against the dataset's ``observation`` facts.

    .venv/bin/python scripts/eval_facts.py [--data LOCOMO_JSON] [--json OUT]
        [--model vcm-demo-4k] [--embed model|hash] [--limit N] [--quick]

Each conversation goes turn by turn into a fresh agent through the façade
(``MemoryService.append``: the speaker as the message's ``name``, image turns with their caption,
the clock at the session's time), and every eviction batch is committed in process by the cold
path's ``vcm.tasks.evict.evict_batch``, which extracts shadow facts (with evidence pointers to
the batch's messages) before the commit. At the end, consolidation runs once (the replay test).

Scored against LoCoMo's ``observation`` facts whose evidence turns were all evicted:

* **recall**: the share of those observations covered by a kept fact, i.e. a fact (shadow or
  active) whose evidence points at one of the observation's turns (``evidence``), and also
  holding at least ``--overlap`` of the observation's content words (``evidence+words``);
* **evidence precision**: the share of the kept facts' evidence turns that are evidence of some
  observation (facts that point at turns the dataset found fact-bearing);
* counts: facts kept, by type and status, promoted by consolidation.

``--embed hash``: a hashed bag of words instead of the embedding model (no model to load).
``--quick``: the first conversation's first 200 turns, hash embedding.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import fakeredis
import numpy as np

from vcm.dispatch import RecordingDispatcher
from vcm.eval.bench import add_data_flag, add_json_flag, data_path, write_json
from vcm.eval.conversation import FixedClock, observations, parse_sample, session_time
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store import open_store
from vcm.store.types import FactQuery
from vcm.tasks import evict
from vcm.tasks.deps import Deps
from vcm.tasks.summary.recursive import extractive

WORD = re.compile(r"[a-z0-9]+")
STOP = frozenset(
    re.findall(
        r"\S+",
        "a an the and or but if of to in on at by for with from as is are was were be been being it its "
        "this that these those i me my we our you your he him his she her they them their what which who "
        "whom when where why how all any both each few more most other some such no nor not only own "
        "same so than too very can will just do does did has have had having about into through during "
        "before after above below up down out off over under again then "
        "once here there also",
    )
)


def content_words(text: str) -> set[str]:
    return {w.rstrip("s") if len(w) > 3 else w for w in WORD.findall(text.lower()) if len(w) > 1 and w not in STOP}


def hash_embed(texts: Sequence[str]) -> Any:
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, text in enumerate(texts):
        for w in content_words(text):
            out[i, int(hashlib.sha256(w.encode()).hexdigest(), 16) % 64] += 1.0
        norm = float(np.linalg.norm(out[i]))
        out[i] = out[i] / norm if norm else np.eye(64, dtype=np.float32)[0]
    return out


def replay(sample: Mapping[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    conv = parse_sample(dict(sample))
    tmp = Path(tempfile.mkdtemp(prefix="vcm-eval-facts-"))
    settings = load_settings(environ={}, overrides={"store_url": f"sqlite:///{tmp / 'vcm.db'}"})
    clock = FixedClock()
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), settings, clock=clock)
    store = open_store(settings.store_url)
    if args.embed == "hash":
        embed: Any = hash_embed
    else:
        from vcm.workers.runtime import LazyEmbed

        embed = LazyEmbed(settings)
    service = MemoryService(hot, store, RecordingDispatcher(), embed=embed, clock=clock)
    deps = Deps(settings, hot, store, RecordingDispatcher(), embed, extractive, clock=clock)
    agent = "locomo"
    service.create_agent(agent, model=args.model, system_prompt="You are a helpful assistant.")
    dia_of: dict[str, str] = {}
    evicted: set[str] = set()
    started = time.perf_counter()
    turns = conv.turns[: args.max_turns] if args.max_turns else conv.turns
    for n, turn in enumerate(turns):
        at = session_time(turn.date_time)
        if at is not None:
            clock.now = at + n
        role = "user" if turn.speaker == conv.speakers[0] else "assistant"
        res = service.append(agent, role, turn.text, name=re.sub(r"[^\w-]", "_", turn.speaker)[:64])
        dia_of[res.message_id] = turn.dia_id
        for batch_id in hot.pending_batches(agent):
            evicted |= {dia_of.get(m.id, "") for m in hot.read_batch(agent, batch_id)}
            outcome = evict.evict_batch(deps, agent, batch_id)
            if outcome.outcome != "committed":
                raise RuntimeError(f"batch {batch_id}: {outcome}")
    consolidated = service.consolidate(agent)
    # An entity fact is a name with pointers to where it was said: it says nothing an observation
    # could be covered by, so it is counted apart (relations, which state something, count).
    stated = [t for t in service.settings.facts.types if t != "entity"]
    kept = service.list_facts(agent, FactQuery(types=stated, statuses=["active", "shadow"], limit=1000))
    entities = len(service.list_facts(agent, FactQuery(types=["entity"], statuses=["active", "shadow"], limit=1000)))
    seconds = time.perf_counter() - started
    store.close()
    return score(sample, kept, dia_of, evicted, consolidated, args.overlap) | {
        "entities": entities,
        "turns": len(turns),
        "seconds": round(seconds, 1),
    }


def score(
    sample: Mapping[str, Any],
    kept: Sequence[Any],
    dia_of: Mapping[str, str],
    evicted: set[str],
    consolidated: Mapping[str, int],
    overlap: float,
) -> dict[str, Any]:
    due = [(text, ev) for text, ev in observations(sample) if ev and ev <= evicted]
    fact_turns = [({dia_of.get(str(e["id"]), "") for e in f.evidence} - {""}, content_words(f.value)) for f in kept]
    by_evidence = by_both = 0
    for text, ev in due:
        words = content_words(text)
        pointing = [fw for turns, fw in fact_turns if turns & ev]
        if pointing:
            by_evidence += 1
            if any(words and len(words & fw) / len(words) >= overlap for fw in pointing):
                by_both += 1
    fact_bearing = set().union(*(ev for _, ev in observations(sample))) if observations(sample) else set()
    pointed = [t for turns, _ in fact_turns for t in turns]
    types: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for f in kept:
        types[f.type] = types.get(f.type, 0) + 1
        statuses[f.status] = statuses.get(f.status, 0) + 1
    return {
        "observations_evicted": len(due),
        "covered_by_evidence": by_evidence,
        "covered_by_evidence_and_words": by_both,
        "facts_kept": len(kept),
        "facts_by_type": types,
        "facts_by_status": statuses,
        "promoted": consolidated.get("promoted", 0),
        "evidence_pointers": len(pointed),
        "evidence_pointers_fact_bearing": sum(1 for t in pointed if t in fact_bearing),
    }


def share(a: float, b: float) -> float:
    return round(a / b, 4) if b else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_flag(parser)
    add_json_flag(parser, "write the figures to this file")
    parser.add_argument("--model", default="vcm-demo-4k")
    parser.add_argument("--embed", choices=["model", "hash"], default="model")
    parser.add_argument("--limit", type=int, help="only the first N conversations")
    parser.add_argument("--max-turns", type=int, default=0)
    parser.add_argument("--overlap", type=float, default=0.3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    args.data = data_path(args.data)
    if args.quick:
        args.limit, args.max_turns, args.embed = 1, 200, "hash"
    samples = json.loads(Path(args.data).read_text())[: args.limit or None]
    rows = []
    for sample in samples:
        row = {"sample_id": sample.get("sample_id"), **replay(sample, args)}
        rows.append(row)
        print(
            f"{row['sample_id']}: {row['turns']} turns, {row['facts_kept']} facts kept "
            f"({row['facts_by_status']}), observations evicted {row['observations_evicted']}: "
            f"recall {share(row['covered_by_evidence'], row['observations_evicted']):.1%} by evidence, "
            f"{share(row['covered_by_evidence_and_words'], row['observations_evicted']):.1%} with words; "
            f"evidence precision {share(row['evidence_pointers_fact_bearing'], row['evidence_pointers']):.1%}, "
            f"{row['seconds']} s",
            flush=True,
        )
    total = {k: sum(r[k] for r in rows) for k in (
        "observations_evicted", "covered_by_evidence", "covered_by_evidence_and_words", "facts_kept",
        "evidence_pointers", "evidence_pointers_fact_bearing", "promoted", "turns",
    )}  # fmt: skip
    overall = {
        **total,
        "recall_by_evidence": share(total["covered_by_evidence"], total["observations_evicted"]),
        "recall_by_evidence_and_words": share(total["covered_by_evidence_and_words"], total["observations_evicted"]),
        "evidence_precision": share(total["evidence_pointers_fact_bearing"], total["evidence_pointers"]),
    }
    print(
        f"overall: recall {overall['recall_by_evidence']:.1%} by evidence, "
        f"{overall['recall_by_evidence_and_words']:.1%} with words; evidence precision "
        f"{overall['evidence_precision']:.1%}; {total['facts_kept']} facts kept, {total['promoted']} promoted"
    )
    write_json(args.json, {"args": vars(args), "conversations": rows, "overall": overall})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
