"""The memory proxy's rules, shared by both wire formats (``/v1/chat/completions`` and, through
:mod:`vcm.api.anthropic`, ``/v1/messages``): how a client's resent history lands in the agent's
memory, and how the upstream's answer reaches the client without vcm's memory tags.

The history rule. An OpenAI or Anthropic client sends its whole conversation each time; vcm
keeps one conversation per agent, append-only. Each client message gets a key: a fingerprint of
it (role, name, text, tool call id, tool calls) and how many identical ones precede it, so "ok"
said twice is two messages and the same history resent is the same keys. Then:

* messages vcm holds under their key are skipped: a history sent twice appends nothing twice;
* messages after the last one vcm holds are appended, in order: the new turn;
* a message vcm does not hold *before* one it does hold is the client's edit of the past (or a
  summary it put in place of older messages). Memory is not rewritten and the message is not
  merged in out of order: it is left out, and the response says so in the ``X-VCM-History``
  header (``diverged; left_out=N``; ``appended`` otherwise);
* messages the client dropped (it trimmed its own history to fit its window, or retried its last
  turn) stay in memory: that is the virtual context's job. A retried or edited last user message
  is a new message after the one it replaces.

A key is known for ``idempotency_ttl_s`` (one day by default): a history resent after that is
new to vcm, like a new conversation.

The client's ``system`` / ``developer`` messages are never stored (the agent's own system
prompt and blocks rule its context). Memory tags (``[MEMORY:...]``, ``[STATE:...]``) in the
model's reply are kept as facts and state and taken out of what the client gets
(:class:`~vcm.facts.capture.TagFilter` for a stream, a tag cut across deltas included); the
reply is stored under the key the client's next request will carry for it, the text it was
shown.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vcm import validation
from vcm.errors import ValidationError
from vcm.facts.capture import shown
from vcm.service import MemoryService

ROLES = ("system", "developer", "user", "assistant", "tool")
HISTORY_HEADER = "X-VCM-History"


def text_of(content: Any) -> str:
    """Message content as text: a string, or the text parts of a content-part list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # A part that is not a typed object, or a text part without text, is the client's bug:
        # refused rather than dropped, or kept as the repr of whatever it held.
        for p in content:
            if not isinstance(p, Mapping) or not isinstance(p.get("type"), str):
                raise ValidationError("each content part must be an object with a string type", field="messages")
            if p["type"] == "text" and not isinstance(p.get("text"), str):
                raise ValidationError("a text content part needs its text as a string", field="messages")
        text = "".join(p["text"] for p in content if p["type"] == "text")
        # Parts without text (an image) are named, so the message is not empty to memory.
        return text or " ".join(f"[{p['type']}]" for p in content)
    raise ValidationError("message content must be text or a list of content parts", field="messages")


def fingerprint(message: Mapping[str, Any]) -> str:
    """What identifies a client message: role, name, content, tool call id and tool calls."""
    parts = [message.get("role"), message.get("name"), text_of(message.get("content")), message.get("tool_call_id"),
             json.dumps(message.get("tool_calls") or [], sort_keys=True)]  # fmt: skip
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def keys_of(messages: Sequence[Mapping[str, Any]], prefix: str = "oai") -> list[str]:
    """An idempotency key per message: its fingerprint and how many identical ones came before."""
    seen: dict[str, int] = {}
    out = []
    for m in messages:
        fp = fingerprint(m)
        out.append(f"{prefix}:{fp}:{seen.get(fp, 0)}")
        seen[fp] = seen.get(fp, 0) + 1
    return out


def reply_key(messages: Sequence[Mapping[str, Any]], reply: Mapping[str, Any], prefix: str = "oai") -> str:
    """The key ``reply`` (as the client was shown it) carries when the client sends it back."""
    fp = fingerprint(reply)
    return f"{prefix}:{fp}:{sum(1 for m in messages if fingerprint(m) == fp)}"


@dataclass(frozen=True)
class Reconciled:
    query: str  # the latest user text: what relevant memory is recalled for
    appended: int
    left_out: int  # client messages before known ones that vcm did not hold (see the module)

    @property
    def header(self) -> dict[str, str]:
        state = f"diverged; left_out={self.left_out}" if self.left_out else "appended"
        return {HISTORY_HEADER: f"{state}; appended={self.appended}"}


def plan(roles: Sequence[str], keys: Sequence[str], held: set[str]) -> tuple[list[int], int]:
    """The history rule (see the module): the indexes to append, and how many are left out. Pure."""
    stored = [i for i, role in enumerate(roles) if role not in ("system", "developer")]
    last = max((i for i in stored if keys[i] in held), default=-1)
    left_out = sum(1 for i in stored if i < last and keys[i] not in held)
    return [i for i in stored if i > last], left_out


def reconcile(
    service: MemoryService,
    agent_id: str,
    messages: Sequence[Mapping[str, Any]],
    actor: str,
    limit: int,
    *,
    prefix: str = "oai",
) -> Reconciled:
    """Append the client's new messages (the history rule). Every message is checked before the
    first is appended, so a bad one changes nothing; the caller's messages are only read."""
    roles: list[str] = []
    texts: list[str] = []
    for m in messages:
        role = m.get("role")
        if role not in ROLES:
            raise ValidationError(f"unknown message role {role!r}", field="messages")
        roles.append(str(role))
        texts.append(text_of(m.get("content")))
    keys = keys_of(messages, prefix)
    held = set(service.hot.idempotency_records(agent_id, keys))
    # A message with nothing in it (an empty reply echoed back) has nothing to remember.
    kept = [r if texts[i].strip() or messages[i].get("tool_calls") or r == "tool" else "system"
            for i, r in enumerate(roles)]  # fmt: skip
    # The limit is memory's too: the client's words must also fit what an append takes.
    limit = min(limit, service.hot.settings.budget.max_content_chars)
    stored: dict[int, str] = {}
    for i, role in enumerate(kept):
        # A message vcm holds passed these checks when it was kept (a long reply of the model's
        # included, which may be over ``limit``): only the others are checked, all of them before
        # the first append.
        if role not in ("system", "developer") and keys[i] not in held:
            stored[i] = _checked(i, messages[i], role, texts[i], limit)
    todo, left_out = plan(kept, keys, held)
    for i in todo:
        m = messages[i]
        calls = m.get("tool_calls")
        service.append(
            agent_id, roles[i], stored[i], name=m.get("name"), tool_call_id=m.get("tool_call_id"),
            tool_calls=[dict(c) for c in calls] if calls else None, idempotency_key=keys[i], actor=actor,
        )  # fmt: skip
    query = next((texts[i] for i in range(len(roles) - 1, -1, -1) if roles[i] == "user"), "")
    return Reconciled(query, len(todo), left_out)


def _checked(i: int, m: Mapping[str, Any], role: str, text: str, limit: int) -> str:
    """The text message ``i`` is kept with, once it is checked as its append will check it (its
    error naming where it is: ``messages.3.name``)."""
    calls = m.get("tool_calls")
    text = text if text.strip() or calls else "(empty)"  # a tool's empty result
    where = f"messages.{i}"
    try:
        validation.message(role, text, limit, author=m.get("name"), call_id=m.get("tool_call_id"), calls=calls or None)
        for call in calls or ():
            _check_call(call)
    except ValidationError as exc:
        field = exc.details.get("field")
        details = {k: v for k, v in exc.details.items() if k != "field"}
        raise ValidationError(
            f"{where}: {exc.message}", field=f"{where}.{field}" if field else where, **details
        ) from None
    return text


def _check_call(call: Mapping[str, Any]) -> None:
    # The shape the chat-completions API itself insists on: the context built from memory pairs
    # calls and results by id and sends the name and arguments back to the model.
    fn = call.get("function")
    if not isinstance(call.get("id"), str) or not call["id"].strip():
        raise ValidationError("a tool call needs its id as a string", field="tool_calls")
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise ValidationError("a tool call needs a function object with its name", field="tool_calls")
    if not isinstance(fn.get("arguments", ""), str):
        raise ValidationError("a tool call's arguments must be a JSON text (a string)", field="tool_calls")


def keep_reply(
    service: MemoryService,
    agent_id: str,
    written: str | None,
    tool_calls: Sequence[Mapping[str, Any]] | None,
    key: str,
    actor: str,
) -> None:
    """Store the model's reply as written (its tags become facts and state) under ``key``, as
    memory can keep it (:func:`vcm.validation.storable`: the client has it as it was written, and
    ``key`` is of that). A reply with nothing to show and no calls is not stored: memory refuses
    an empty message (so the tags of a reply that is only tags are not kept either)."""
    if not shown(written or "").strip() and not tool_calls:
        return
    words = validation.storable(written or "", service.hot.settings.budget.max_content_chars)
    service.append(
        agent_id, "assistant", words, tool_calls=[dict(c) for c in tool_calls] if tool_calls else None,
        idempotency_key=key, actor=actor,
    )  # fmt: skip
