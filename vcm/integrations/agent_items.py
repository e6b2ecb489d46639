"""Pure conversions between the OpenAI Agents SDK's input items (the Responses API's item
shapes) and vcm's chat messages, for :mod:`vcm.integrations.agents`.

A tool call stays a tool call and a tool result a tool result: a ``function_call`` item is an
assistant message with one ``tool_calls`` entry, a ``function_call_output`` a ``tool`` message
with its ``tool_call_id``, and back. One item is one vcm message, so each is appended, evicted
and forgotten on its own."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

# The Agents SDK's id for output items of a model that has none (chat completions): not an identity.
FAKE_ID = "__fake_id__"
# Items a message of vcm carries from the SDK (``metadata``), so an operator sees where it came from.
SOURCE = "openai-agents"


@dataclass(frozen=True)
class Append:
    """The vcm message one item becomes (the arguments of ``client.append``)."""

    role: str
    content: str
    tool_calls: list[Json] | None = None
    tool_call_id: str | None = None
    metadata: Json = field(default_factory=dict)


def text_of(content: Any) -> str:
    """A message's text: a string as it is; content parts joined (text, refusals; other parts,
    such as images, as a marker naming their type, since vcm's messages hold text)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else json.dumps(content, sort_keys=True)
    pieces: list[str] = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text", part.get("refusal"))
            pieces.append(text if isinstance(text, str) else f"[{part.get('type', 'part')}]")
        else:
            pieces.append(str(part))
    return "\n".join(pieces)


def to_append(item: Json) -> Append | None:
    """The vcm message for one SDK item; None for a reasoning item (the model's private
    scratch, tied to one provider's response ids: replaying it elsewhere fails)."""
    kind = item.get("type")
    meta: Json = {"source": SOURCE, "item_type": kind or "message"}
    if kind == "function_call":
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]},
        }
        return Append("assistant", "", tool_calls=[call], metadata=meta)
    if kind == "function_call_output":
        return Append("tool", text_of(item.get("output")), tool_call_id=item["call_id"], metadata=meta)
    if kind == "reasoning":
        return None
    if kind in (None, "message") and "role" in item:
        role = item["role"]
        role = "system" if role == "developer" else role
        if role not in ("user", "assistant", "system"):
            role = "user"
        return Append(role, text_of(item.get("content")), metadata=meta)
    # Hosted tools' items (web search, computer use, MCP ...) have no chat-message form: kept as
    # assistant text, so the model still sees that they happened.
    return Append("assistant", f"[{kind}] {json.dumps(item, sort_keys=True, default=str)}", metadata=meta)


def to_items(messages: list[Json], *, orphans: bool = False) -> list[Json]:
    """SDK input items for vcm's (built) context messages, in order. A tool result whose call is
    no longer in the context (evicted before it) is left out unless ``orphans``: providers refuse
    an orphan result."""
    items: list[Json] = []
    calls: set[str] = set()
    for message in messages:
        role = message.get("role")
        content = text_of(message.get("content"))
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in calls or orphans:
                items.append({"type": "function_call_output", "call_id": call_id, "output": content})
            continue
        if role == "assistant":
            if content:
                items.append({"role": "assistant", "content": content})
            for tc in message.get("tool_calls") or ():
                fn = tc.get("function", {})
                calls.add(tc["id"])
                items.append(
                    {"type": "function_call", "call_id": tc["id"], "name": fn.get("name", ""),
                     "arguments": fn.get("arguments", "")}
                )  # fmt: skip
            continue
        if role in ("system", "developer"):
            if content:  # an agent without a system prompt has an empty one: nothing to send
                items.append({"role": "system", "content": content})
            continue
        items.append({"role": "user", "content": content})
    return items


def digest(item: Json) -> str:
    return hashlib.sha256(json.dumps(item, sort_keys=True, default=str).encode()).hexdigest()


def identity(item: Json) -> str | None:
    """What makes an item unique by itself: a tool call's or result's call id, a real item id;
    None for an item that is only its content (a user's "yes" can be said twice)."""
    kind = item.get("type")
    if kind in ("function_call", "function_call_output") and isinstance(item.get("call_id"), str):
        return f"{kind}:{item['call_id']}"
    item_id = item.get("id")
    if isinstance(item_id, str) and item_id and item_id != FAKE_ID:
        return f"id:{item_id}"
    return None


def item_key(session_id: str, previous: str, item: Json) -> str:
    """The idempotency key of one item's append. An item with an identity has the same key
    whichever session object adds it; any other is chained to the key before it, so a retried
    ``add_items`` (same items after the same predecessor) replays and a later identical
    message is a new one."""
    ident = identity(item)
    basis = f"{session_id}|{ident}" if ident is not None else f"{session_id}|{previous}|{digest(item)}"
    return "oa-" + hashlib.sha256(basis.encode()).hexdigest()[:40]
