"""Assembly of the exact message list an LLM call receives, and its token gauges. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vcm.hotpath import render
from vcm.hotpath.state import Snapshot
from vcm.types import Gauges


@dataclass(frozen=True)
class AssembledContext:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    gauges: Gauges
    # Token count of each message in `messages`, as stored when its part was written.
    message_tokens: list[int]
    # The layer of each message in `messages`: system, working, summary, placeholder or fifo.
    layers: list[str]

    def layer_tokens(self) -> dict[str, int]:
        return layer_tokens(self.layers, self.message_tokens)


def layer_tokens(layers: Sequence[str], tokens: Sequence[int]) -> dict[str, int]:
    """Tokens per layer, in the order the layers first appear."""
    out: dict[str, int] = {}
    for name, n in zip(layers, tokens, strict=True):
        out[name] = out.get(name, 0) + n
    return out


def assemble(snap: Snapshot) -> AssembledContext:
    """Order: system (+ tools), working blocks, recursive summary, placeholder, FIFO.

    All pending eviction batches share one placeholder naming their total message count."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": snap.system_prompt}]
    # The system part's stored count also covers the tool schemas and reply priming.
    per_message: list[int] = [snap.counter("system")]
    layers = ["system"]
    for block in snap.blocks:
        messages.append({"role": "system", "content": render.block(block.id, block.role, block.content, block.pinned)})
        per_message.append(block.tokens)
        layers.append("working")
    if snap.summary_text or snap.summary_tokens:
        messages.append({"role": "system", "content": render.summary(snap.summary_text)})
        per_message.append(snap.summary_tokens)
        layers.append("summary")
    if snap.placeholder is not None:
        count, tokens = snap.placeholder
        messages.append({"role": "system", "content": render.placeholder(count)})
        per_message.append(tokens)
        layers.append("placeholder")
    for msg in snap.fifo:
        messages.append(msg.chat())
        per_message.append(msg.tokens)
        layers.append("fifo")
    gauges = Gauges(
        window=snap.counter("window"),
        max_tokens=snap.counter("max"),
        system=snap.counter("system"),
        working=snap.counter("working"),
        summary=snap.counter("summary"),
        placeholders=snap.counter("ph"),
        fifo=snap.counter("fifo"),
        pinned=snap.counter("pinned_blocks") + snap.counter("pinned_fifo"),
    )
    return AssembledContext(messages, list(snap.tools), gauges, per_message, layers)
