"""Token-bounded result pages over the store's search cursors, and their opaque cursors.

A tool result page holds at most ``PAGE_TOKENS`` tokens (its JSON body as the model reads it).
The store pages by item count, so one tool page may take items from several store pages or stop
inside one. The tool cursor therefore wraps a :class:`Position`: the store cursor that fetched
the store page, an offset within that page, and how many store pages were fetched before it.

Resuming inside a store page re-fetches it with the same store cursor, which is only safe when
that cursor serves a stored snapshot. A store's first page (``cursor=None``) ranks afresh, and
the embedded adapter's second page does too (its first-page cursor carries the first page's
ids, and ranking the rest creates the snapshot). So the first ``STABLE_PHASE`` store pages are
fetched one item at a time: a tool page never stops inside them, and every later position points
into a snapshot, which stays put while new messages arrive (``vcm.store.paging``).

The cursor is ``base64url(JSON [store cursor, offset, phase]) "." base64url(HMAC)``; the MAC
binds it to the agent, the tool and the search arguments, so an edited cursor, or one replayed
with another query, is refused (VALIDATION_ERROR) instead of paging through something else.
Everything here is pure apart from the ``fetch`` seam of :func:`walk`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from vcm.errors import ValidationError
from vcm.hotpath.tokens import TokenCounter
from vcm.store.types import Page

T = TypeVar("T")

PAGE_TOKENS = 512
STABLE_PHASE = 2  # store pages from this one on are snapshot slices (see the module docstring)
TRUNCATION_MARK = " …[truncated]"
_MAC_BYTES = 12
_MAX_CURSOR_CHARS = 8192


@dataclass(frozen=True)
class Position:
    store_cursor: str | None  # None: the store's first page
    offset: int = 0  # items of that store page already returned
    phase: int = 0  # store pages fetched before it in this search


START = Position(None)


# --- cursor codec ---------------------------------------------------------------------------------
def scope(agent_id: str, kind: str, *args: Any) -> bytes:
    """What a cursor is bound to: agent, result kind and the search arguments."""
    blob = json.dumps([agent_id, kind, *args], separators=(",", ":"), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).digest()


def encode_cursor(pos: Position, *, secret: bytes, bound_to: bytes) -> str:
    body = json.dumps([pos.store_cursor, pos.offset, pos.phase], separators=(",", ":")).encode("utf-8")
    return f"{_b64(body)}.{_b64(_mac(secret, bound_to, body))}"


def decode_cursor(cursor: str, *, secret: bytes, bound_to: bytes) -> Position:
    if not isinstance(cursor, str) or not cursor or len(cursor) > _MAX_CURSOR_CHARS:
        raise _bad("the cursor is empty or too long")
    body_part, sep, mac_part = cursor.partition(".")
    try:
        body, mac = _unb64(body_part), _unb64(mac_part)
    except (binascii.Error, ValueError):
        raise _bad("the cursor is not valid base64") from None
    if not sep or not hmac.compare_digest(mac, _mac(secret, bound_to, body)):
        raise _bad("the cursor was modified or belongs to another search (other agent, tool or arguments)")
    try:
        store_cursor, offset, phase = json.loads(body)
    except ValueError:  # unreachable for cursors we minted; kept for safety
        raise _bad("the cursor body is damaged") from None
    if not (store_cursor is None or isinstance(store_cursor, str)) or not isinstance(offset, int) or offset < 0:
        raise _bad("the cursor position is damaged")
    if not isinstance(phase, int) or phase < 0:
        raise _bad("the cursor position is damaged")
    return Position(store_cursor, offset, phase)


def _bad(reason: str) -> ValidationError:
    return ValidationError(f"invalid cursor: {reason}; repeat the search without a cursor", field="cursor")


def _mac(secret: bytes, bound_to: bytes, body: bytes) -> bytes:
    return hmac.new(secret, bound_to + body, hashlib.sha256).digest()[:_MAC_BYTES]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- walking the store's pages ---------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate(Generic[T]):
    item: T
    after: Position | None  # where the next tool page starts if this is the last item taken


Fetch = Callable[[str | None, int], Page[T]]


def fetch_limit(pos: Position, wanted: int) -> int:
    """Items to ask the store for at ``pos`` to get ``wanted`` more (see the module docstring)."""
    return 1 if pos.phase < STABLE_PHASE else pos.offset + wanted


def walk(fetch: Fetch[T], start: Position, limit: int, *, cost: Callable[[T], int], budget: int) -> list[Candidate[T]]:
    """Up to ``limit`` items from ``start`` on, stopping early once their ``cost`` passes ``budget``
    (no more could fit a page), each with the position after it."""
    out: list[Candidate[T]] = []
    spent = 0
    pos: Position | None = start
    while pos is not None and len(out) < limit and spent <= budget:
        page = fetch(pos.store_cursor, fetch_limit(pos, limit - len(out)))
        items = page.items
        nxt = Position(page.next_cursor, 0, pos.phase + 1) if page.next_cursor else None
        if pos.offset >= len(items):  # everything of this store page was returned already
            pos = nxt
            continue
        for j in range(pos.offset, len(items)):
            after = Position(pos.store_cursor, j + 1, pos.phase) if j + 1 < len(items) else nxt
            out.append(Candidate(items[j], after))
            spent += cost(items[j])
            if len(out) >= limit or spent > budget:
                break
        pos = out[-1].after
    return out


# --- packing a page ----------------------------------------------------------------------------------
Measure = Callable[[list[dict[str, Any]], Position | None], int]
Shrink = Callable[[dict[str, Any], int], dict[str, Any]]


@dataclass(frozen=True)
class Packed:
    items: list[dict[str, Any]]
    taken: int  # candidates consumed (the items, the last one perhaps truncated)
    next: Position | None
    tokens: int  # of the page body as measured


def pack(
    rendered: Sequence[dict[str, Any]],
    afters: Sequence[Position | None],
    *,
    start: Position | None,
    budget: int,
    measure: Measure,
    shrink: Shrink,
) -> Packed:
    """The longest prefix of ``rendered`` whose page body fits ``budget``.

    ``measure(items, next)`` counts the whole body (items, cursor, fields). When not even the first
    item fits, it is shrunk (its text truncated) until it does, so paging always moves on.
    """
    if not rendered:  # nothing left: no cursor, or the caller would page on an empty page forever
        return Packed([], 0, None, measure([], None))
    best = Packed([], 0, start, measure([], start))
    for k in range(1, len(rendered) + 1):
        tokens = measure(list(rendered[:k]), afters[k - 1])
        if tokens > budget:
            break
        best = Packed(list(rendered[:k]), k, afters[k - 1], tokens)
    if best.taken or not rendered:
        return best
    item, nxt = rendered[0], afters[0]
    excess = measure([item], nxt) - budget
    for _ in range(8):  # a truncated text re-tokenises a little differently; converge in a few steps
        item = shrink(rendered[0], excess)
        tokens = measure([item], nxt)
        if tokens <= budget:
            return Packed([item], 1, nxt, tokens)
        excess += tokens - budget
    raise ValueError("an item could not be shrunk into a page")  # only if the fields alone exceed it


def truncate(text: str, drop_tokens: int, counter: TokenCounter) -> str:
    """``text`` without its last ``drop_tokens`` tokens (plus room for the mark), marked."""
    tokens = counter.encoding.encode(text, disallowed_special=())
    keep = max(0, len(tokens) - drop_tokens - counter.text(TRUNCATION_MARK))
    return counter.encoding.decode(tokens[:keep]) + TRUNCATION_MARK


def preview(text: str, max_tokens: int, counter: TokenCounter) -> str:
    """The first ``max_tokens`` tokens of ``text`` (marked when cut)."""
    tokens = counter.encoding.encode(text, disallowed_special=())
    if len(tokens) <= max_tokens:
        return text
    return counter.encoding.decode(tokens[:max_tokens]) + TRUNCATION_MARK


def dumps(value: Any) -> str:
    """The compact JSON the model reads (and that pages are measured on)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
