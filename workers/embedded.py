"""The in-process worker of embedded mode: a real Celery worker in a thread, over ``memory://``.

The same tasks run as in production; only the transport differs. In embedded mode the hot state
is the process's fakeredis (``vcm.hotpath.connection.connect("")``) and the store the SQLite file, so
the API and this worker share both::

    with embedded_worker(build(settings).app):
        ...  # serve requests; evictions and spooling run in the background thread

One solo worker consumes every queue: in one process a second pool would only compete for the
same cores and the GIL.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from celery import Celery, beat
from celery.app import trace
from celery.worker import WorkController
from celery.worker import state as worker_state

from vcm.errors import ConfigError
from vcm.workers import routes
from vcm.workers.beat import ENTRY_JOBS

log = logging.getLogger(__name__)

DRAIN_S = 0.1  # the longest the worker thread drains its queues before it looks at a stop


class _Controller(WorkController):  # type: ignore[misc]  # celery ships no type information
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.started = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        super().on_consumer_ready(consumer)
        # The memory transport has no event loop, so Celery runs its blocking loop, which drains
        # the queues 2 s at a time and, once told to stop, drains once more: a stop took 2-4 s,
        # paid by every one-shot `vcm` command of embedded mode. Short drains end it within
        # ~DRAIN_S; an idle drain is a few polls of in-memory queues.
        connection = consumer.connection
        drain = connection.drain_events

        def short_drain(timeout: float | None = None, **kwargs: Any) -> Any:
            return drain(timeout=DRAIN_S if timeout is None else min(timeout, DRAIN_S), **kwargs)

        connection.drain_events = short_drain
        self.started.set()


@contextmanager
def embedded_worker(
    app: Celery,
    *,
    queues: Sequence[str] = routes.QUEUES,
    start_timeout_s: float = 30.0,
    stop_timeout_s: float = 30.0,
) -> Iterator[WorkController]:
    """Run a worker thread for ``app`` (:func:`vcm.workers.build.build` made it) while the block runs."""
    if not str(app.conf.broker_url).startswith("memory://"):
        raise ConfigError(
            f"the in-process worker needs broker_url memory://, not {app.conf.broker_url!r}; "
            "start `celery -A vcm.workers.app worker` processes for a Redis broker",
            setting="broker_url",
        )
    import vcm.workers.tasks  # noqa: F401  (registers the tasks before the app is finalised)

    hostname = f"embedded-{os.getpid()}@{socket.gethostname()}"
    # What `celery worker` does at start: finalise the app and make it the default one, since a
    # task traced in the worker thread looks up the *current* app, which threads do not inherit.
    trace.setup_worker_optimizations(app, hostname)
    worker = _Controller(
        app=app,
        hostname=hostname,
        pool="solo",
        concurrency=1,
        queues=list(queues),
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        loglevel=logging.WARNING,
    )
    thread = threading.Thread(target=worker.start, name="vcm-embedded-worker", daemon=True)
    thread.start()
    if not worker.started.wait(start_timeout_s):
        raise RuntimeError(f"the in-process worker did not start within {start_timeout_s}s")
    try:
        yield worker
    finally:
        # Celery's own loop exit (as celery.contrib.testing does): the consumer stops at its
        # next poll; a running task finishes first.
        worker_state.should_terminate = 0
        thread.join(stop_timeout_s)
        worker_state.should_terminate = None
        trace.reset_worker_optimizations(app)
        if thread.is_alive():
            log.error("the in-process worker did not stop within %ss", stop_timeout_s)


class _StoreScheduler(beat.Scheduler):  # type: ignore[misc]  # celery ships no type information
    """Beat's in-memory scheduler (no schedule file in anyone's working directory), whose entries
    start from the last runs the store recorded rather than from now: a process restarted more
    often than a job's interval (hourly expiry, say) would otherwise never run it. A run recorded
    up to an hour late (idle runs are recorded hourly) only makes the first run come sooner."""

    def setup_schedule(self) -> None:
        super().setup_schedule()
        try:
            from vcm.service.maintenance import last_run
            from vcm.workers import runtime

            store = runtime.deps().store
            now = datetime.now(UTC)
            for name, job in ENTRY_JOBS.items():
                entry = self.schedule.get(name)
                if entry is None:
                    continue
                at = last_run(store, job, now.timestamp()).at
                if at is not None:
                    entry.last_run_at = min(datetime.fromtimestamp(at, tz=UTC), now)
        except Exception as exc:  # the schedule still runs, from now
            log.warning("beat could not read the last maintenance runs (%r); its schedule starts now", exc)


@contextmanager
def embedded_beat(app: Celery, *, stop_timeout_s: float = 10.0) -> Iterator[Any]:
    """Run Celery's beat in a thread for ``app`` (``celery worker -B``'s embedded beat) while the
    block runs: the entries of :func:`vcm.workers.beat.schedule` go to the in-process worker's
    ``maintenance`` queue. The solo worker takes its queues in turn, so a maintenance job delays
    an eviction by at most one job's run, and never runs twice at once."""
    service = beat.EmbeddedService(app, thread=True, scheduler_cls=_StoreScheduler)
    service.start()
    try:
        yield service
    finally:
        service.service.stop()  # its loop wakes at least every second
        service.join(stop_timeout_s)
        if service.is_alive():
            log.error("the in-process beat did not stop within %ss", stop_timeout_s)
