"""``vcm chat --agent A``: a terminal chat with an agent over the configured model (``[chat]``).

Each line you type is one turn of the agent loop (vcm's memory tools, heartbeats, the built
context); the reply streams as the model writes it. ``--message`` sends one message and exits
(for scripts). With ``--api`` the turn runs in a running ``vcm serve`` (POST /chat); without, in
this process over the data directory, with the in-process cold path.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from vcm.errors import VcmError
from vcm.store.audit_names import Actor


def _lines(args: argparse.Namespace, stdin: TextIO) -> Iterator[str]:
    if args.message is not None:
        yield args.message
        return
    interactive = stdin.isatty()
    while True:
        if interactive:
            print("you> ", end="", flush=True)
        line = stdin.readline()
        if not line:
            return
        if line.strip():
            yield line.rstrip("\n")


def cmd_chat(args: argparse.Namespace, stdin: TextIO = sys.stdin) -> int:
    if args.api:
        from vcm.cli.agents import _remote

        client = _remote(args)
        for line in _lines(args, stdin):
            out = client.chat(args.agent, line, name=args.name)
            _tools(out.get("tool_calls", []))
            print(f"{args.agent}> {out.get('reply') or ''}", flush=True)
        return 0
    from vcm.agent.loop import AgentLoop
    from vcm.api.chat import Upstream
    from vcm.cli.commands import _service
    from vcm.dispatch import COLD_PATH
    from vcm.llm import ChatError
    from vcm.settings import get_settings
    from vcm.tools.executor import ToolExecutor

    settings = get_settings()
    with _service(args, warm=True) as service:  # a session: the model loads while the user types
        service.agent(args.agent)
        loop = AgentLoop(
            service, ToolExecutor(service), Upstream(settings.chat).client(), model=settings.chat.model or None,
            actor=Actor.CLI,
        )  # fmt: skip
        for line in _lines(args, stdin):
            print(f"{args.agent}> ", end="", flush=True)
            try:
                with service.turn(args.agent), COLD_PATH.generating():
                    _stream(loop.turn(args.agent, line, name=args.name, stream=True), print)
            except ChatError as exc:
                print(f"\n[vcm] the model failed: {exc.message}", file=sys.stderr)
                return 1
            except VcmError as exc:
                print(f"\n[vcm] {exc.code}: {exc.message}", file=sys.stderr)
                return 1
    return 0


def _stream(turn: Any, out: Callable[..., None]) -> None:
    while True:
        try:
            event = next(turn)
        except StopIteration:
            out("", flush=True)
            return
        if event["type"] == "delta":
            out(event["content"], end="", flush=True)
        elif event["type"] == "tool_result":
            _tools([event])


def _tools(results: list[dict[str, Any]]) -> None:
    for r in results:
        state = "ok" if r.get("ok") else (r.get("payload", {}).get("error", {}).get("code") or "failed")
        print(f"  [tool {r.get('name')}: {state}]", file=sys.stderr, flush=True)


def add_chat_command(sub: Any, api_opts: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("chat", help="chat with an agent in the terminal (the model of [chat])")
    p.add_argument("--agent", required=True)
    p.add_argument("--name", help="your name, as the agent's memory records it")
    p.add_argument("--message", help="send this one message and exit")
    api_opts(p)
    p.set_defaults(func=cmd_chat)
