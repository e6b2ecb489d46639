"""``vcm users``, ``vcm domains`` and ``vcm principals``: the users and domains whose memory their
agents share, and the ones an agent belongs to — against a running server (``--api``, the admin
token) or, in embedded mode, the data directory itself."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from vcm.cli.agents import _local, _print, _remote
from vcm.errors import ValidationError
from vcm.store.audit_names import Actor
from vcm.store.principals import Principal


def _json(p: Principal) -> dict[str, Any]:
    return {"kind": p.kind, "name": p.name, "created_at": p.created_at}


def _need_name(args: argparse.Namespace) -> str:
    if not args.name:
        raise ValidationError(f"`vcm {args.kind}s {args.action}` needs a name", field="name")
    return str(args.name)


def cmd_principals_of(kind: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        args.kind = kind
        if args.api:
            client = _remote(args)
            calls: dict[str, Callable[[], Any]] = {
                "list": client.users if kind == "user" else client.domains,
                "create": lambda: (client.create_user if kind == "user" else client.create_domain)(_need_name(args)),
                "delete": lambda: (client.delete_user if kind == "user" else client.delete_domain)(_need_name(args)),
            }
            _print(calls[args.action]())
            return 0
        with _local() as service:
            if args.action == "list":
                _print({"principals": [_json(p) for p in service.list_principals(kind)]})
            elif args.action == "create":
                _print(_json(service.create_principal(kind, _need_name(args), actor=Actor.CLI)))
            else:
                removed = service.delete_principal(kind, _need_name(args), actor=Actor.CLI)
                _print({"kind": kind, "name": args.name, "removed": removed})
        return 0

    return run


def cmd_agent_principals(args: argparse.Namespace) -> int:
    """Without --user/--domain/--none: show them; with any: set both (the one not given: none)."""
    setting = args.user is not None or args.domain is not None or args.none
    if args.api:
        client = _remote(args)
        if setting:
            _print(client.set_agent_principals(args.agent, user_id=args.user, domain=args.domain))
        else:
            _print(client.agent_principals(args.agent))
        return 0
    with _local() as service:
        if setting:
            record = service.set_agent_principals(args.agent, user_id=args.user, domain=args.domain, actor=Actor.CLI)
            _print({"agent_id": args.agent, "user_id": record.user_id, "domain": record.domain})
        else:
            _print({"agent_id": args.agent, **service.agent_principals(args.agent)})
    return 0


def add_principal_commands(sub: Any, api_opts: Callable[[argparse.ArgumentParser], None]) -> None:
    for kind in ("user", "domain"):
        p = sub.add_parser(f"{kind}s", help=f"list, create or delete {kind}s (their agents share their memory)")
        p.add_argument("action", choices=["list", "create", "delete"])
        p.add_argument("name", nargs="?", help=f"the {kind}'s {'id' if kind == 'user' else 'name'} (create, delete)")
        api_opts(p)
        p.set_defaults(func=cmd_principals_of(kind))

    p = sub.add_parser("principals", help="show or set the user and domain an agent belongs to")
    p.add_argument("agent")
    p.add_argument("--user", help="its user (set)")
    p.add_argument("--domain", help="its domain (set)")
    p.add_argument("--none", action="store_true", help="set: belong to neither (or to only the one given)")
    api_opts(p)
    p.set_defaults(func=cmd_agent_principals)
