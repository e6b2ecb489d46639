"""Replay a conversation through the hot path and report what the memory manager did.

This is the hot path's own end-to-end run: every turn is appended through the Lua scripts with
a small window, so warnings and flushes happen many times. Who commits eviction batches is the
caller's choice (``on_batch``): the cold path's workers, or, for a hot-path-only run, a direct
finish with an interim summary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hotpath.context import assemble
from hotpath.conversation import Conversation
from hotpath.state import HotState
from hotpath.types import AppendResult, BatchInfo

Printer = Callable[[str], None]


@dataclass
class ReplayReport:
    agent_id: str
    appended: int = 0
    warnings: int = 0
    flushes: int = 0
    batches: list[int] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)
    max_occupancy: float = 0.0


def replay(
    hot: HotState,
    conv: Conversation,
    *,
    agent_id: str,
    model: str,
    on_batch: Callable[[str, BatchInfo], None],
    on_append: Callable[[str, AppendResult], None] | None = None,
    out: Printer = print,
    limit: int | None = None,
) -> ReplayReport:
    a, b = conv.speakers
    hot.create_agent(
        agent_id,
        model=model,
        system_prompt=f"You are {b}'s memory-augmented assistant in a long conversation with {a}.",
    )
    report = ReplayReport(agent_id)
    window = hot.agent(agent_id).window
    turns = conv.turns[:limit] if limit else conv.turns
    for i, turn in enumerate(turns, 1):
        role = "user" if turn.speaker == a else "assistant"
        res = hot.append(
            agent_id,
            role,
            turn.content,
            metadata={"dia_id": turn.dia_id, "session": turn.session, "date_time": turn.date_time},
            idempotency_key=f"{conv.sample_id}:{turn.dia_id}",
        )
        report.appended += 1
        report.message_ids.append(res.message_id)
        if res.pressure_message_id:
            report.appended += 1
            report.message_ids.append(res.pressure_message_id)
        report.max_occupancy = max(report.max_occupancy, res.total / window)
        if on_append is not None:
            on_append(agent_id, res)
        if res.action == "warning":
            report.warnings += 1
            out(f"  [{i:>4}/{len(turns)}] warning  occupancy {res.total / window:5.1%}: memory-pressure message injected")
        elif res.action == "flush" and res.batch is not None:
            report.flushes += 1
            report.batches.append(res.batch.id)
            out(
                f"  [{i:>4}/{len(turns)}] flush    batch {res.batch.id}: {res.batch.count} messages "
                f"({res.batch.tokens} tokens) leave the window; occupancy now {res.total / window:5.1%}"
            )
            on_batch(agent_id, res.batch)
    return report


def account(hot: HotState, agent_id: str, report: ReplayReport, committed: set[str]) -> dict[str, int]:
    """Where every appended message is now: FIFO, a pending batch, or committed to recall."""
    ctx = assemble(hot.snapshot(agent_id))
    in_fifo = {msg.id for msg in hot.snapshot(agent_id).fifo}
    pending = {i for ids in hot.batch_message_ids(agent_id).values() for i in ids}
    appended = set(report.message_ids)
    return {
        "appended": len(appended),
        "in_fifo": len(in_fifo & appended),
        "pending_eviction": len(pending & appended),
        "committed_to_recall": len(committed & appended),
        "unaccounted": len(appended - in_fifo - pending - committed),
        "context_tokens": ctx.gauges.total,
    }
