"""Test helpers: raw state dumps and the pure-policy view of a live agent."""

from __future__ import annotations

from typing import Any

import redis

from vcm.hotpath import keys
from vcm.hotpath.budget import Budget, FifoEntry, Parts, placeholder_part
from vcm.hotpath.state import HotState


def dump(client: redis.Redis, agent_id: str) -> dict[str, Any]:
    """Every key of the agent except idempotency records, by type, for before/after comparisons."""
    out: dict[str, Any] = {}
    for k in sorted(client.scan_iter(match=keys.prefix(agent_id).replace("{", "[{]").replace("}", "[}]") + "*")):
        if ":idem:" in k:
            continue
        kind = client.type(k)
        if kind == "hash":
            out[k] = client.hgetall(k)
        elif kind == "list":
            out[k] = client.lrange(k, 0, -1)
        elif kind == "zset":
            out[k] = client.zrange(k, 0, -1, withscores=True)
        elif kind == "string":
            out[k] = client.get(k)
        else:
            out[k] = kind
    return out


def policy_view(hot: HotState, agent_id: str) -> tuple[Parts, list[FifoEntry], Budget, dict[str, int]]:
    """The pure policy's inputs, read from the live hot state."""
    snap = hot.snapshot(agent_id)
    m = {k: int(v) for k, v in snap.meta.items() if k not in {"model", "config_fp", "incarnation"}}
    parts = Parts(
        system=m["system"],
        working=m["working"],
        pinned_blocks=m["pinned_blocks"],
        pinned_fifo=m["pinned_fifo"],
        summary=m["summary"],
        placeholders=m["ph"],
        fifo=m["fifo"],
        placeholder_count=m["ph_count"],
    )
    fifo = [FifoEntry(msg.id, msg.tokens, msg.pinned) for msg in snap.fifo]
    budget = Budget(
        window=m["window"],
        max_tokens=m["max"],
        warning_at=m["warn"],
        flush_at=m["flush"],
        target=m["target"],
        pinned_cap=m["pin_cap"],
        summary_cap=m["sum_cap"],
    )
    return parts, fifo, budget, m


def recount(hot: HotState, agent_id: str) -> dict[str, int]:
    """Recount every part from the stored items (not the counters)."""
    snap = hot.snapshot(agent_id)
    pending = sum(count for _, count, _ in snap.placeholders)
    return {
        "working": sum(b.tokens for b in snap.blocks),
        "pinned": sum(b.tokens for b in snap.blocks if b.pinned) + sum(m.tokens for m in snap.fifo if m.pinned),
        "summary": snap.summary_tokens,
        # One placeholder names every pending batch's messages.
        "ph": placeholder_part(snap.counter("ph_base"), pending),
        "ph_count": pending,
        "fifo": sum(m.tokens for m in snap.fifo),
    }
