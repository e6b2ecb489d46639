"""The Anthropic Messages wire format of the memory proxy (``POST /v1/messages``,
:mod:`vcm.api.routes.anthropic`): the client's messages as vcm keeps them, vcm's built context as
a Messages request, and the upstream's answer and stream as the client gets them. Pure.

In: a user message's ``tool_result`` blocks become tool messages (one per block, in order), its
other blocks one user message (its text; other blocks named by type); an assistant message's
text is its content and its ``tool_use`` blocks its tool calls. The history rule
(:mod:`vcm.api.proxy`) keys them as it keys OpenAI messages.

Out: the built context's leading system messages (system prompt, working blocks, summary and
the stable layers) are the request's ``system`` blocks, the last with ``cache_control``, so a
provider's prompt cache holds the stable prefix; a later system message (a layer placed before
the latest user message, a notice) becomes a text block of the user turn it precedes. A message
the client sent in this request goes out as the client's own blocks (server tool blocks,
thinking, images and block types vcm does not know pass through untouched, the client's
``cache_control`` marks taken off: vcm places the breakpoint); one it no longer sends is rebuilt
from memory (text, ``tool_use``, ``tool_result``). Consecutive turns of one role are merged, so
every ``tool_use`` is answered by the ``tool_result`` at the head of the next user turn.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vcm.api.proxy import fingerprint, text_of
from vcm.errors import ValidationError
from vcm.facts.capture import TagFilter, shown

CACHE = {"type": "ephemeral"}


def arguments(value: Any) -> str:
    """A ``tool_use`` input as tool-call arguments: one canonical JSON text for the same input."""
    return json.dumps(value if value is not None else {}, sort_keys=True, ensure_ascii=False)


def _uncached(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(
        isinstance(b, Mapping) and isinstance(b.get("type"), str) for b in content
    ):
        raise ValidationError("message content must be text or a list of typed blocks", field="messages")
    return [dict(b) for b in content]


def _named(blocks: Sequence[Mapping[str, Any]]) -> str:
    """The text of blocks, or their types when they hold none (an image is ``[image]``)."""
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    return text or " ".join(f"[{b.get('type')}]" for b in blocks)


@dataclass
class Converted:
    """A client's messages as vcm keeps them, with the client's own blocks for each."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # fingerprint -> blocks

    def add(self, message: dict[str, Any], blocks: list[dict[str, Any]]) -> None:
        self.messages.append(message)
        self.raw[fingerprint(message)] = [_uncached(b) for b in blocks]


def assistant_message(blocks: Sequence[Mapping[str, Any]], text: str | None = None) -> dict[str, Any]:
    """An assistant turn's blocks as vcm keeps them: its text (``text`` when given) and tool calls."""
    calls = [{"id": str(b.get("id")), "type": "function",
              "function": {"name": str(b.get("name")), "arguments": arguments(b.get("input"))}}
             for b in blocks if b.get("type") == "tool_use"]  # fmt: skip
    body = text if text is not None else "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    out: dict[str, Any] = {"role": "assistant", "content": body}
    if calls:
        out["tool_calls"] = calls
    return out


def _check(blocks: Sequence[Mapping[str, Any]], where: str) -> None:
    """The blocks vcm reads, in the shape the Messages API itself insists on: a block of the
    wrong shape would otherwise be kept as ``None`` ids, ``str()`` of objects or nothing at all."""
    for b in blocks:
        kind = b["type"]
        if kind == "text" and not isinstance(b.get("text"), str):
            raise ValidationError(f"{where}: a text block needs its text as a string", field=where)
        if kind == "tool_use" and not (
            _an_id(b.get("id")) and isinstance(b.get("name"), str) and isinstance(b.get("input", {}), Mapping)
        ):
            raise ValidationError(
                f"{where}: a tool_use block needs a string id, a name and an input object", field=where
            )
        if kind == "tool_result":
            if not _an_id(b.get("tool_use_id")):
                raise ValidationError(f"{where}: a tool_result block needs the tool_use_id it answers", field=where)
            if not isinstance(b.get("content"), str | list | None):
                raise ValidationError(f"{where}: a tool_result's content must be text or a list of blocks", field=where)


def _an_id(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def convert(messages: Sequence[Mapping[str, Any]]) -> Converted:
    """The client's Messages-API history as vcm keeps it (see the module)."""
    out = Converted()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("user", "assistant"):
            raise ValidationError(f"unknown message role {role!r}", field="messages")
        blocks = _blocks(m.get("content"))
        _check(blocks, f"messages.{i}")
        if role == "assistant":
            out.add(assistant_message(blocks), blocks)
            continue
        rest = []
        for b in blocks:
            if b.get("type") != "tool_result":
                rest.append(b)
                continue
            content = b.get("content")
            text = content if isinstance(content, str) else text_of(content)
            out.add({"role": "tool", "tool_call_id": str(b.get("tool_use_id")), "content": text}, [b])
        if rest:
            out.add({"role": "user", "content": _named(rest)}, rest)
    return out


def request_of(
    context: Sequence[Mapping[str, Any]], raw: Mapping[str, list[dict[str, Any]]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """vcm's built context (chat-completions shaped, pairing settled) as ``(system, messages)``."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    leading = True
    for m in context:
        role = m.get("role")
        text = str(m.get("content") or "")
        if role == "system":
            if leading:
                if text.strip():
                    system.append({"type": "text", "text": text})
            elif text.strip():
                _push(turns, "user", [{"type": "text", "text": text}])
            continue
        leading = False
        own, marker = _own(m, raw)
        if own is not None:
            note = [{"type": "text", "text": marker}] if marker and role == "user" else []
            _push(turns, "assistant" if role == "assistant" else "user", note + [dict(b) for b in own])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                try:
                    given = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    given = {}
                blocks.append({"type": "tool_use", "id": c.get("id"), "name": fn.get("name"),
                               "input": given if isinstance(given, dict) else {}})  # fmt: skip
            _push(turns, "assistant", blocks or [{"type": "text", "text": "(no text)"}])
        elif role == "tool":
            _push(turns, "user", [{"type": "tool_result", "tool_use_id": m.get("tool_call_id"), "content": text}])
        else:
            _push(turns, "user", [{"type": "text", "text": text or "(empty)"}])
    if system:
        system[-1] = {**system[-1], "cache_control": CACHE}
    if turns and turns[0]["role"] != "user":  # the API wants a user turn first
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": "(earlier conversation in memory)"}]})
    return system, turns


def _own(m: Mapping[str, Any], raw: Mapping[str, list[dict[str, Any]]]) -> tuple[list[dict[str, Any]] | None, str]:
    """The client's own blocks for a context message, and the time marker the context put in
    front of its text (``[Mon 2023-05-08] ...``), which the client's blocks do not hold: a user
    turn keeps it as a text block of its own."""
    own = raw.get(fingerprint(m))
    if own is not None:
        return own, ""
    text = str(m.get("content") or "")
    if text.startswith("[") and "] " in text:
        marker, rest = text.split("] ", 1)
        own = raw.get(fingerprint({**m, "content": rest}))
        if own is not None:
            return own, marker + "]"
    return None, ""


def _push(turns: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    # Tool results lead their user turn (the API's rule) as they come: wire_messages has put a
    # notice that landed between a call and its results after them.
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"] = turns[-1]["content"] + blocks
    else:
        turns.append({"role": role, "content": blocks})


def with_id(block: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ``tool_use`` block the endpoint sent without an id gets one (the API's ``toolu_`` form):
    the client echoes the block back, and memory must recognise it and pair its result."""
    if block.get("type") == "tool_use" and not _an_id(block.get("id")):
        return {**block, "id": "toolu_vcm_" + uuid.uuid4().hex[:24]}
    return block


def shown_message(message: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The upstream's message as the client gets it: memory tags out of its text blocks, and an
    id on any ``tool_use`` block without one (:func:`with_id`)."""
    blocks = []
    for b in message.get("content") or []:
        if isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str):
            b = {**b, "text": shown(b["text"])}
        elif isinstance(b, Mapping):
            b = with_id(b)
        blocks.append(b)
    return {**message, "content": blocks, "model": model}


def written_text(message: Mapping[str, Any]) -> str:
    """The text of the upstream's message as the model wrote it (tags in: memory keeps them)."""
    return "".join(
        str(b.get("text", ""))
        for b in message.get("content") or []
        if isinstance(b, Mapping) and b.get("type") == "text"
    )


class EventRelay:
    """A streamed answer's events relayed as they came, but for the memory tags of text deltas
    (per content block; held back while they may be a tag, the rest released before the block
    stops) and the model the client named. The message is put together as it goes: the blocks as
    the client saw them and the text as the model wrote it."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial: dict[int, list[str]] = {}
        self.tags: dict[int, TagFilter] = {}
        self.written: list[str] = []

    def relay(self, name: str, data: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        out = dict(data)
        if name == "message_start" and isinstance(data.get("message"), Mapping):
            out["message"] = {**data["message"], "model": self.model}
        index = data.get("index")
        if not isinstance(index, int):
            return [(name, out)]
        if name == "content_block_start" and isinstance(data.get("content_block"), Mapping):
            self.blocks[index] = dict(with_id(data["content_block"]))
            return [(name, {**out, "content_block": dict(self.blocks[index])})]
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        delta = data.get("delta") if isinstance(data.get("delta"), Mapping) else None
        if name == "content_block_delta" and delta is not None:
            kind = delta.get("type")
            if kind == "text_delta":
                text = str(delta.get("text", ""))
                self.written.append(text)
                text = self.tags.setdefault(index, TagFilter()).feed(text)
                block["text"] = str(block.get("text", "")) + text
                return [(name, {**out, "delta": {**delta, "text": text}})]
            if kind == "input_json_delta":
                self.partial.setdefault(index, []).append(str(delta.get("partial_json", "")))
            elif kind == "thinking_delta":
                block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
            elif kind == "signature_delta":
                block["signature"] = str(delta.get("signature", ""))
            return [(name, out)]
        if name == "content_block_stop":
            rest = self.tags.pop(index).end() if index in self.tags else ""
            if index in self.partial:
                try:
                    block["input"] = json.loads("".join(self.partial.pop(index)) or "{}")
                except ValueError:
                    block["input"] = {}
            if rest:
                block["text"] = str(block.get("text", "")) + rest
                held = {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": rest}}
                return [("content_block_delta", held), (name, out)]
        return [(name, out)]

    def message(self) -> list[dict[str, Any]]:
        """The answer's blocks as the client saw them."""
        return [self.blocks[i] for i in sorted(self.blocks)]
