"""``vcm instances --agent A``: the client instances of an agent and the sync status each reported
last (:mod:`vcm.service.replicas`), from a running server (``--api``) or, with a shared Redis,
locally."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

COLUMNS = ("instance_id", "status", "last sync", "version", "pending", "conflicts", "failures", "hit ratio", "seen")


def _ago(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def _row(r: dict[str, Any], now: float) -> list[str]:
    cache = r.get("cache") or {}
    looked = int(cache.get("hits", 0)) + int(cache.get("misses", 0))
    last = r.get("last_sync_at")
    status = str(r.get("status")) + (" (stale)" if r.get("stale") else "")
    return [
        str(r.get("instance_id")),
        status,
        _ago(now - last) if isinstance(last, int | float) else "never",
        str(r.get("sync_version") or "-"),
        str(r.get("pending", 0)),
        str(r.get("conflicts", 0)),
        f"{r.get('failures', 0)} ({r.get('consecutive_failures', 0)} in a row)",
        f"{int(cache.get('hits', 0)) / looked:.0%}" if looked else "-",
        _ago(r.get("age_s")),
    ]


def render(instances: Sequence[dict[str, Any]], now: float) -> str:
    """A table, one instance a row (widths fitted to the content)."""
    if not instances:
        return "no instance has reported its sync status"
    rows = [list(COLUMNS), *(_row(r, now) for r in instances)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def cmd_instances(args: argparse.Namespace) -> int:
    if args.api:
        from vcm.cli.agents import _remote

        found = list(_remote(args).instances(args.agent)["instances"])
    else:
        from vcm.cli.agents import _local

        with _local() as service:
            found = service.instances(args.agent)
    if args.json:
        print(json.dumps({"agent_id": args.agent, "instances": found}, indent=2, default=str))
    else:
        print(render(found, time.time()))
    return 0


def add_instances_command(sub: Any, api_opts: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "instances",
        help="the client instances of an agent and their sync status",
        description="Each instance of the agent that caches its memory (VcmClient(cache=...)) reports its "
        "sync status after every sync: synced, syncing, conflict or error, with its feed position, pending "
        "changes, conflicts, failures and cache hit ratio. An instance silent for three sync intervals is "
        "marked stale.",
    )
    p.add_argument("--agent", required=True)
    p.add_argument("--json", action="store_true", help="print the reports as JSON")
    api_opts(p)
    p.set_defaults(func=cmd_instances)


__all__ = ["add_instances_command", "cmd_instances", "render"]
