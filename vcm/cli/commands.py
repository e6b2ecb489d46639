"""The ``vcm`` subcommands other than ``demo``. The CLI is a process entry point: it may wire
workers and tasks in, which the rest of the package never imports."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vcm.cli import doctor
from vcm.errors import ValidationError
from vcm.service import MemoryService
from vcm.settings import get_settings


@contextmanager
def _service(args: argparse.Namespace, *, warm: bool = False) -> Iterator[MemoryService]:
    from vcm.workers.wiring import running_service

    # A one-shot command (``warm`` off): the cold path loads the model only if a task needs it.
    with running_service(get_settings(), warm=warm) as service:
        yield service


def _client(args: argparse.Namespace) -> Any:
    from vcm.client import VcmClient

    token = args.token or os.environ.get("VCM_TOKEN", "")
    if not token:
        raise ValidationError("--api needs a token: --token or VCM_TOKEN", field="token")
    return VcmClient(args.api, token)


def _bar(part: int, whole: int, width: int = 40) -> str:
    filled = round(width * part / whole) if whole else 0
    return "█" * filled + "·" * (width - filled)


def render_context(data: Mapping[str, Any]) -> str:
    """A readable view of a main context and its gauges (the shape the API returns)."""
    g = data["gauges"]
    lines = [
        f"agent {data.get('agent_id', '?')}: {g['total']} of {g['window']} tokens "
        f"({g['occupancy']:.0%}), {g['free']} free below max {g['max']}"
    ]
    for part in ("system", "working", "summary", "placeholders", "fifo"):
        lines.append(f"  {part:<13}{g[part]:>7}  {_bar(g[part], g['window'])}")
    lines.append(f"  {'free':<13}{g['free']:>7}  {_bar(max(g['free'], 0), g['window'])}")
    layers = data.get("layers") or []
    injected: dict[str, int] = {}
    for name, n in zip(layers, data.get("message_tokens", []), strict=False):
        if name not in ("system", "working", "summary", "placeholder", "fifo"):
            injected[name] = injected.get(name, 0) + n
    if injected:
        lines.append("  injected for this call (within the window less the output reserve):")
        for name, n in injected.items():
            lines.append(f"    {name:<11}{n:>7}  {_bar(n, g['window'])}")
    lines.append("")
    for i, msg in enumerate(data["messages"]):
        tokens = data["message_tokens"][i] if i < len(data.get("message_tokens", [])) else ""
        layer = layers[i] if i < len(layers) else msg["role"]
        text = " ".join(str(msg.get("content", "")).split())
        lines.append(f"{i:>4} {layer:<11}{tokens:>6}  {text[:100]}{'…' if len(text) > 100 else ''}")
    return "\n".join(lines)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from vcm.api.app import create_app
    from vcm.api.auth import with_admin_token
    from vcm.tasks.embedding import settle_heap
    from vcm.tools.executor import ToolExecutor
    from vcm.workers.wiring import running_service

    settings, generated = with_admin_token(get_settings())
    if generated:
        print(f"vcm serve: generated admin token (shown once): {generated}", file=sys.stderr)
    with running_service(settings) as service:
        app = create_app(service, ToolExecutor(service), settings=settings)
        # Everything built so far (modules, the app, Celery, the store) lives as long as the
        # process: keep it out of the cyclic collector, whose full passes over it paused every
        # request for 40-80 ms in embedded mode (scripts/bench_api.py).
        settle_heap()
        uvicorn.run(app, host=args.host or settings.api.host, port=args.port or settings.api.port, log_level="warning")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """vcm's memory tools and an agent's memory over the Model Context Protocol (vcm.mcp): over
    stdio for the agent of ``--token``/``VCM_TOKEN`` (or the admin token and ``--agent``), checked
    before serving; over streamable HTTP for the agent of each request's bearer token."""
    import anyio
    import uvicorn

    from vcm.api.auth import TokenAuthority, admin_digest, with_admin_token
    from vcm.mcp.server import build_server, fixed, reserved_stdio, serve_stdio, session_for
    from vcm.tools.executor import ToolExecutor
    from vcm.workers.wiring import running_service

    stdio = args.transport == "stdio"
    if not stdio and (args.agent or args.token):
        # Over HTTP each request names its agent by its own bearer token: an option that would
        # pick one for the whole server would be ignored, so it is refused.
        option = "--agent" if args.agent else "--token"
        raise ValidationError(f"{option} is for the stdio transport; over HTTP each request's token names its agent",
                              field=option.lstrip("-"))  # fmt: skip
    # An admin token is needed only to name an agent over stdio; without one set, a random one that
    # nobody knows stands in (never printed: agents' tokens are what MCP clients connect with).
    settings, _ = with_admin_token(get_settings())
    token = args.token or os.environ.get("VCM_TOKEN", "")
    if stdio and not token:
        raise ValidationError("vcm mcp over stdio serves the agent of a token: --token or VCM_TOKEN", field="token")
    # Over stdio, stdin and stdout are the wire from the start: the cold path started below (and
    # any process it starts) prints to stderr.
    with reserved_stdio() if stdio else nullcontext((0, 1)) as wire, running_service(settings) as service:
        authority = TokenAuthority(service.hot.tokens, admin_digest(settings), rebuild=service.rebuild)
        executor = ToolExecutor(service)
        if stdio:
            session = session_for(authority, service, token, args.agent)
            anyio.run(serve_stdio, build_server(service, executor, fixed(session)), wire)
            return 0
        from vcm.mcp.http import http_app

        host = args.host or settings.api.host
        app = http_app(
            service, executor, authority, host=host, path=args.path, max_body_bytes=settings.api.max_body_bytes
        )
        print(f"vcm mcp: streamable HTTP on http://{host}:{args.port}{args.path}", file=sys.stderr)
        uvicorn.run(app, host=host, port=args.port, log_level="warning")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from vcm.workers.build import build

    app = build(get_settings()).app
    argv = ["worker", "-Q", args.queues, "-E", "--prefetch-multiplier=1", f"--loglevel={args.loglevel}"]
    if args.concurrency:
        argv.append(f"--concurrency={args.concurrency}")
    app.worker_main(argv)
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    with _service(args) as service:
        started = time.monotonic()

        def progress(path: str, done: int, total: int) -> None:
            width = 30
            filled = round(width * done / total) if total else width
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {path[-40:]:<40}")
            sys.stderr.flush()

        report = service.ingest_paths(args.agent, args.paths, root=args.root, naive=args.naive, progress=progress)
        sys.stderr.write("\n")
    summary = report.to_dict()
    summary["seconds"] = round(time.monotonic() - started, 2)
    print(json.dumps(summary, indent=2, default=str))
    return 0 if not report.failures else 1


def cmd_search(args: argparse.Namespace) -> int:
    if args.api:
        client = _client(args)
        if args.archival:
            print(json.dumps(client.search_archival(args.agent, args.query, k=args.limit), indent=2))
        else:
            print(json.dumps(client.search_recall(args.agent, args.query, mode=args.mode, limit=args.limit), indent=2))
        return 0
    with _service(args) as service:
        if args.archival:
            found = service.search_archival(args.agent, args.query, k=args.limit)
            for hit in found.page.items:
                print(f"{hit.score:7.3f}  {hit.chunk.doc_id}#{hit.chunk.chunk_index}  {hit.chunk.text[:100]}")
        else:
            result = service.search_recall(args.agent, args.query, limit=args.limit, mode=args.mode)
            for rhit in result.page.items:
                m = rhit.message
                print(f"{rhit.score:7.3f}  {m.message_id:<8} {m.role:<9} {m.content[:100]}")
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    if args.api:
        data = _client(args).context(args.agent, built=args.built, query=args.query)
        print(json.dumps(data, indent=2) if args.json else render_context(data))
        return 0
    # In embedded mode this process rebuilds the agent's hot state from the data directory.
    with _service(args) as service:
        ctx = (
            service.build_context(args.agent, query=args.query, record_use=False)
            if args.built
            else service.context(args.agent)
        )
        data = {
            "agent_id": args.agent,
            "gauges": ctx.gauges.as_dict(),
            "messages": ctx.messages,
            "message_tokens": ctx.message_tokens,
            "layers": ctx.layers,
        }
        print(json.dumps(data, indent=2) if args.json else render_context(data))
    return 0


def parse_when(value: str) -> float:
    """``--since``/``--until``: unix seconds, an ISO 8601 time (UTC unless it says), or an age
    such as ``90s``, ``15m``, ``2h``, ``7d`` (that long before now)."""
    text = value.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1:] in units and text[:-1].replace(".", "", 1).isdigit():
            return time.time() - float(text[:-1]) * units[text[-1]]
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a time: use unix seconds, ISO 8601 (2026-01-31T12:00) or an age (15m, 2h, 7d)"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def cmd_events(args: argparse.Namespace) -> int:
    kinds = args.kind or None
    filters = {"since": args.since, "until": args.until, "actor": args.actor, "idempotency_key": args.key}
    if args.api:
        client = _client(args)
        if args.agent:
            found = client.events(args.agent, kinds=kinds, limit=args.limit, **filters)
        else:
            found = client.all_events(kinds=kinds, limit=args.limit, **filters)
        print(json.dumps(found, indent=2))
        return 0
    with _service(args) as service:
        page = service.events(args.agent, kinds, limit=args.limit, **filters)
        for e in page.items:
            if args.json:
                print(json.dumps(event_json(e), default=str))
                continue
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.created_at))
            key = f" key={e.idempotency_key}" if e.idempotency_key else ""
            print(
                f"{when}  {e.agent_id:<12} {e.kind:<16} {e.actor:<24}{key}  "
                f"{json.dumps(dict(e.payload), default=str)[:160]}"
            )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    since = time.time() - args.since_hours * 3600 if args.since_hours else None
    if args.api:
        print(json.dumps(_client(args).report(args.agent or None, since=since), indent=2))
        return 0
    from vcm.eval.report import build_report, render
    from vcm.workers.wiring import build_service

    # Reads only: no worker needed. Embedded mode keeps hot state in this process, so a separate
    # `vcm report` sees no agents there; `vcm demo` prints the report of its own run.
    service = build_service(get_settings())
    report = build_report(service, args.agent or None, since=since)
    print(json.dumps(report.as_dict(), indent=2) if args.json else render(report))
    return 0 if not report.unreachable else 1


def event_json(e: Any) -> dict[str, Any]:
    return {
        "event_id": e.event_id,
        "agent_id": e.agent_id,
        "kind": e.kind,
        "created_at": e.created_at,
        "actor": e.actor,
        "idempotency_key": e.idempotency_key,
        "payload": dict(e.payload),
    }


def cmd_reembed(args: argparse.Namespace) -> int:
    """Embed stored messages that lack a vector of the configured model's version (after a model
    change, or embeddings that failed), here in this process; workers take the same job as the
    task ``tasks.reembed_messages`` (ingest queue)."""
    with _service(args) as service:
        agents = args.agent or service.agents()
        if not agents:
            print("no agents known; name them with --agent", file=sys.stderr)
            return 1
        for agent_id in agents:
            print(json.dumps(service.reembed(agent_id, page=args.page).as_dict()))
    return 0


def add_commands(sub: Any) -> None:
    def api_opts(p: argparse.ArgumentParser) -> None:
        p.add_argument("--api", default=os.environ.get("VCM_API_URL"), help="talk to a running `vcm serve` at this URL")
        p.add_argument("--token", help="bearer token for --api (or VCM_TOKEN)")

    from vcm.cli.agents import add_agent_commands
    from vcm.cli.appending import add_append_command
    from vcm.cli.chat import add_chat_command
    from vcm.cli.instances import add_instances_command
    from vcm.cli.maintenance import add_maintenance_command
    from vcm.cli.portable import add_portable_commands
    from vcm.cli.principals import add_principal_commands

    add_agent_commands(sub, api_opts)
    add_append_command(sub, api_opts)
    add_chat_command(sub, api_opts)
    add_instances_command(sub, api_opts)
    add_maintenance_command(sub, api_opts)
    add_portable_commands(sub, api_opts)
    add_principal_commands(sub, api_opts)

    p = sub.add_parser("serve", help="run the HTTP API (with the in-process worker in embedded mode)")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "mcp",
        help="serve the memory tools and an agent's memory over MCP (stdio or streamable HTTP)",
        description="Model Context Protocol server: vcm's memory tools (the same executor as the HTTP "
        "API's tool route) and the agent's context, blocks and facts as resources, one agent per session. "
        "stdio serves the agent of --token (or VCM_TOKEN; the admin token with --agent); HTTP serves each "
        "request's 'Authorization: Bearer <agent token>'.",
    )
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--token", help="stdio: the agent's bearer token, or the admin token with --agent (or VCM_TOKEN)")
    p.add_argument("--agent", help="stdio: the agent to serve (needed with the admin token)")
    p.add_argument("--host", help="http: address to listen on (default [api] host)")
    p.add_argument("--port", type=int, default=8081, help="http: port (default 8081)")
    p.add_argument("--path", default="/mcp", help="http: the endpoint's path (default /mcp)")
    p.set_defaults(func=cmd_mcp)

    p = sub.add_parser("worker", help="run a Celery worker for the cold path")
    p.add_argument("-Q", "--queues", default="hot,cold,ingest,maintenance")
    p.add_argument("--concurrency", type=int)
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser(
        "ingest",
        help="ingest files and folders into an agent's archival memory",
        description="Reads the named files and folders with the rights of the user running it (regular "
        "files only; hidden entries and linked folders are skipped when walking a folder). With --root, "
        "every file's real path must lie under that folder, so links cannot lead outside it.",
    )
    p.add_argument("--agent", required=True)
    p.add_argument("--root", type=Path, help="refuse files whose real path is outside this folder")
    p.add_argument(
        "--naive",
        action="store_true",
        help="per-chunk embedding: refused unless [ingest] allow_naive, then recorded as a compliance violation",
    )
    p.add_argument("paths", nargs="+")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("search", help="search an agent's recall (default) or archival memory")
    p.add_argument("--agent", required=True)
    p.add_argument("--archival", action="store_true")
    p.add_argument("--mode", default="hybrid", choices=["text", "vector", "hybrid"], help="recall search mode")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("query")
    api_opts(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("context", help="show an agent's main context with its token gauges")
    p.add_argument("--agent", required=True)
    p.add_argument("--json", action="store_true")
    p.add_argument("--built", action="store_true", help="the prompt the model sees: with the builder's layers")
    p.add_argument(
        "--query", help="with --built: retrieve relevant memory for this text (default: the last user message)"
    )
    api_opts(p)
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("events", help="show memory events (audit log), of one agent or all")
    p.add_argument("--agent")
    p.add_argument("--kind", action="append")
    p.add_argument("--actor", help="only this actor, e.g. api:agent:a1, cli, worker:spool")
    p.add_argument("--since", type=parse_when, help="unix seconds, ISO 8601, or an age (15m, 2h, 7d)")
    p.add_argument("--until", type=parse_when, help="exclusive; same forms as --since")
    p.add_argument("--key", help="only events of this idempotency key")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--limit", type=int, default=50)
    api_opts(p)
    p.set_defaults(func=cmd_events)

    p = sub.add_parser("report", help="the Conveyance figure per agent and overall (see docs/operations.md)")
    p.add_argument("--agent", action="append", help="only these agents (repeat); default all")
    p.add_argument("--since-hours", type=float, help="only events of the last H hours")
    p.add_argument("--json", action="store_true")
    api_opts(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("reembed", help="embed stored messages lacking a vector of the current model (after a change)")
    p.add_argument("--agent", action="append", help="only these agents (repeat); default: every agent in Redis")
    p.add_argument("--page", type=int, default=200, help="messages read per store query")
    p.set_defaults(func=cmd_reembed)

    doctor.add_command(sub)
