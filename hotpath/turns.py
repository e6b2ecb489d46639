"""One chat turn at a time per agent, across every API process (a Redis lock with a lifetime).

Two turns of one agent running together would interleave their appends (user, user, reply,
reply) and build each prompt without the other's messages; the second caller waits for the
first turn to end, up to ``wait_s``, and is then refused with ``CONFLICT`` (nothing appended).
While a turn runs, a keep-alive thread renews the lock every third of ``hold_s``, so a turn may
take as long as its model calls do; a process that dies stops renewing, and the agent is free
again ``hold_s`` later.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any

from redis.exceptions import LockError, RedisError

from vcm.errors import Conflict
from vcm.hotpath import keys

log = logging.getLogger(__name__)
# Renewals stop after this long: a turn whose owner never releases it (a leaked generator) cannot
# hold its agent for longer than this plus the lock's lifetime.
MAX_TURN_S = 3600.0


class Turn:
    """A held turn; released by :meth:`release` or on leaving a ``with`` block (once, from any
    thread)."""

    def __init__(self, agent_id: str, lock: Any, hold_s: float) -> None:
        self.agent_id = agent_id
        self._lock = lock
        self._done = threading.Event()
        self._once = threading.Lock()
        self._keeper = threading.Thread(target=self._keep, args=(hold_s / 3,), daemon=True, name="vcm-turn")
        self._keeper.start()

    def _keep(self, every_s: float) -> None:
        for _ in range(max(1, int(MAX_TURN_S / every_s))):
            if self._done.wait(every_s):
                return
            try:
                self._lock.reacquire()
            except (LockError, RedisError):  # lost (expired, or Redis away): the lifetime decides
                log.warning("could not renew the turn lock of %s", self.agent_id, exc_info=True)
                return
        log.warning("the turn of %s has run %.0f s: its lock is no longer renewed", self.agent_id, MAX_TURN_S)

    def release(self) -> None:
        with self._once:
            if self._done.is_set():
                return
            self._done.set()
        try:
            self._lock.release()
        except LockError:  # its lifetime ran out first: another turn may already hold it
            log.warning("the turn lock of %s expired before its turn ended", self.agent_id)
        except RedisError:  # the turn itself is done; the lock's lifetime frees the agent
            log.warning("could not release the turn lock of %s", self.agent_id, exc_info=True)

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
        return Turn(agent_id, lock, self.hold_s)
