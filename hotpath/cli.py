"""The ``vcm`` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence

from hotpath import conversation
from hotpath.connection import connect
from hotpath.context import assemble
from hotpath.errors import VcmError
from hotpath.replay import account, replay
from hotpath.settings import get_settings
from hotpath.state import HotState
from hotpath.types import BatchInfo
from store.errors import StoreError


def _demo(args: argparse.Namespace) -> int:
    settings = get_settings()
    hot = HotState(connect(settings.redis_url), settings)
    if args.data:
        convs = conversation.load(args.data)
    else:
        convs = [conversation.parse_sample(s) for s in conversation.generate(seed=args.seed)]
    conv = convs[0]
    agent_id = f"demo-{conv.sample_id}-{int(time.time())}"
    print(f"vcm demo: replaying {conv.sample_id} ({len(conv.turns)} turns, {conv.speakers[0]} and "
          f"{conv.speakers[1]}) through the hot path; model {args.model} "
          f"({settings.window_for(args.model)}-token window), hot state: "
          f"{'Redis ' + settings.redis_url if settings.redis_url else 'embedded (fakeredis)'}")
    committed: set[str] = set()

    def finish_inline(agent: str, batch: BatchInfo) -> None:
        # Hot-path-only run: commit each batch at once with a short interim summary.
        msgs = hot.read_batch(agent, batch.id)
        prev, _, _, _ = hot.summary(agent)
        lines = [m.content.split(". ")[0][:160] for m in msgs if m.kind == "message"]
        text = "\n".join([prev, *lines]).strip() if prev else "\n".join(lines)
        cap = int(hot.snapshot(agent).meta["sum_cap"])
        while hot.summary_tokens(agent, text) > cap and "\n" in text:
            text = text.split("\n", 1)[1]
        result = hot.finish_eviction(agent, batch.id, text)
        committed.update(batch.message_ids)
        print(f"           summary v{result.summary_rev}: {hot.summary_tokens(agent, text)} tokens")

    report = replay(hot, conv, agent_id=agent_id, model=args.model, on_batch=finish_inline, limit=args.limit)
    ctx = assemble(hot.snapshot(agent_id))
    acct = account(hot, agent_id, report, committed)
    print(f"\n{report.appended} messages appended, {report.warnings} warnings, {report.flushes} evictions; "
          f"peak occupancy {report.max_occupancy:.1%}")
    print("gauges:", json.dumps(ctx.gauges.as_dict()))
    print("accounting:", json.dumps(acct))
    return 0 if acct["unaccounted"] == 0 else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vcm", description="vcm: a virtual context manager for LLM agents")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="replay a long conversation through vcm with a small window")
    demo.add_argument("--data", help="a LoCoMo-format JSON file (default: a generated conversation)")
    demo.add_argument("--model", default="vcm-demo-2k", help="model name from [models] (sets the window)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the generated conversation")
    demo.add_argument("--limit", type=int, help="replay only the first N turns")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (VcmError, StoreError) as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
