"""``vcm agents`` and ``vcm snapshots``: create, list, delete and reset agents, and manage their
snapshots, against a running server (``--api``) or, in embedded mode, the data directory
itself (the store is the source of truth; no server needs to run)."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vcm.errors import ValidationError
from vcm.service import MemoryService
from vcm.settings import get_settings


@contextmanager
def _local() -> Iterator[MemoryService]:
    # No worker: these commands only read and write the store and the (rebuilt) hot state.
    from vcm.workers.wiring import build_service

    service = build_service(get_settings())
    try:
        yield service
    finally:
        service.store.close()


def _remote(args: argparse.Namespace) -> Any:
    from vcm.client import VcmClient

    token = args.token or os.environ.get("VCM_TOKEN", "")
    if not token:
        raise ValidationError("--api needs a token: --token or VCM_TOKEN", field="token")
    return VcmClient(args.api, token)


def _print(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _snapshot_json(s: Any) -> dict[str, Any]:
    return {
        "snapshot_id": s.snapshot_id,
        "kind": s.kind,
        "reason": s.reason,
        "size": s.size,
        "sha256": s.sha256,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s.created_at)),
        "expires_at": None if s.expires_at is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s.expires_at)),
    }


def cmd_agents(args: argparse.Namespace) -> int:
    if args.api:
        client = _remote(args)
        calls: dict[str, Callable[[], Any]] = {
            "list": client.agents,
            "create": lambda: client.create_agent(args.agent, model=args.model, system_prompt=args.system),
            "delete": lambda: client.delete_agent(args.agent),
            "reset": lambda: client.reset(args.agent),
        }
        _print(calls[args.action]())
        return 0
    with _local() as service:
        if args.action == "list":
            _print({"agents": service.agents()})
        elif args.action == "create":
            from vcm.api.auth import TokenAuthority

            info = service.create_agent(args.agent, model=args.model, system_prompt=args.system, actor="cli")
            # The token `vcm serve` will accept for this agent (its hash is kept in the store).
            authority = TokenAuthority(service.redis, "", on_change=service.durable.token_changed)
            token = authority.issue(args.agent, replace=False)
            _print({"agent_id": info.agent_id, "model": info.model, "window": info.window, "token": token})
        elif args.action == "delete":
            _print({"agent_id": args.agent, "removed": service.delete_agent(args.agent, actor="cli")})
        else:
            _print(service.reset(args.agent, actor="cli"))
    return 0


def cmd_snapshots(args: argparse.Namespace) -> int:
    if args.api:
        client = _remote(args)
        calls: dict[str, Callable[[], Any]] = {
            "list": lambda: client.snapshots(args.agent),
            "create": lambda: client.create_snapshot(args.agent, kind=args.kind, reason=args.reason),
            "restore": lambda: client.restore_snapshot(args.agent, _need_id(args)),
            "delete": lambda: client.delete_snapshot(args.agent, _need_id(args)),
        }
        _print(calls[args.action]())
        return 0
    with _local() as service:
        if args.action == "list":
            _print({"snapshots": [_snapshot_json(s) for s in service.list_snapshots(args.agent)]})
        elif args.action == "create":
            _print(_snapshot_json(service.create_snapshot(args.agent, kind=args.kind, reason=args.reason, actor="cli")))
        elif args.action == "restore":
            _print(service.restore_snapshot(args.agent, _need_id(args), actor="cli"))
        else:
            _print({"deleted": service.delete_snapshot(args.agent, _need_id(args), actor="cli")})
    return 0


def _need_id(args: argparse.Namespace) -> str:
    if not args.snapshot_id:
        raise ValidationError(f"`vcm snapshots {args.action}` needs a snapshot id", field="snapshot_id")
    return str(args.snapshot_id)


def add_agent_commands(sub: Any, api_opts: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("agents", help="list, create, delete or reset agents")
    p.add_argument("action", choices=["list", "create", "delete", "reset"])
    p.add_argument("agent", nargs="?", help="the agent id (all actions but list)")
    p.add_argument("--model", help="model name from [models] (create)")
    p.add_argument("--system", default="", help="system prompt (create)")
    api_opts(p)
    p.set_defaults(func=_with_agent(cmd_agents))

    p = sub.add_parser("snapshots", help="create, list, restore or delete an agent's snapshots")
    p.add_argument("action", choices=["list", "create", "restore", "delete"])
    p.add_argument("snapshot_id", nargs="?")
    p.add_argument("--agent", required=True)
    p.add_argument("--reason", default="", help="why (create)")
    p.add_argument("--kind", default="manual", choices=["manual", "pre_upgrade"], help="(create)")
    api_opts(p)
    p.set_defaults(func=cmd_snapshots)


def _with_agent(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        if args.action != "list" and not args.agent:
            raise ValidationError(f"`vcm agents {args.action}` needs an agent id", field="agent")
        return command(args)

    return run
