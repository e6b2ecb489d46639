"""Paging rules both adapters share (pure): snapshot cursors for searches, keyset cursors for events.

Searches page through a *snapshot*: the ranked ``(id, score)`` list of the first search, stored
under a random id with a TTL (SQLite table ``cursors`` in the embedded adapter, collection
``cursors`` in ArangoDB) and sliced per page, so data written meanwhile never repeats or skips an
item. How and when the list is stored is the adapters' business (``store/*/snapshots.py``); what a
snapshot cursor holds, how it is checked and how a page is cut from the list is here, so both
adapters refuse the same cursors with the same errors.

Event listings page by keyset on ``(created_at, tiebreak)``: an event appended later lands after
the position or is simply not part of this listing. The tiebreak is the adapter's own unique
order (SQLite ``seq``, ArangoDB ``_key``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from vcm.errors import ValidationError
from vcm.store.cursor import decode_cursor, encode_cursor

K = TypeVar("K")  # what a ranked item is called in the adapter: a row id or a document _key
M = TypeVar("M", bound=Mapping[str, Any])


@dataclass(frozen=True)
class Slice(Generic[K]):
    items: list[tuple[K, float]]
    next_cursor: str | None
    offset: int = 0  # items of the same search before this slice (page depth, for metrics)


def check_fingerprint(payload: Mapping[str, Any], fingerprint: str) -> None:
    """Refuse a search cursor replayed with other arguments than the search that minted it."""
    if payload.get("f") != fingerprint:
        raise ValidationError(
            "invalid cursor: it belongs to a search with other arguments; "
            "repeat the original arguments or start again without a cursor"
        )


def snapshot_cursor(secret: bytes, kind: str, snapshot_id: str, fingerprint: str, offset: int, base: int = 0) -> str:
    """``base``: items the search returned before the snapshot's first item (an adapter may
    snapshot only the rest of a search after its first page); kept for page-depth metrics."""
    payload: dict[str, Any] = {"k": kind, "s": snapshot_id, "o": offset, "f": fingerprint}
    if base:
        payload["d"] = base
    return encode_cursor(payload, secret)


def snapshot_position(payload: Mapping[str, Any]) -> tuple[str, int]:
    """(snapshot id, offset) of a decoded snapshot cursor."""
    snapshot_id, offset = payload.get("s"), payload.get("o")
    if not isinstance(snapshot_id, str) or not isinstance(offset, int) or offset < 0:
        raise damaged_cursor()
    return snapshot_id, offset


def snapshot_base(payload: Mapping[str, Any]) -> int:
    """The ``base`` a snapshot cursor was minted with (0 when absent)."""
    base = payload.get("d", 0)
    if not isinstance(base, int) or isinstance(base, bool) or base < 0:
        raise damaged_cursor()
    return base


def check_snapshot(stored: M | None, *, agent_id: str, kind: str, now: float, ttl_s: float) -> M:
    """The stored snapshot (with its ``agent_id``, ``kind``, ``expires_at``) if it may serve this
    page: it exists, has not expired, and belongs to this agent's search of this kind. None
    means it is gone (purged after its TTL)."""
    if stored is None or float(stored.get("expires_at", 0)) < now:
        raise expired_cursor(ttl_s)
    if stored.get("agent_id") != agent_id or stored.get("kind") != kind:
        raise ValidationError("invalid cursor: it belongs to another agent's search")
    return stored


def cut(
    ranked: Sequence[tuple[K, float]],
    offset: int,
    limit: int,
    *,
    secret: bytes,
    kind: str,
    snapshot_id: str,
    fingerprint: str,
    base: int = 0,
) -> Slice[K]:
    """The page at ``offset`` of a stored snapshot, with the cursor of the next page if any."""
    end = offset + limit
    next_cursor = snapshot_cursor(secret, kind, snapshot_id, fingerprint, end, base) if end < len(ranked) else None
    return Slice(list(ranked[offset:end]), next_cursor, base + offset)


def damaged_cursor() -> ValidationError:
    return ValidationError("invalid cursor: damaged position; start again")


def expired_cursor(ttl_s: float) -> ValidationError:
    return ValidationError("invalid cursor: it has expired; run the search again", ttl_s=ttl_s)


# --- event listings ------------------------------------------------------------------------------
def keyset_cursor(secret: bytes, fingerprint: str, created_at: float, tiebreak_field: str, tiebreak: Any) -> str:
    return encode_cursor({"k": "events", "t": created_at, tiebreak_field: tiebreak, "f": fingerprint}, secret)


def keyset_position(
    cursor: str, secret: bytes, fingerprint: str, tiebreak_field: str, tiebreak_type: type[Any]
) -> tuple[float, Any]:
    """(created_at, tiebreak) after which the next page of an event listing starts."""
    position = decode_cursor(cursor, secret, kind="events")
    after_t, after = position.get("t"), position.get(tiebreak_field)
    if position.get("f") != fingerprint:
        raise ValidationError("invalid cursor: it belongs to a query with other arguments")
    if not isinstance(after_t, int | float) or not isinstance(after, tiebreak_type):
        raise damaged_cursor()
    return float(after_t), after
