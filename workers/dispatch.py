"""The Celery implementation of the hot path's :class:`vcm.dispatch.Dispatcher` port.

Cheap on the caller's path: one publish by task name (no task module import, so the API process
never loads the summariser or the embedder), a short bounded publish retry, and no waiting for
results. The message is already committed in Redis when this runs, so a broker failure must not
fail the caller: it is logged and counted, and the sweeper re-drives the batch / spools the
message after its grace period.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from celery import Celery

from vcm.dispatch import Dispatcher
from vcm.errors import StoreUnavailable
from vcm.types import IngestRequest
from vcm.workers import metrics, names

log = logging.getLogger(__name__)


class CeleryDispatcher:
    def __init__(self, app: Celery, *, retries: int = 2) -> None:
        self.app = app
        self._policy = {"max_retries": retries, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}

    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        if message_ids:
            self._send(names.SPOOL, [agent_id, list(message_ids)], "spool")

    def spool_many(self, batches: Mapping[str, Sequence[str]]) -> None:
        """The spools of several agents as one task (one publish for all of them)."""
        batches = {agent_id: list(ids) for agent_id, ids in batches.items() if ids}
        if len(batches) == 1:
            self.spool(*next(iter(batches.items())))
        elif batches:
            self._send(names.SPOOL_MANY, [batches], "spool")

    def evict(self, agent_id: str, batch_id: int) -> None:
        self._send(names.EVICT, [agent_id, int(batch_id)], "evict")

    def ingest(self, request: IngestRequest) -> None:
        # The document travels in the message (it is nowhere else yet): a failed publish is the
        # caller's to know, not the sweeper's to repair.
        try:
            self.app.send_task(names.INGEST, kwargs=request.as_kwargs(), retry=True, retry_policy=self._policy)
        except Exception as exc:
            metrics.DISPATCH_FAILURES.labels(kind="ingest").inc()
            log.error("could not queue ingestion job %s of %s: %r", request.job_id, request.agent_id, exc)
            raise StoreUnavailable("the ingestion queue is unavailable; retry shortly", job_id=request.job_id) from exc

    def _send(self, task: str, args: list[Any], kind: str) -> None:
        try:
            self.app.send_task(task, args=args, retry=True, retry_policy=self._policy)
        except Exception as exc:  # any broker/transport error; the sweeper repairs the omission
            metrics.DISPATCH_FAILURES.labels(kind=kind).inc()
            log.error("could not dispatch %s%s: %r; the sweeper will pick it up", task, args, exc)


# How long the publisher thread waits after the first piece of work before publishing, so the
# appends of that window go out as one spool task: at 1 000 appends/s this turns a millisecond
# of kombu work per append into ~0.05 ms, and the spool embeds in larger batches. Recall gains
# the delay at worst; a message is in the context window meanwhile.
LINGER_S = 0.02
# Message ids per spool task (a longer run is split): bounded task messages and task runtimes.
SPOOL_CHUNK = 500
# Message ids held for publishing before new ones are dropped (counted; the sweeper spools them):
# bounds the memory a long broker outage can take.
MAX_PENDING = 200_000

_Work = tuple[dict[str, list[str]], list[tuple[str, int]]]


class BackgroundDispatcher:
    """Publishes spools and evictions from a thread of its own, coalesced per agent.

    The API's append hands its cold-path work here and returns: publishing a Celery task costs a
    millisecond of kombu work and at least one broker round trip, more than the append itself.
    What is queued here when the process dies is not lost: the message is in Redis, and the
    sweeper's reconcile spools FIFO messages that reached no store (an eviction batch is re-driven
    by the sweeper the same way) - the same repair as for a process killed between its Lua call
    and a synchronous publish. Ingestion stays synchronous: its document exists nowhere else, so
    the caller must hear of a failed hand-over.
    """

    def __init__(self, inner: Dispatcher, *, linger_s: float = LINGER_S, max_pending: int = MAX_PENDING) -> None:
        self.inner = inner
        # The Celery dispatcher publishes several agents' spools as one task; another keeps
        # its one call per agent.
        self._spool_many: Callable[[Mapping[str, Sequence[str]]], None] | None = getattr(inner, "spool_many", None)
        self.linger_s = linger_s
        self.max_pending = max_pending
        self._cond = threading.Condition()
        self._spools: dict[str, list[str]] = {}
        self._evictions: list[tuple[str, int]] = []
        self._pending = 0
        self._busy = False  # the thread holds taken work it has not published yet
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        atexit.register(self.close)

    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        if not message_ids:
            return
        with self._cond:
            self._check_process()
            if self._pending + len(message_ids) > self.max_pending:
                metrics.DISPATCH_FAILURES.labels(kind="spool").inc()
                log.error("dispatch queue full: spool of %s%s left to the sweeper", agent_id, list(message_ids))
                return
            self._spools.setdefault(agent_id, []).extend(message_ids)
            self._pending += len(message_ids)
            late = self._wake()
        self._publish(*late)

    def evict(self, agent_id: str, batch_id: int) -> None:
        with self._cond:
            self._check_process()
            self._evictions.append((agent_id, int(batch_id)))
            late = self._wake()
        self._publish(*late)

    def ingest(self, request: IngestRequest) -> None:
        self.inner.ingest(request)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything handed over so far is published; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while (self._spools or self._evictions or self._busy) and self._alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
            work = self._take()  # left by a thread that is gone (closed, or never started)
        self._publish(*work)
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Publish what is queued and stop the thread (also run at interpreter exit); later work
        is published in the caller's thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        with self._cond:
            work = self._take()
        self._publish(*work)

    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _check_process(self) -> None:
        # A forked child inherits the queue but not the thread: it starts over with its own.
        if self._pid != os.getpid():
            self._pid, self._thread = os.getpid(), None
            self._spools, self._evictions, self._pending, self._busy = {}, [], 0, False

    def _wake(self) -> _Work:
        """Under the lock: start or wake the thread; after close, hand the work back to publish
        in the caller's thread."""
        if self._closed:
            return self._take()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vcm-dispatch", daemon=True)
            self._thread.start()
        self._cond.notify()
        return {}, []

    def _take(self) -> _Work:
        spools, evictions = self._spools, self._evictions
        self._spools, self._evictions, self._pending = {}, [], 0
        return spools, evictions

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._spools or self._evictions or self._closed):
                    self._cond.wait()
                if self._closed:
                    return
            # Outside the lock: appends keep queueing while the window fills.
            time.sleep(self.linger_s)
            with self._cond:
                work = self._take()
                self._busy = True
            try:
                self._publish(*work)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _publish(self, spools: dict[str, list[str]], evictions: list[tuple[str, int]]) -> None:
        # Spools first: a batch's messages are then already on their way to the store when its
        # eviction runs (either order is correct; both tasks are idempotent).
        for task in _spool_tasks(spools):
            if self._spool_many is not None:
                self._safely("spool", self._spool_many, task)
            else:
                for agent_id, ids in task.items():
                    self._safely("spool", self.inner.spool, agent_id, ids)
        for agent_id, batch_id in dict.fromkeys(evictions):
            self._safely("evict", self.inner.evict, agent_id, batch_id)

    @staticmethod
    def _safely(kind: str, send: Callable[..., None], *args: Any) -> None:
        try:
            send(*args)
        except Exception:  # the thread must outlive any one failure; the sweeper repairs it
            metrics.DISPATCH_FAILURES.labels(kind=kind).inc()
            log.exception("could not dispatch %s%s; the sweeper will pick it up", kind, args)


def _spool_tasks(spools: Mapping[str, Sequence[str]]) -> list[dict[str, list[str]]]:
    """The queued spools as tasks of at most SPOOL_CHUNK message ids, agents packed together in
    the order they were queued, each agent's ids deduplicated and in order."""
    tasks: list[dict[str, list[str]]] = []
    current: dict[str, list[str]] = {}
    size = 0
    for agent_id, ids in spools.items():
        unique = list(dict.fromkeys(ids))
        for at in range(0, len(unique), SPOOL_CHUNK):
            part = unique[at : at + SPOOL_CHUNK]
            if size + len(part) > SPOOL_CHUNK or agent_id in current:
                tasks.append(current)
                current, size = {}, 0
            current[agent_id] = part
            size += len(part)
    if current:
        tasks.append(current)
    return tasks
