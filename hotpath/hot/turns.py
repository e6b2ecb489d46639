"""One chat turn at a time per agent, across every API process (a Redis lock with a lifetime).

Two turns of one agent running together would interleave their appends (user, user, reply,
reply) and build each prompt without the other's messages; the second caller waits for the
first turn to end, up to ``wait_s``, and is then refused with ``CONFLICT`` (nothing appended).
The lock's lifetime ``hold_s`` frees an agent whose turn died with its process.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

from redis.exceptions import LockError

from vcm.errors import Conflict
from vcm.hot import keys

log = logging.getLogger(__name__)


class Turn:
    """A held turn; released by :meth:`release` or on leaving a ``with`` block (once)."""

    def __init__(self, agent_id: str, lock: Any) -> None:
        self.agent_id = agent_id
        self._lock = lock
        self._held = True

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        try:
            self._lock.release()
        except LockError:  # its lifetime ran out first: another turn may already hold it
            log.warning("the turn lock of %s expired before its turn ended", self.agent_id)

    def __enter__(self) -> Turn:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


class TurnLocks:
    def __init__(self, client: Any, *, hold_s: float, wait_s: float) -> None:
        self._client = client
        self.hold_s = hold_s
        self.wait_s = wait_s

    def acquire(self, agent_id: str) -> Turn:
        lock = self._client.lock(
            keys.key(agent_id, keys.TURN), timeout=self.hold_s, blocking_timeout=self.wait_s, thread_local=False
        )
        if not lock.acquire():
            raise Conflict(
                f"a turn of agent {agent_id!r} is still running; retry when it ends",
                agent_id=agent_id,
                reason="turn_in_progress",
                waited_s=self.wait_s,
            )
        return Turn(agent_id, lock)
