"""An agent's budget configuration: the window, thresholds and caps its Lua scripts enforce,
worked out and validated once, for its creation and for a rebuild from the store alike; and the
counters a rebuild restores."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vcm import validation
from vcm.errors import ConfigError, TokenBudgetExceeded, ValidationError
from vcm.hotpath import render
from vcm.hotpath.budget import Budget
from vcm.hotpath.codec import fingerprint, num
from vcm.hotpath.tokens import TokenCounter
from vcm.settings import Settings
from vcm.types import AgentImage, AgentInfo, Block, Message


@dataclass(frozen=True)
class Creation:
    config: dict[str, Any]
    fingerprint: str
    prompt: str
    tools: list[dict[str, Any]]
    info: AgentInfo


def creation_of(
    settings: Settings,
    counter_of: Callable[[str], TokenCounter],
    agent_id: str,
    model: str | None,
    system_prompt: str,
    tools: Sequence[Mapping[str, Any]],
) -> Creation:
    """An agent's budget configuration, validated (shared by creation and rebuild)."""
    validation.agent_id(agent_id)
    model = model or settings.default_model
    try:
        window = settings.window_for(model)
    except ConfigError as exc:
        raise ValidationError(exc.message, field="model") from None
    prompt = validation.text(system_prompt, "system_prompt", settings.budget.max_content_chars, allow_empty=True)
    tool_list = [dict(t) for t in tools]
    counter = counter_of(model)
    system = counter.message(prompt) + counter.tools(tool_list) + counter.reply_priming
    budget = Budget.for_window(window, settings.budget)
    ph_base = counter.message(render.placeholder(0)) - 1
    fixed = system + budget.pinned_cap + budget.summary_cap + ph_base + 4
    if fixed > budget.max_tokens:
        raise TokenBudgetExceeded(
            f"the system prompt and tools take {system} tokens; with the pinned and summary "
            f"caps that leaves no room in a {window}-token window",
            required_headroom=fixed - budget.max_tokens,
            max_tokens=budget.max_tokens,
        )
    config = {
        "window": budget.window,
        "max": budget.max_tokens,
        "warn": budget.warning_at,
        "flush": budget.flush_at,
        "target": budget.target,
        "pin_cap": budget.pinned_cap,
        "sum_cap": budget.summary_cap,
        "ph_base": ph_base,
        "pressure_tokens": counter.message(render.PRESSURE_TEXT),
        "system": system,
        "model": model,
    }
    fp = fingerprint({"config": config, "prompt": prompt, "tools": tool_list})
    info = AgentInfo(agent_id, model, budget.window, budget.max_tokens, system)
    return Creation(config, fp, prompt, tool_list, info)


def restored_counters(
    creation: Creation, image: AgentImage, now: float
) -> tuple[list[Message], list[Block], dict[str, Any], dict[str, Any]]:
    """What a rebuild writes back (:meth:`vcm.hotpath.state.HotState.restore`): the FIFO oldest
    first, the blocks, the agent's counters recomputed from them, and the summary record. The
    sequences start at ``image.id_floor``: ids below it may have been handed out before the hot
    state was lost."""
    fifo = sorted(image.fifo, key=lambda m: m.seq)
    blocks = list(image.blocks)
    meta: dict[str, Any] = {
        **creation.config,
        "config_fp": creation.fingerprint,
        "incarnation": image.incarnation,
        "working": sum(b.tokens for b in blocks),
        "pinned_blocks": sum(b.tokens for b in blocks if b.pinned),
        "fifo": sum(m.tokens for m in fifo),
        "pinned_fifo": sum(m.tokens for m in fifo if m.pinned),
        "summary": image.summary_tokens if image.summary_text else 0,
        "ph": 0,
        "ph_count": 0,
        "msg_seq": image.id_floor,
        "batch_seq": image.id_floor,
        "finished_batch": image.id_floor,
        "rev_seq": max([image.id_floor, *(int(b.rev) for b in blocks if b.rev.isdigit())]),
        # Every append the store holds, not only those still in the FIFO: a restart goes on counting.
        "appended": max(image.appended, len(fifo)),
        # The stored appends no longer in the FIFO left it for recall (committed evictions; a reset
        # sends the whole FIFO there too); a begun batch that never committed is back in the FIFO.
        "evicted": max(image.appended, len(fifo)) - len(fifo),
    }
    total = int(creation.config["system"]) + meta["working"] + meta["summary"] + meta["fifo"]
    # Warned already if over the line: the context it restores carried its notice.
    meta["warned"] = int(total >= int(creation.config["warn"]))
    summary = (
        {
            "text": image.summary_text,
            "tokens": image.summary_tokens,
            "rev": image.summary_batch,
            "batch_id": image.summary_batch,
            "updated_at": num(now),
        }
        if image.summary_text
        else {}
    )
    return fifo, blocks, meta, summary
