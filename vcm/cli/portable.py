"""``vcm export --agent A [--out FILE]`` and ``vcm import FILE [--as NEW_ID]``: one agent's own
memory in the portable JSON Lines format (docs/portable.md), from and into the data directory or,
with ``--api``, a running server (the admin token: ``GET /v1/agents/{id}/export``,
``POST /v1/import``). An embedded data directory and a production stack read the same files, so
this is how an agent moves between them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vcm.client.replies import finished
from vcm.errors import Conflict, ValidationError
from vcm.settings import get_settings
from vcm.store.audit_names import Actor


def _write(lines: Iterable[str], out: str | None) -> int:
    """The lines to ``out`` (``-`` or none: stdout); a file is written whole or not at all."""
    if not out or out == "-":
        count = 0
        for line in lines:
            sys.stdout.write(line)
            count += 1
        return count
    path = Path(out)
    partial = path.with_name(path.name + ".partial")
    count = 0
    with partial.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(line)
            count += 1
    partial.replace(path)
    return count


def cmd_export(args: argparse.Namespace) -> int:
    if args.api:
        from vcm.cli.commands import _client

        count = _write(_client(args).export_agent(args.agent, vectors=args.vectors), args.out)
    else:
        from vcm.workers.wiring import running_service

        with running_service(get_settings(), beat=False, warm=False) as service:
            count = _write(service.export_agent(args.agent, vectors=args.vectors, actor=Actor.CLI), args.out)
    if args.out and args.out != "-":
        print(json.dumps({"agent_id": args.agent, "out": args.out, "lines": count}), file=sys.stderr)
    return 0


def _read(source: str) -> list[str]:
    if source == "-":
        return sys.stdin.readlines()
    try:
        with open(source, encoding="utf-8") as f:
            return f.readlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"cannot read {source}: {exc}", field="file") from None


def cmd_import(args: argparse.Namespace) -> int:
    lines = _read(args.file)
    if args.api:
        from vcm.cli.commands import _client

        client = _client(args)
        result = client.import_agent(lines, as_id=args.as_id)
        _wait(result, lambda job: client.wait_for_ingest(result["agent_id"], job))
    else:
        from vcm.workers.wiring import running_service

        # The in-process worker (embedded mode) ingests the documents queued again; wait for them.
        with running_service(get_settings(), beat=False, warm=False) as service:
            result = service.import_agent(lines, as_id=args.as_id, actor=Actor.CLI)
            _wait(result, lambda job: _local_job(service, result["agent_id"], job))
    print(json.dumps(result, indent=2))
    return 0


def _wait(result: dict[str, Any], wait: Callable[[str], object]) -> None:
    for job in result.get("ingest_jobs") or ():
        wait(job)


def _local_job(service: Any, agent_id: str, job_id: str, timeout: float = 600.0) -> None:
    """Wait for a re-ingestion job of the in-process worker; a failed or cancelled job raises
    its coded error (as the client's ``wait_for_ingest`` does), one still running at
    ``timeout`` CONFLICT: the command must not report success for a document not ingested."""
    deadline = time.monotonic() + timeout
    while True:
        job = service.ingest_job(agent_id, job_id)
        if job.finished:
            finished(job.as_dict())
            return
        if time.monotonic() >= deadline:
            raise Conflict(
                f"ingestion job {job_id} is still {job.status} after {timeout:.0f} s; the agent is imported, "
                "and its document is searchable once the job is done",
                job_id=job_id,
            )
        time.sleep(0.2)


def add_portable_commands(sub: Any, api_opts: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "export",
        help="write an agent's own memory as a portable JSON Lines file",
        description="Blocks, summary and its versions, every message with its metadata, facts with "
        "evidence, state keys, archival chunks and snapshots, one record a line (docs/portable.md).",
    )
    p.add_argument("--agent", required=True)
    p.add_argument("--out", help="the file to write (default: stdout)")
    p.add_argument("--vectors", action="store_true", help="include fact and archival vectors")
    api_opts(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "import",
        help="create an agent from a portable file (refused when the agent exists)",
        description="Checks the whole file first (a bad line: VALIDATION_ERROR naming it, nothing "
        "written). Importing the same file again changes nothing.",
    )
    p.add_argument("file", help="the file written by vcm export (- reads stdin)")
    p.add_argument("--as", dest="as_id", help="import under this agent id instead of the file's")
    api_opts(p)
    p.set_defaults(func=cmd_import)
