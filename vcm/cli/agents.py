"""``vcm agents``, ``vcm snapshots``, ``vcm facts`` and ``vcm state``: agents, their snapshots and
their structured memory, against a running server (``--api``) or, in embedded mode, the data
directory itself (the store is the source of truth; no server needs to run)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vcm import jsontext
from vcm.errors import ValidationError
from vcm.service import MemoryService
from vcm.settings import get_settings
from vcm.store.audit_names import Actor


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
            info = service.create_agent(args.agent, model=args.model, system_prompt=args.system, actor=Actor.CLI)
            # The token `vcm serve` will accept for this agent (its hash is kept in the store); none
            # when the agent has one already.
            token = service.issue_token(args.agent, replace=False)
            _print({"agent_id": info.agent_id, "model": info.model, "window": info.window, "token": token})
        elif args.action == "delete":
            _print({"agent_id": args.agent, "removed": service.delete_agent(args.agent, actor=Actor.CLI)})
        else:
            _print(service.reset(args.agent, actor=Actor.CLI))
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
            _print(
                _snapshot_json(service.create_snapshot(args.agent, kind=args.kind, reason=args.reason, actor=Actor.CLI))
            )
        elif args.action == "restore":
            _print(service.restore_snapshot(args.agent, _need_id(args), actor=Actor.CLI))
        else:
            _print({"deleted": service.delete_snapshot(args.agent, _need_id(args), actor=Actor.CLI)})
    return 0


def _fact_json(f: Any) -> dict[str, Any]:
    return {
        "fact_id": f.fact_id, "type": f.type, "key": f.key, "value": f.value, "status": f.status,
        "scope": f.scope, "tags": list(f.tags), "conflict_with": list(f.conflict_with),
        "evidence": [dict(e) for e in f.evidence], "expires_at": f.expires_at,
    }  # fmt: skip


def _settle(client: Any, args: argparse.Namespace) -> Any:
    return client.settle_fact(args.agent, _need_text(args), args.action)


def _one_type(args: argparse.Namespace) -> str:
    """The type a remembered fact gets: one ``--type`` (repeated, it filters list and search)."""
    types = args.type or ["learned"]
    if len(types) > 1:
        raise ValidationError("a fact has one type: give --type once to remember it", field="type")
    return str(types[0])


# What a person may do with a shadow fact (``vcm facts promote|merge|reject FACT_ID``).
SETTLE = ("promote", "merge", "reject")


def cmd_facts(args: argparse.Namespace) -> int:
    from vcm.store.types import FactQuery

    if args.api:
        client = _remote(args)
        calls: dict[str, Callable[[], Any]] = {
            "list": lambda: client.facts(args.agent, types=args.type, limit=args.limit),
            "search": lambda: client.search_facts(args.agent, _need_text(args), types=args.type, limit=args.limit),
            "remember": lambda: client.remember(
                args.agent, _need_text(args), type=_one_type(args), key=args.key, scope=args.scope
            ),
            "forget": lambda: client.forget_fact(args.agent, _need_text(args)),
            "stats": lambda: client.fact_stats(args.agent),
            "entity": lambda: client.entity_graph(args.agent, _need_text(args), depth=args.depth),
            **{a: functools.partial(_settle, client, args) for a in SETTLE},
        }
        _print(calls[args.action]())
        return 0
    with _local() as service:
        if args.action == "list":
            found = service.list_facts(args.agent, FactQuery(types=args.type or None, limit=args.limit))
            _print({"facts": [_fact_json(f) for f in found]})
        elif args.action == "search":
            hits = service.search_facts(
                args.agent, _need_text(args), filters=FactQuery(types=args.type or None, limit=args.limit)
            )
            _print({"hits": [{"score": round(h.score, 4), **_fact_json(h.fact)} for h in hits]})
        elif args.action == "remember":
            res = service.remember(
                args.agent, _need_text(args), type=_one_type(args), key=args.key, scope=args.scope,
                actor=Actor.CLI,
            )  # fmt: skip
            _print({"decision": res.decision, "fact": _fact_json(res.fact)})
        elif args.action == "forget":
            _print({"deleted": service.forget_fact(args.agent, _need_text(args), actor=Actor.CLI)})
        elif args.action in SETTLE:  # a person's word on a shadow fact
            settled = service.settle_fact(args.agent, _need_text(args), args.action, actor=Actor.CLI)
            _print({"action": args.action, "fact": None if settled is None else _fact_json(settled)})
        elif args.action == "entity":
            g = service.entity_graph(args.agent, _need_text(args), depth=args.depth)
            _print({
                "entity": _fact_json(g.entity), "neighbours": [_fact_json(f) for f in g.neighbours],
                "relations": [_fact_json(f) for f in g.relations], "mentioned_in": list(g.mentioned_in),
            })  # fmt: skip
        else:
            _print(service.fact_stats(args.agent))
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    if args.api:
        client = _remote(args)
        if args.action == "set":
            _print(client.set_state(args.agent, _need_key(args), _json_value(args.value), ttl_s=args.ttl))
        elif args.action == "delete":
            _print(client.delete_state(args.agent, _need_key(args)))
        else:
            _print(client.state(args.agent, args.key))
        return 0
    with _local() as service:
        if args.action == "set":
            e = service.set_state(args.agent, _need_key(args), _json_value(args.value), ttl_s=args.ttl, actor=Actor.CLI)
            _print({"key": e.key, "value": e.value, "_rev": e.rev, "expires_at": e.expires_at})
        elif args.action == "delete":
            _print({"deleted": service.delete_state(args.agent, _need_key(args), actor=Actor.CLI)})
        elif args.key:
            e = service.get_state(args.agent, args.key)
            _print({"key": e.key, "value": e.value, "_rev": e.rev, "expires_at": e.expires_at})
        else:
            _print({"state": [{"key": e.key, "value": e.value, "_rev": e.rev} for e in service.list_state(args.agent)]})
    return 0


def _json_value(text: str | None) -> Any:
    if text is None:
        raise ValidationError("`vcm state set` needs a value", field="value")
    try:
        return jsontext.loads(text)
    except ValueError:
        return text  # plain text is a string value


def _need_text(args: argparse.Namespace) -> str:
    if not args.text:
        raise ValidationError(f"`vcm facts {args.action}` needs a text (or a fact id)", field="text")
    return str(args.text)


def _need_key(args: argparse.Namespace) -> str:
    if not args.key:
        raise ValidationError(f"`vcm state {args.action}` needs a key", field="key")
    return str(args.key)


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

    p = sub.add_parser(
        "facts", help="an agent's facts: list, search, remember, forget, stats, entity; settle a shadow one"
    )
    p.add_argument(
        "action", choices=["list", "search", "remember", "forget", "stats", "entity", "promote", "merge", "reject"]
    )
    p.add_argument(
        "text", nargs="?",
        help="query (search), value (remember), fact id (forget, promote, merge, reject) or entity name (entity)",
    )  # fmt: skip
    p.add_argument("--agent", required=True)
    p.add_argument("--type", action="append", help="fact type (repeat to filter by several)")
    p.add_argument("--key", help="the fact's key (remember)")
    p.add_argument(
        "--scope", default="agent", choices=["agent", "user", "domain"],
        help="remember: the agent's own, or its user's or domain's (shared with their agents)",
    )  # fmt: skip
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--depth", type=int, default=1, help="relates_to hops around the entity (entity, 1-3)")
    api_opts(p)
    p.set_defaults(func=cmd_facts)

    p = sub.add_parser("state", help="an agent's working-memory keys: get, set, delete")
    p.add_argument("action", choices=["get", "set", "delete"])
    p.add_argument("key", nargs="?", help="the key (get without one lists every key)")
    p.add_argument("value", nargs="?", help="JSON value, or plain text (set)")
    p.add_argument("--agent", required=True)
    p.add_argument("--ttl", type=int, help="seconds until the key expires (set)")
    api_opts(p)
    p.set_defaults(func=cmd_state)


def _with_agent(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        if args.action != "list" and not args.agent:
            raise ValidationError(f"`vcm agents {args.action}` needs an agent id", field="agent")
        return command(args)

    return run
