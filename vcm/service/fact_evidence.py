"""Where a fact write comes from: its evidence pointers checked against what the agent holds,
and the provenance and policy state its decision event records (ids and names, never content)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vcm.errors import ValidationError
from vcm.service import fact_input
from vcm.service.core import Core
from vcm.settings import Settings


def check(core: Core, agent_id: str, pointers: Sequence[Mapping[str, Any]]) -> None:
    """Every pointer names something of this agent (VALIDATION_ERROR naming the first that
    does not): a message stored or still in the hot state; a tool call by the id of its
    result message, or by its ``tool_call_id`` while the result is in the hot state; a
    document ingested for the agent, the span within its text."""
    ids = list(dict.fromkeys(str(e["id"]) for e in pointers if e["kind"] in ("message", "tool_call")))
    found = {m.message_id for m in core.store.get_messages(agent_id, ids)} if ids else set()
    missing = [i for i in ids if i not in found]
    if missing:
        held = core.hot_call(agent_id, core.hot.get_messages, agent_id, missing)
        found |= {m.id for m in held}
    calls = [str(e["id"]) for e in pointers if e["kind"] == "tool_call" and str(e["id"]) not in found]
    if calls:
        fifo = core.hot_call(agent_id, core.hot.snapshot, agent_id).fifo
        found |= {m.tool_call_id for m in fifo if m.tool_call_id}
    for e in pointers:
        if e["kind"] == "document":
            chunks = core.store.get_archival(agent_id, str(e["id"]))
            span = e.get("span")
            end = max((c.char_end for c in chunks), default=-1)
            if chunks and (span is None or span[0] <= span[1] <= end):
                continue
        elif str(e["id"]) in found:
            continue
        raise ValidationError(
            f"evidence {e['kind']} {e['id']!r} names nothing agent {agent_id!r} holds"
            + (" (or its span is outside the document)" if e["kind"] == "document" else ""),
            field="evidence",
        )


def provenance(
    settings: Settings,
    actor: str,
    source: str | None,
    pointers: Sequence[Mapping[str, Any]],
    overridden: Sequence[str],
) -> dict[str, Any]:
    """What a decision event records of where a write came from and the policy it passed
    (ids and names only, never content)."""
    return {
        "provenance": {
            "entry_point": fact_input.entry_point(actor),
            "source": source if source is not None else (actor if not pointers else None),
            "message_ids": [str(e["id"]) for e in pointers if e["kind"] == "message"][:16],
            "tool_call_ids": [str(e["id"]) for e in pointers if e["kind"] == "tool_call"][:16],
            "document_ids": [str(e["id"]) for e in pointers if e["kind"] == "document"][:16],
        },
        "policy": {
            "guard": "overridden" if overridden else "passed",
            "overridden": list(overridden),
            "pii": list(settings.facts.pii),
            "operator": fact_input.operator(actor),
            "shadow_in_prompts": settings.facts.shadow_in_prompts,
        },
    }
