"""The write-behind backlog: appended messages acknowledged but not yet in the store.

In write-behind mode the append script adds each new message to the agent's ``unspooled`` zset
(score: the time the append was acknowledged) and reports the zset's size and oldest time; the
spool removes what it wrote. So the zset is what a Redis loss would take with it, and its size
and age are what ``[durability] write_behind_max_messages`` / ``write_behind_max_s`` bound (the
API writes an agent's backlog through once past either: :mod:`vcm.service.writebehind`).

An entry whose message left Redis otherwise (its eviction batch committed it to the store first,
or it was forgotten) is stale: whoever reads the backlog to write it removes those too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import redis

from vcm.hotpath import keys
from vcm.hotpath.codec import as_str
from vcm.settings import Settings
from vcm.types import Backlog


def writes_through(settings: Settings) -> bool:
    """Whether appends are written to the store before they are acknowledged: ``write_through``,
    or ``auto`` with an in-process hot state (embedded mode, where it dies with the process)."""
    mode = settings.durability.messages
    return mode == "write_through" or (mode == "auto" and not settings.redis_url)


@dataclass(frozen=True)
class BacklogTotals:
    """All agents' backlogs, for the scrape-time metrics."""

    messages: int
    largest: int  # the most messages one agent has waiting
    oldest_at: float | None


class SpoolBacklog:
    """Named operations on the ``unspooled`` zsets (the append script writes them)."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    def read(self, agent_id: str) -> Backlog:
        key = keys.key(agent_id, keys.UNSPOOLED)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(key)
        pipe.zrange(key, 0, 0, withscores=True)
        n, oldest = pipe.execute()
        return Backlog(int(n), float(oldest[0][1]) if oldest else None)

    def ids(self, agent_id: str, limit: int = 10_000) -> list[str]:
        """The oldest ``limit`` message ids waiting, oldest first."""
        found = self.redis.zrange(keys.key(agent_id, keys.UNSPOOLED), 0, limit - 1)
        return [as_str(m) for m in cast("list[bytes | str]", found)]

    def done(self, agent_id: str, message_ids: Sequence[str]) -> None:
        """The store holds these (or they left Redis with a committed batch): out of the backlog."""
        if message_ids:
            self.redis.zrem(keys.key(agent_id, keys.UNSPOOLED), *message_ids)

    def totals(self, agent_ids: Sequence[str]) -> BacklogTotals:
        """One pipelined ZCARD and ZRANGE per agent."""
        pipe = self.redis.pipeline(transaction=False)
        for agent_id in agent_ids:
            key = keys.key(agent_id, keys.UNSPOOLED)
            pipe.zcard(key)
            pipe.zrange(key, 0, 0, withscores=True)
        replies = pipe.execute()
        sizes = [int(n) for n in replies[0::2]]
        oldest = [float(r[0][1]) for r in replies[1::2] if r]
        return BacklogTotals(sum(sizes), max(sizes, default=0), min(oldest, default=None))
