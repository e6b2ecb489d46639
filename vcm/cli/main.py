"""The ``vcm`` command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence

import httpx
import redis

from vcm.cli.commands import add_commands
from vcm.errors import VcmError
from vcm.eval import conversation, demo
from vcm.eval.report import build_report
from vcm.eval.report import render as render_report
from vcm.settings import get_settings, redact_url


def _demo(args: argparse.Namespace) -> int:
    from vcm.tasks.recall.evaluation import recall_at_k
    from vcm.workers.wiring import running_service

    settings = get_settings()
    if not args.keep and not os.environ.get("VCM_STORE_URL"):
        # A fresh store per run unless asked to keep it: the demo's agents would otherwise pile up
        # in the user's data directory (and be rebuilt at every start).
        fresh = f"sqlite:///{tempfile.mkdtemp(prefix='vcm-demo-')}/vcm.db"
        settings = settings.model_copy(update={"store_url": fresh})
    print(f"store: {redact_url(settings.store_url)}" + ("" if args.keep else " (temporary; --keep keeps it)"))
    if args.data:
        convs = conversation.load(args.data)
    else:
        convs = [conversation.parse_sample(s) for s in conversation.generate(seed=args.seed)]
    conv = convs[0]
    mode = "embedded (fakeredis + SQLite + in-process worker)" if not settings.redis_url else settings.redis_url
    print(
        f"vcm demo: {conv.sample_id}, {len(conv.turns)} turns between {conv.speakers[0]} and {conv.speakers[1]}, "
        f"{len(conv.questions)} questions; mode: {mode}"
    )
    with running_service(settings) as service:
        report = demo.run(service, conv, model=args.model, recall_at_k=recall_at_k, limit=args.limit)
        gauges = service.context(report.agent_id).gauges.as_dict()
        conveyance = build_report(service, [report.agent_id])
        # The product: the prompt built for one of the conversation's questions.
        asked = conv.questions[0].question if conv.questions else None
        view = demo.prompt_view(service.build_context(report.agent_id, query=asked, record_use=False))
    print(
        f"\n{len(report.appended)} messages appended, {report.warnings} pressure warnings, "
        f"{report.evictions} evictions, {report.summary_versions} summary versions"
    )
    print("context gauges:", json.dumps(gauges))
    print(
        f"recall: {report.recall_at_10:.1%} of evidence turns found in the top 10 over {report.questions} "
        f"questions (search_recall)"
    )
    print("\n".join(view))
    print("(the whole prompt: run the demo with --keep, then vcm context --built --agent AGENT --query '...')")
    print(f"done in {report.seconds:.0f} s\n")
    print(render_report(conveyance))
    acct = report.accounting
    ok = acct.get("unaccounted", 1) == 0 and acct.get("pending_eviction", 1) == 0
    if not ok:
        print("error: some messages are not accounted for", file=sys.stderr)
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vcm", description="vcm: a virtual context manager for LLM agents")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="replay a long conversation through vcm with a small window")
    demo.add_argument("--data", help="a LoCoMo-format JSON file (default: a generated conversation)")
    demo.add_argument("--model", default="vcm-demo-2k", help="model name from [models] (sets the window)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the generated conversation")
    demo.add_argument("--limit", type=int, help="replay only the first N turns")
    demo.add_argument("--keep", action="store_true", help="keep the run in the data directory (default: a temp store)")
    demo.set_defaults(func=_demo)
    add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except VcmError as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except httpx.TransportError as exc:  # --api URL that does not answer: say so, no traceback
        where = getattr(args, "api", None) or "the vcm API"
        print(f"error STORE_UNAVAILABLE: cannot reach {where}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except redis.exceptions.ConnectionError as exc:
        print(f"error STORE_UNAVAILABLE: the hot state (Redis) is unavailable: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
