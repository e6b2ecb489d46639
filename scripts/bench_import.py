#!/usr/bin/env python3
"""Importing a conversation over HTTP (not a test): one ``POST .../messages`` per message against
``POST .../messages/batch`` lists of several sizes, each message dated (``created_at``).

    .venv/bin/python scripts/bench_import.py [--messages 2000] [--batches 1,100,1000] [--json out.json]

Starts a real ``vcm serve`` in embedded mode (no services: in-process fakeredis and cold path, a
SQLite store in a temporary directory) and imports the same dated messages into a fresh agent
per variant with one keep-alive httpx client (the Python client's transport), oldest first, each
call keyed as an importer would key it. ``gpt-4o`` agents (128k window), so the import itself is
measured and the evictions it would start at a smaller window are not. Batch size 1 is one
``POST .../messages`` per message. Prints messages per second per variant with the load average;
``--json`` writes every figure.
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from vcm.eval.bench import add_json_flag, write_json
from vcm.eval.serving import vcm_serve

ROOT = Path(__file__).resolve().parent.parent
ADMIN_TOKEN = "bench-admin-" + secrets.token_urlsafe(24)
MODEL = "gpt-4o"
START = 1_683_547_200.0  # Mon 8 May 2023, noon UTC
LINES = [
    "I finally booked the flights for the conference in Lisbon.",
    "How long is the talk going to be?",
    "Twenty minutes, then questions. I am rehearsing every evening.",
    "We adopted a greyhound called Pepper last weekend.",
    "The roadworks near the station made my commute twice as long.",
    "Did you try the bakery on Harbour Way?",
]


def conversation(n: int) -> list[dict[str, Any]]:
    """``n`` dated messages, two speakers, a day between every 40."""
    out = []
    for i in range(n):
        at = START + (i // 40) * 86_400.0 + (i % 40) * 30.0
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": f"{LINES[i % len(LINES)]} ({i})", "name": "Ann" if i % 2 == 0 else "Bo",
                    "created_at": at})  # fmt: skip
    return out


def import_with(
    client: httpx.Client, url: str, agent: str, token: str, messages: list[dict[str, Any]], size: int
) -> float:
    """Seconds to import ``messages`` in calls of ``size`` (1: one ``POST .../messages`` each)."""
    auth = {"Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    for start in range(0, len(messages), size):
        part = messages[start : start + size]
        if size == 1:
            r = client.post(f"{url}/v1/agents/{agent}/messages", json=part[0],
                            headers={**auth, "Idempotency-Key": f"import:{start}"})  # fmt: skip
        else:
            r = client.post(f"{url}/v1/agents/{agent}/messages/batch", json={"messages": part},
                            headers={**auth, "Idempotency-Key": f"import:{start}"})  # fmt: skip
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {r.text[:500]}")
    return time.perf_counter() - started


def measure(url: str, n: int, size: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant: a fresh agent, ``messages`` imported in calls of ``size``, then read back."""
    with httpx.Client(timeout=120) as client:
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        made = client.post(f"{url}/v1/agents", json={"agent_id": f"import-{n}", "model": MODEL}, headers=admin)
        made.raise_for_status()
        token = made.json()["token"]
        seconds = import_with(client, url, f"import-{n}", token, messages, size)
        ctx = client.get(f"{url}/v1/agents/import-{n}/context", headers={"Authorization": f"Bearer {token}"}).json()
    return {
        "messages_per_call": size, "calls": -(-len(messages) // size), "seconds": round(seconds, 3),
        "messages_per_s": round(len(messages) / seconds, 1), "in_context": len(ctx["messages"]) - 1,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--batches", default="1,100,1000", help="messages per call (1: one POST per message)")
    add_json_flag(parser)
    args = parser.parse_args()
    sizes = [int(s) for s in args.batches.split(",") if s]
    messages = conversation(args.messages)
    with tempfile.TemporaryDirectory(prefix="vcm-bench-import-") as tmp:
        work = Path(tmp)
        vcm = ROOT / ".venv" / "bin" / "vcm"
        embedded = {"VCM_REDIS_URL": "", "VCM_BROKER_URL": "memory://"}
        with vcm_serve(vcm, work, admin_token=ADMIN_TOKEN, env=embedded, log=work / "serve.log", cwd=work) as served:
            rows = [measure(served[1], n, size, messages) for n, size in enumerate(sizes)]
    print(f"import of {len(messages)} dated messages into a {MODEL} agent, embedded `vcm serve`, one httpx client")
    print(f"{'messages per call':>18}{'calls':>8}{'seconds':>10}{'messages/s':>12}{'load':>7}")
    for r in rows:
        print(f"{r['messages_per_call']:>18}{r['calls']:>8}{r['seconds']:>10}{r['messages_per_s']:>12}"
              f"{r['load_average_1m']:>7}")  # fmt: skip
    for r in rows:
        if r["in_context"] != len(messages):
            raise SystemExit(f"variant {r['messages_per_call']}: {r['in_context']} of {len(messages)} in the context")
    if args.json:
        write_json(args.json, {"messages": len(messages), "model": MODEL, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
