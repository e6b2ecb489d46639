"""``vcm maintenance run [--job NAME]``: run the periodic maintenance jobs now and print what each
did (one JSON line per job). With ``--api`` the server runs them (``POST /v1/maintenance/{job}``);
without, this process does, on the deployment's store. In embedded mode the hot state is the
server's own, so run the ``sweep`` through ``--api`` there: here it would see only this process's."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from vcm.settings import get_settings
from vcm.types import MaintenanceJob


def cmd_maintenance_run(args: argparse.Namespace) -> int:
    if args.api:
        from vcm.cli.commands import _client

        client = _client(args)
        for job in [args.job] if args.job else [str(j) for j in MaintenanceJob]:
            print(json.dumps(client.run_maintenance(job)))
        return 0
    from vcm.workers.wiring import running_service

    # The in-process worker runs what a sweep re-dispatches; no beat for a one-shot command.
    with running_service(get_settings(), beat=False, warm=False) as service:
        for job, outcome in service.run_maintenance(args.job).items():
            print(json.dumps({"job": job, "outcome": outcome}))
    return 0


def add_maintenance_command(sub: Any, api_opts: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("maintenance", help="periodic maintenance: run a job now")
    actions = p.add_subparsers(dest="action", required=True)
    run = actions.add_parser(
        "run", help="run one maintenance job now (all of them without --job) and print its outcome"
    )
    run.add_argument("--job", help=f"one of {', '.join(str(j) for j in MaintenanceJob)} (default: all)")
    api_opts(run)
    run.set_defaults(func=cmd_maintenance_run)
