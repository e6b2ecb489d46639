"""The change feed of each agent: one Redis stream that every write of its blocks, state and facts
appends to, whichever API process or worker made it, and that client instances follow to keep
their caches right (:mod:`vcm.sync`).

An entry says what changed, never what it now holds: ``kind`` (block, state, fact, agent), ``key``
(block id, state key, fact id; ``*`` for all), ``version`` (the new ``_rev`` or fact version; empty
when deleted), ``op`` (put, delete, clear, reset, start) and ``at`` (server time). Its stream id
(``<ms>-<seq>``, ordered by Redis) is the position a reader resumes after.

One key per agent, under the agent's hash tag (:mod:`vcm.hotpath.keys`), so the design runs unchanged
on Redis Cluster; ``XADD ... MAXLEN ~`` bounds it, and it expires after ``ttl_s`` without a change.

**Gaps.** A reader that comes back after its position was trimmed away (or after the feed was
dropped: a reset agent, an idle feed expired, a Redis that lost its data) cannot know what it
missed, so :meth:`ChangeFeed.read` says ``gap`` and the reader drops everything it cached. To tell
"trimmed" from "nothing happened yet", every position handed out is a real entry: an empty feed is
given a ``start`` entry before its head is read.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from vcm.errors import ValidationError
from vcm.hotpath import keys

log = logging.getLogger(__name__)

KINDS = ("block", "state", "fact", "agent")
OPS = ("put", "delete", "clear", "reset", "start")
# A stream id, or "0": from the oldest change kept.
_POSITION = re.compile(r"^(?:0|[0-9]{1,20}-[0-9]{1,20})$")
MAX_PAGE = 1000


@dataclass(frozen=True)
class Change:
    id: str
    kind: str
    key: str
    version: str | None
    op: str
    at: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "key": self.key,
            "version": self.version,
            "op": self.op,
            "at": self.at,
        }


@dataclass(frozen=True)
class ChangePage:
    changes: tuple[Change, ...]
    next_after: str  # where the next read resumes
    head: str  # the newest change in the feed now
    gap: bool  # changes after ``after`` may have been lost: the reader drops its cache of the agent


def position(stream_id: str) -> tuple[int, int]:
    """A stream id as a sortable pair ("0" is before every entry)."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def checked_position(after: str) -> str:
    if not isinstance(after, str) or not _POSITION.match(after):
        raise ValidationError("after must be a change id from this feed (<ms>-<seq>) or 0", field="after")
    return after


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _change(entry_id: Any, fields: dict[Any, Any]) -> Change:
    f = {_text(k): _text(v) for k, v in fields.items()}
    return Change(
        id=_text(entry_id),
        kind=f.get("kind", ""),
        key=f.get("key", ""),
        version=f.get("v") or None,
        op=f.get("op", ""),
        at=float(f.get("at") or 0.0),
    )


class ChangeFeed:
    """Every agent's change feed. Thread-safe (a redis-py client is)."""

    def __init__(self, client: redis.Redis, *, maxlen: int, ttl_s: int, clock: Callable[[], float] = time.time) -> None:
        self.redis = client
        self.maxlen = maxlen
        self.ttl_s = ttl_s
        self.clock = clock

    def publish(self, agent_id: str, kind: str, key: str, version: str | None, op: str) -> str:
        """Append one change; returns its id."""
        if kind not in KINDS or op not in OPS:
            raise ValueError(f"not a change: {kind} {op}")  # a caller's bug, not bad input
        name = keys.key(agent_id, keys.CHANGES)
        fields = {"kind": kind, "key": key, "v": version or "", "op": op, "at": repr(self.clock())}
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(name, fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
        pipe.expire(name, self.ttl_s)
        return _text(pipe.execute()[0])

    def exists(self, agent_id: str) -> bool:
        """Whether the agent has a feed now (it goes with a lost hot state, or after ``ttl_s`` idle)."""
        return bool(self.redis.exists(keys.key(agent_id, keys.CHANGES)))

    def read(self, agent_id: str, after: str | None, limit: int) -> ChangePage:
        """The changes after ``after`` (None: none, only where the feed is now; "0": from the
        oldest kept), at most ``limit``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ValidationError(f"limit must be 1 to {MAX_PAGE}", field="limit")
        if after is not None:
            checked_position(after)
        name = keys.key(agent_id, keys.CHANGES)
        newest = self.redis.xrevrange(name, "+", "-", count=1)
        head = _text(newest[0][0]) if newest else self.publish(agent_id, "agent", "*", None, "start")
        if after is None:
            return ChangePage((), head, head, False)
        gap = False
        start = "-" if after == "0" else "(" + after
        if after != "0":
            first = self.redis.xrange(name, "-", "+", count=1)
            # The reader's position is gone (trimmed, or the feed was dropped and begun again), or
            # lies beyond this feed's newest entry (the feed was lost and begun again).
            if (first and position(_text(first[0][0])) > position(after)) or position(after) > position(head):
                gap, start = True, "-"
        entries: Any = self.redis.xrange(name, start, "+", count=limit)
        changes = tuple(_change(i, f) for i, f in entries or [])
        next_after = changes[-1].id if changes else (head if gap else after)
        return ChangePage(changes, next_after, head, gap)


__all__ = ["KINDS", "OPS", "Change", "ChangeFeed", "ChangePage", "checked_position", "position"]
