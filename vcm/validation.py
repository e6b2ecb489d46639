"""Input checks shared by every entry point. Pure; raise ValidationError before any state changes."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vcm.errors import ValidationError
from vcm.types import ROLES

AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
BLOCK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
# The API model and the tool schema use the same pattern.
DOC_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-/]{0,199}$")
MAX_IDEMPOTENCY_KEY = 256
MAX_METADATA_BYTES = 16_384
MAX_TOOL_CALLS = 128  # tool calls in one assistant message
MAX_TOOL_CALL_ID = 256
# How far ahead of the server's clock a caller's ``created_at`` may be (clock skew), in seconds.
MAX_CREATED_AHEAD_S = 300.0


def agent_id(value: Any) -> str:
    if not isinstance(value, str) or not AGENT_ID.match(value):
        raise ValidationError(
            "agent_id must be 1-128 characters of letters, digits, '_', '.', '-' (starting with a letter or digit)",
            field="agent_id",
        )
    return value


def block_id(value: Any) -> str:
    if not isinstance(value, str) or not BLOCK_ID.match(value):
        raise ValidationError("block_id must be 1-64 characters of letters, digits, '_', '.', '-'", field="block_id")
    return value


def doc_id(value: Any) -> str:
    if not isinstance(value, str) or not DOC_ID.match(value):
        raise ValidationError(
            "doc_id must be 1-200 characters of letters, digits, '_', '.', ':', '-', '/' (starting with a "
            "letter or digit)",
            field="doc_id",
        )
    return value


def role(value: Any) -> str:
    if value not in ROLES:
        raise ValidationError(f"role must be one of {', '.join(sorted(ROLES))}, not {value!r}", field="role")
    return str(value)


def text(value: Any, field: str, max_chars: int, *, allow_empty: bool = False) -> str:
    if isinstance(value, bytes | bytearray):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError(f"{field} is not valid UTF-8", field=field) from None
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string", field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be stored or sent to a model.
        raise ValidationError(f"{field} is not valid UTF-8 text", field=field) from None
    if not allow_empty and not value.strip():
        raise ValidationError(f"{field} must not be empty", field=field)
    if len(value) > max_chars:
        raise ValidationError(
            f"{field} has {len(value)} characters; the limit is {max_chars}",
            field=field,
            limit=max_chars,
        )
    if "\x00" in value:
        raise ValidationError(f"{field} must not contain NUL characters", field=field)
    return value


def storable(words: str, max_chars: int) -> str:
    """A model's words as memory can keep them (:func:`text` refuses NUL characters and text past
    ``max_chars``): each NUL becomes U+FFFD, and past the limit the end is cut with a note saying
    how much. Its caller has already shown the model's answer to someone, so refusing it would
    lose the answer, and the client's next request, which carries it back, would be refused too."""
    words = words.replace("\x00", "\ufffd")
    if len(words) <= max_chars:
        return words
    note = "\n[vcm: {} more characters of this reply were not kept]"
    cut = max_chars - len(note.format(len(words)))
    if cut <= 0:  # a limit shorter than the note itself
        return words[:max_chars]
    return words[:cut] + note.format(len(words) - cut)


def name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not NAME.match(value):
        raise ValidationError("name must be 1-64 of letters, digits, '_', '-'", field="name")
    return value


def idempotency_key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_IDEMPOTENCY_KEY or not value.isprintable():
        raise ValidationError(
            f"idempotency_key must be 1-{MAX_IDEMPOTENCY_KEY} printable characters",
            field="idempotency_key",
        )
    return value


def one_key(header: str | None, body: Any) -> str | None:
    """The idempotency key of a request that may carry it twice, as its transport's own field
    (an HTTP ``Idempotency-Key`` header) and in its body or arguments: not both, unless they
    agree; checked."""
    if header is not None and body is not None and header != body:
        raise ValidationError(
            "the Idempotency-Key header and the body's idempotency_key differ; send one", field="idempotency_key"
        )
    return idempotency_key(header if header is not None else body)


def metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("metadata must be an object", field="metadata")
    try:
        encoded = json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        raise ValidationError("metadata must be JSON-serialisable", field="metadata") from None
    if len(encoded.encode("utf-8")) > MAX_METADATA_BYTES:
        raise ValidationError(f"metadata is larger than {MAX_METADATA_BYTES} bytes", field="metadata")
    return dict(value)


def tool_calls(value: Any, max_chars: int) -> list[dict[str, Any]] | None:
    """An assistant message's tool calls, checked for shape and size before anything counts their
    tokens: ``max_chars`` is what the message's content left of the per-message limit, so a
    message cannot get past the limit by carrying its bulk in tool-call arguments."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValidationError("tool_calls must be a list of objects", field="tool_calls")
    if len(value) > MAX_TOOL_CALLS:
        raise ValidationError(f"at most {MAX_TOOL_CALLS} tool calls in one message", field="tool_calls")
    calls: list[dict[str, Any]] = []
    for call in value:
        if not isinstance(call, Mapping):
            raise ValidationError("each tool call must be an object", field="tool_calls")
        calls.append(dict(call))
    try:
        encoded = json.dumps(calls, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        raise ValidationError("tool_calls must be JSON-serialisable", field="tool_calls") from None
    if len(encoded) > max_chars:
        raise ValidationError(
            f"the message is larger than its limit: its tool calls take {len(encoded)} characters, "
            f"{max(max_chars, 0)} were left after its content",
            field="tool_calls",
            limit=max(max_chars, 0),
        )
    return calls


def tool_call_id(role_name: str, value: Any) -> str | None:
    """A tool result must say which call it answers (as chat-completions APIs require)."""
    if value is None or value == "":
        if role_name == "tool":
            raise ValidationError("a message of role tool needs the tool_call_id it answers", field="tool_call_id")
        return None
    if not isinstance(value, str) or len(value) > MAX_TOOL_CALL_ID or not value.strip():
        raise ValidationError(f"tool_call_id must be a string of 1-{MAX_TOOL_CALL_ID} characters", field="tool_call_id")
    return value


def message(
    role_name: Any,
    content: Any,
    max_chars: int,
    *,
    author: Any = None,
    pinned: Any = False,
    meta: Any = None,
    call_id: Any = None,
    calls: Any = None,
) -> tuple[str, list[dict[str, Any]] | None, str | None, dict[str, Any]]:
    """One message to append, checked whole (``author`` is its ``name``): its content, tool calls,
    tool call id and metadata as they are kept."""
    role(role_name)
    # An assistant message that only calls tools has no text; it still belongs in the context.
    words = text(content, "content", max_chars, allow_empty=bool(calls))
    # The whole message is size-checked before its tokens are counted (counting is the cost).
    checked_calls = tool_calls(calls, max_chars - len(words))
    checked_id = tool_call_id(role_name, call_id)
    name(author)
    flag(pinned, "pinned")
    return words, checked_calls, checked_id, metadata(meta)


def flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"{field} must be true or false", field=field)
    return value


def created_at(value: Any, now: float) -> float | None:
    """A message's own time (seconds since the epoch, UTC), for history imported with the times
    it was said; None: now. Not before 1970-01-02, nor more than :data:`MAX_CREATED_AHEAD_S`
    ahead of ``now``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError("created_at must be a finite number of seconds since the epoch", field="created_at")
    at = float(value)
    if at < 86400.0:
        raise ValidationError("created_at must be after 1970-01-02 (seconds since the epoch)", field="created_at")
    if at > now + MAX_CREATED_AHEAD_S:
        raise ValidationError(
            f"created_at is {at - now:.0f} s ahead of the server's clock (at most {MAX_CREATED_AHEAD_S:.0f} s)",
            field="created_at",
        )
    return at
