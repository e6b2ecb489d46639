#!/usr/bin/env python3
"""Chaos run (not a test by itself; ``tests/eval/test_chaos.py`` drives a short one): the production
process layout on loopback, under concurrent keyed appends, while workers, API processes and
Redis are SIGKILLed and restarted; then a drain and an exactly-once audit of what was acknowledged.

    .venv/bin/python scripts/chaos.py [--duration 60] [--json report.json] [--agents 3]
        [--appenders 3] [--apis 2] [--workers 2] [--worker-kills 3] [--api-kills 3]
        [--redis-crashes 2] [--flushdbs 0] [--delete-cycles 0] [--write-behind-max-s 2]
        [--write-behind-max-messages 500] [--no-retry-acked] [--no-vectors] [--seed 1] [--keep]

Everything is private to the run, in a temporary directory (removed after a passing run unless
``--keep``; ``--workdir`` names one): a ``redis-server`` on a free port (AOF, ``appendfsync
everysec``; hot state in db 0, the Celery broker in db 1), ``vcm serve`` API processes over one
SQLite store file, ``celery worker`` processes on every queue and one ``celery beat`` (its
sweeper re-drives batches and spools messages whose dispatch died with a killed process). The
Redis on 6379 is never touched. Each child runs in its own process group (and dies with this
script, through ``setpriv --pdeathsig`` where available); every group is SIGKILLed on exit,
Ctrl-C, SIGTERM and exceptions included.

Load: appender threads (``--appenders`` per agent) POST messages, each with its own
Idempotency-Key, and retry that key on any API after any failure (refused, reset, timeout, 5xx)
until a 2xx acknowledges it. ``--twins`` of the keys are sent twice at once, to both APIs. Faults
(SIGKILL a worker and start a new one; SIGKILL an API and restart it on its port; SIGKILL Redis
and restart it from its AOF; ``FLUSHDB`` the hot-state db under the running processes, as a
failover to an empty replica would) are interleaved over 15-80 % of the load phase.

After the load: every acknowledged key is sent once more (``--no-retry-acked`` skips it): a kept
message's key must replay its first answer, a lost one's appends once. Then ``--delete-cycles``
times: an agent is created, appended to until an eviction batch begins, deleted 0-2.5 s later
(its commit in flight in a worker), re-created under the same id and appended to; its
re-created agent must hold nothing of the deleted one.

Phases and their bounds: start-up (``--startup-timeout``), load with faults (``--duration``),
settling the last unacknowledged appends (``--settle``), the retries and delete cycles, the drain
of the cold path (``--drain-timeout``: no pending batch, every FIFO message stored; reported:
drained or not, its seconds, the batches and messages still pending), then the checks:

* lost: an acknowledged (message id, content) found neither in the agent's FIFO nor under that
  id with that content in the store, nor in an eviction batch still pending in Redis (that is
  *pending*, counted apart: the cold path had not drained). A loss within the durability
  contract's window (acknowledged at most ``--write-behind-max-s`` + ``--window-slack`` before a
  ``FLUSHDB``, or the AOF's fsync second + slack before a Redis crash) is counted apart as
  ``lost_within_window``;
* duplicated: a run message's content stored (or held in the FIFO) under two message ids, or one
  message id listed twice by the store; twin sends that got two messages, or two non-replayed
  replies, are idempotency violations;
* audit rows: every committed eviction batch has exactly one ``flush`` and one ``evict`` row in
  ``memory_events``; missing and duplicated rows are counted per kind, and each batch missing its
  ``flush`` row is classified by how it was begun, as far as the acknowledgements tell.

* cross-agent rows: texts of a deleted agent (its messages, facts, summary and summary versions,
  FIFO, summary in Redis) held by its re-created successor.

Exit status 0 only when the cold path drained and nothing was lost (outside the window),
duplicated, missing or held across agents, and every retried key replayed or appended once.
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from vcm.client import VcmClient
from vcm.eval.bench import add_json_flag, write_json
from vcm.eval.chaos_run import ChaosRun
from vcm.workers import routes
from vcm.workers.signals import WARM_MESSAGE


def render(r: dict[str, Any]) -> str:
    f, d = r["faults"], r["drain"]
    lines = [
        f"chaos run: {'OK' if r['ok'] else 'FAILED'}   (logs: {r['workdir']})",
        f"  load {r['timing_s']['load']} s, {r['config']['agents']} agents x {r['config']['appenders']} appenders, "
        f"{r['config']['apis']} APIs, {r['config']['workers']} workers ({r['config']['pool']})",
        f"  faults: {f['worker_kill']} worker kills, {f['api_kill']} API kills, {f['redis_crash']} Redis crashes, "
        f"{f['flushdb']} hot-state FLUSHDBs; unexpected exits: {r['unexpected_exits']}",
        f"  acknowledged {r['acknowledged']} ({r['appends_per_s']}/s), {r['retried_acks']} after retries, "
        f"{r['replayed_acks']} replayed; ack wait p50 {r['ack_wait_s']['p50']} s, max {r['ack_wait_s']['max']} s",
        f"  rejected {r['rejected']}, abandoned (unacknowledged at the end) {r['abandoned']}",
        f"  drained: {'yes' if d['drained'] else 'NO'} in {d['seconds']} s; left pending: "
        f"{d['pending_batches']} batches, {d['unspooled']} messages unspooled; acknowledged messages still in "
        f"pending batches {r['pending_at_end']}",
        f"  lost {r['lost']} (outside the contract), lost within the window {r['lost_within_window']} "
        f"(window: {r['window_s']['flushdb']} s before a FLUSHDB, {r['window_s']['redis_crash']} s before a crash)",
        f"  duplicated {r['duplicated']}, keys acknowledged twice {r['twice_acknowledged_keys']}; "
        f"twin sends {r['twin_sends']}, idempotency violations {r['idempotency_violations']} "
        f"(+{r['twin_sends_lost_within_window']} whose first message was lost within the window)",
        f"  retried acknowledged keys: {r['retries']}",
        f"  delete during eviction: {len(r['delete_cycles'])} cycles, cross-agent rows {r['cross_agent_rows']} "
        f"{r['cross_agent_by_place'] or ''}",
        f"  eviction batches committed {r['committed_batches']}; audit rows missing: flush {r['missing_flush_rows']}, "
        f"evict {r['missing_evict_rows']}; duplicated: flush {r['duplicated_flush_rows']}, "
        f"evict {r['duplicated_evict_rows']}; orphan {r['orphan_audit_rows']}; dead letters {r['dead_letters']}",
    ]
    lines.append(f"  flush rows by writer: {r['flush_writers']}")
    if r["missing_flush_causes"]:
        lines.append(f"  missing flush rows by cause: {r['missing_flush_causes']}")
    if r["errors_seen"]:
        lines.append(f"  errors the appenders retried: {r['errors_seen']}")
    if r["log_errors"]:
        lines.append(f"  ERROR lines in process logs: {r['log_errors']}")
    for fault in r["fault_log"]:
        lines.append(f"    t={fault['at_s']:>6.1f} s  {fault['kind']:<12} {fault['target']:<9} {fault['detail']}")
    for e in r["unexpected_exit_log"]:
        lines.append(f"    unexpected exit: {e['process']} gen {e['generation']} rc {e['returncode']} at {e['at_s']} s")
    lines.append(f"  timing: {r['timing_s']}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load and faults (default 60)")
    add_json_flag(p, "write the report here")
    p.add_argument("--agents", type=int, default=3)
    p.add_argument("--appenders", type=int, default=3, help="appender threads per agent")
    p.add_argument("--apis", type=int, default=2, choices=(1, 2))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pool", choices=("solo", "prefork"), default="solo")
    p.add_argument("--model", default="vcm-demo-2k", help="a small window, so evictions come often")
    p.add_argument("--worker-kills", type=int, default=3)
    p.add_argument("--api-kills", type=int, default=3)
    p.add_argument("--redis-crashes", type=int, default=2)
    p.add_argument("--redis-down", type=float, default=1.0, help="seconds Redis stays down per crash")
    p.add_argument("--flushdbs", type=int, default=0, help="FLUSHDBs of the hot-state db during the load")
    p.add_argument("--delete-cycles", type=int, default=0, help="delete-during-eviction cycles after the load")
    p.add_argument("--delete-max-delay", type=float, default=2.5, help="most seconds from a batch to its delete")
    p.add_argument("--write-behind-max-s", type=float, default=2.0, help="[durability] write_behind_max_s")
    p.add_argument("--write-behind-max-messages", type=int, default=500, help="[durability] write_behind_max_messages")
    p.add_argument("--window-slack", type=float, default=0.5, help="seconds added to the loss window (store write)")
    p.add_argument(
        "--no-retry-acked", dest="retry_acked", action="store_false", help="skip sending every acknowledged key again"
    )
    p.add_argument("--no-vectors", action="store_true", help="spool without embedding (a lighter cold path)")
    p.add_argument("--pause", type=float, default=0.2, help="mean pause between one appender's messages")
    p.add_argument("--twins", type=float, default=0.05, help="share of keys sent twice at once, to both APIs")
    p.add_argument("--request-timeout", type=float, default=10.0)
    p.add_argument("--task-time-limit", type=int, default=8, help="worker hard time limit (s)")
    p.add_argument("--sweep-interval", type=float, default=3.0, help="beat sweep interval and grace (s)")
    p.add_argument(
        "--no-wait-warm",
        dest="wait_warm",
        action="store_false",
        help="start the load once workers consume, before they loaded the embedding model",
    )
    p.add_argument("--startup-timeout", type=float, default=180.0)
    p.add_argument("--settle", type=float, default=30.0, help="after the load, seconds to get keys acknowledged")
    p.add_argument("--drain-timeout", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", type=Path, help="default: a new temporary directory")
    p.add_argument("--keep", action="store_true", help="keep the work directory even when the run passed")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("redis-server") is None:
        print("chaos: redis-server is not on PATH", file=sys.stderr)
        return 2

    def connect(url: str, token: str, timeout_s: float) -> VcmClient:
        return VcmClient(url, token, timeout=timeout_s)

    run = ChaosRun(args, connect=connect, queues=routes.QUEUES, warm_message=WARM_MESSAGE)
    atexit.register(run.sup.kill_all)  # a backstop: the finally below is the normal path

    def terminate(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGHUP, terminate)
    # Ctrl-C stops the run even where it was started with SIGINT ignored (a background job).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    report: dict[str, Any] | None = None
    try:
        report = run.execute()
    finally:
        run.cleanup()
        if report is None:
            print(f"chaos: the run did not finish; logs in {run.logdir}", file=sys.stderr)
    print(render(report))
    write_json(args.json, report)
    if report["ok"] and not args.keep and args.workdir is None:
        shutil.rmtree(run.workdir, ignore_errors=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
