"""``vcm append --agent A FILE``: a conversation held elsewhere appended to an agent's context,
one message a line of JSON (``role``, ``content`` and optionally ``name``, ``created_at``,
``metadata``, ``pinned``, ``tool_calls``, ``tool_call_id``), oldest first, in lists of up to
``--batch`` messages (``append_many``), into the data directory or, with ``--api``, a running
server. Each list is keyed by the file's digest and its first line, so running the same file
again appends nothing twice. In embedded mode the command waits until the evictions the
messages started are committed (the cold path runs in this process)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vcm import jsontext
from vcm.errors import ValidationError
from vcm.eval.demo import wait_for
from vcm.settings import get_settings
from vcm.store.audit_names import Actor


def read_messages(raw: bytes) -> list[dict[str, Any]]:
    """The file's messages, one JSON object a line (blank lines skipped); a bad line is a
    VALIDATION_ERROR naming it, before anything is appended."""
    out: list[dict[str, Any]] = []
    for n, line in enumerate(raw.decode("utf-8", errors="strict").splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = jsontext.loads(line)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"line {n} is not JSON: {exc.msg}", field=f"line {n}") from None
        if not isinstance(value, dict):
            raise ValidationError(f"line {n} must be a JSON object (a message)", field=f"line {n}")
        out.append(value)
    if not out:
        raise ValidationError("the file holds no messages", field="file")
    return out


def lists_of(messages: Sequence[Mapping[str, Any]], size: int) -> list[tuple[int, list[Any]]]:
    """The messages in lists of ``size``, each with the index of its first message. Sent with the
    file's key (:func:`file_key`) and that index, message *n* of the file is keyed ``<key>:<n>``
    whatever ``--batch`` is: the same file run again, in lists of any size, replays every
    message that went in and appends the rest once."""
    return [(i, list(messages[i : i + size])) for i in range(0, len(messages), size)]


def file_key(raw: bytes) -> str:
    """The idempotency key of a conversation file: its content's digest."""
    return "append:" + hashlib.sha256(raw).hexdigest()[:24]


def cmd_append(args: argparse.Namespace) -> int:
    raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    messages = read_messages(raw)
    key = file_key(raw)
    lists = lists_of(messages, args.batch)
    started = time.monotonic()
    results: list[Mapping[str, Any]] = []
    if args.api:
        from vcm.cli.commands import _client

        with _client(args) as client:
            for first, part in lists:
                results += client.append_many(args.agent, part, idempotency_key=key, first_index=first)["results"]
    else:
        from vcm.workers.wiring import running_service

        with running_service(get_settings(), beat=False, warm=False) as service:
            for first, part in lists:
                done = service.append_many(args.agent, part, idempotency_key=key, actor=Actor.CLI, first_index=first)
                results += [{"replayed": r.replayed, "batch": r.batch} for r in done]
            # The cold path runs in this process: the evictions the messages began go to recall
            # before it ends (a batch left pending is begun again by the next process, but a user
            # reading the context right after expects the summary there).
            wait_for(lambda: not service.hot.pending_batches(args.agent), args.settle_timeout)
    print(
        json.dumps(
            {
                "agent": args.agent,
                "messages": len(results),
                "replayed": sum(1 for r in results if r.get("replayed")),
                "calls": len(lists),
                "evictions": sum(1 for r in results if r.get("batch")),
                "seconds": round(time.monotonic() - started, 2),
            }
        )
    )
    return 0


def add_append_command(sub: Any, api_opts: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        "append",
        help="append a conversation from a JSON Lines file (one message a line, with its created_at)",
        description="Checks the whole file first (a bad line: VALIDATION_ERROR naming it, nothing "
        "appended). Running the same file again appends nothing twice.",
    )
    p.add_argument("file", help="one message a JSON object a line, oldest first (- reads stdin)")
    p.add_argument("--agent", required=True)
    p.add_argument("--batch", type=int, default=1000, choices=range(1, 1001), metavar="N",
                   help="messages per call, 1-1000 (default 1000)")  # fmt: skip
    p.add_argument("--settle-timeout", type=float, default=300.0, help="embedded: seconds to wait for evictions")
    api_opts(p)
    p.set_defaults(func=cmd_append)
