"""The main job: replay a long conversation through vcm and measure what recall gives back.

Runs on whatever service it is handed (the CLI hands it an embedded one with its cold path
running in-process): every turn goes through the hot path with a small window, so the context
is evicted many times; evictions are committed by the workers; then each of the conversation's
questions is asked through ``search_recall`` and the share of evidence turns found in the top
10 is reported.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from vcm.eval.conversation import Conversation, Turn, session_time
from vcm.obs import audit
from vcm.service import BuiltContext, MemoryService

Printer = Callable[[str], None]
RecallAtK = Callable[[Sequence[str], Sequence[frozenset[str]], int], float]


@dataclass
class DemoReport:
    agent_id: str
    turns: int = 0
    appended: list[str] = field(default_factory=list)
    warnings: int = 0
    evictions: int = 0
    summary_versions: int = 0
    recall_at_10: float = 0.0
    questions: int = 0
    accounting: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _excerpt(text: str, width: int = 110) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def run(
    service: MemoryService,
    conv: Conversation,
    *,
    model: str,
    recall_at_k: RecallAtK,
    out: Printer = print,
    limit: int | None = None,
    settle_timeout_s: float = 300.0,
    agent_id: str | None = None,
    pace: bool = True,
) -> DemoReport:
    start = time.monotonic()
    a, b = conv.speakers
    agent_id = agent_id or f"demo-{conv.sample_id}-{int(time.time())}"
    info = service.create_agent(
        agent_id,
        model=model,
        system_prompt=f"You are {b}'s assistant in a long conversation with {a}.",
        actor=audit.CLI,
    )
    report = DemoReport(agent_id)
    warm = getattr(service.embed, "warm", None)
    if callable(warm):
        out("loading the embedding model (used by the summariser and drift check) ...")
        warm()
    turns = conv.turns[:limit] if limit else conv.turns
    report.turns = len(turns)
    last_rev = 0
    out(f"replaying {len(turns)} turns into a {info.window}-token window ({model}); agent {agent_id}")
    for i, turn in enumerate(turns, 1):
        res = service.append(
            agent_id,
            "user" if turn.speaker == a else "assistant",
            turn.text,
            name=turn.name,  # who said it: the summary's lines and recall's author anchoring read it
            created_at=said_at(turn, i),  # when: the prompt's date markers and the summary's dates
            metadata={"dia_id": turn.dia_id, "session": turn.session, "date_time": turn.date_time},
            idempotency_key=f"{conv.sample_id}:{turn.dia_id}",
            actor=audit.CLI,
        )
        report.appended.append(res.message_id)
        if res.pressure_message_id:
            report.appended.append(res.pressure_message_id)
        tag = f"[{i:>4}/{len(turns)}]"
        if res.action == "warning":
            report.warnings += 1
            out(f"{tag} warning   context at {res.total / info.window:.0%}: memory-pressure notice injected")
        elif res.batch is not None:
            report.evictions += 1
            out(
                f"{tag} eviction  batch {res.batch.id}: {res.batch.count} messages ({res.batch.tokens} tokens) "
                f"move to recall; context now {res.total / info.window:.0%}"
            )
            if pace:
                # Let the cold path commit this batch before going on, so the summary's evolution shows.
                wait_for(partial(_committed, service, agent_id, res.batch.id), 60.0)
        text, tokens, rev, batch_id = service.hot.summary(agent_id)
        if rev != last_rev:
            last_rev = rev
            report.summary_versions += 1
            out(f"{tag} summary   v{rev} after batch {batch_id} ({tokens} tokens): {_excerpt(text)}")
        if i % 50 == 0:
            out(f"{tag} progress  {i} turns appended")
    out("waiting for the cold path to commit every eviction and spool every message ...")
    _settle(service, agent_id, len(report.appended), settle_timeout_s)
    report.accounting = account(service, agent_id, report.appended)
    out(f"accounting: {report.accounting}")
    scores = []
    for q in conv.questions:
        hits = service.search_recall(agent_id, q.question, limit=10).page.items
        ranked = [frozenset({str(h.message.metadata.get("dia_id", ""))}) for h in hits]
        scores.append(recall_at_k(q.evidence, ranked, 10))
    report.questions = len(scores)
    report.recall_at_10 = sum(scores) / len(scores) if scores else 1.0
    report.seconds = time.monotonic() - start
    return report


def prompt_view(built: BuiltContext, *, lines: int = 4, width: int = 110) -> list[str]:
    """The prompt the model would see, one line a layer (its tokens, messages and first words),
    and the first ``lines`` lines of relevant memory: what ``vcm context --built`` shows whole."""
    out = [f'the prompt the model sees for "{_excerpt(built.query, 80)}" ({built.total} tokens):']
    order: list[str] = []
    for layer in built.layers:
        if layer not in order:
            order.append(layer)
    tokens = built.layer_tokens()
    for layer in order:
        held = [m for m, name in zip(built.messages, built.layers, strict=True) if name == layer]
        head = f"  {layer:<9}{tokens.get(layer, 0):>6} tokens"
        if layer == "memory":  # its lines, the best first
            shown = [line for m in held for line in str(m.get("content", "")).splitlines() if line.startswith("- [")]
            out.append(f"{head}, {len(shown)} lines:")
            out += [f"      {_excerpt(line, width)}" for line in shown[:lines]]
            continue
        count = f", {len(held)} messages" if len(held) > 1 else ""
        out.append(f"{head}{count}: {_excerpt(_gist(str(held[0].get('content', ''))), width)}")
    return out


def _gist(content: str) -> str:
    """A layer's first words past its header (``[vcm] ...:``) and its opening tag (``<summary>``)."""
    lines = [line for line in content.splitlines() if line.strip()]
    body = [line for line in lines if not line.startswith("[vcm] ") and not re.fullmatch(r"<\w+>", line.strip())]
    return " ".join((body or lines or [""])[0].split())


def said_at(turn: Turn, index: int) -> float | None:
    """When a turn was said: its session's start (LoCoMo dates sessions, not turns) plus a second
    per turn of the conversation, so times keep the turns' order; None when the session has no
    readable date (the append is then dated now)."""
    start = session_time(turn.date_time)
    return None if start is None else start + index


def _committed(service: MemoryService, agent_id: str, batch_id: int) -> bool:
    return batch_id not in service.hot.pending_batches(agent_id)


def wait_for(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.05)
    return False


def _settle(service: MemoryService, agent_id: str, appended: int, timeout_s: float) -> None:
    wait_for(
        lambda: not service.hot.pending_batches(agent_id) and service.store.count_messages(agent_id) >= appended,
        timeout_s,
    )


def account(service: MemoryService, agent_id: str, appended: Sequence[str]) -> dict[str, int]:
    """Where every appended message is: in the FIFO, or committed to recall by an eviction."""
    fifo = {m.id for m in service.hot.snapshot(agent_id).fifo}
    pending = {i for ids in service.hot.batch_message_ids(agent_id).values() for i in ids}
    stored = {m.message_id for m in service.store.get_messages(agent_id, list(appended))}
    committed = stored - fifo - pending
    everyone = set(appended)
    return {
        "appended": len(everyone),
        "in_fifo": len(everyone & fifo),
        "committed_to_recall": len(everyone & committed),
        "pending_eviction": len(everyone & pending),
        "spooled_to_store": len(everyone & stored),
        "unaccounted": len(everyone - fifo - committed - pending),
        "batches_committed": len(service.store.committed_batches(agent_id)),
    }
