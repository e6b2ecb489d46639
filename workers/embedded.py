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
from typing import Any

from celery import Celery
from celery.app import trace
from celery.worker import WorkController
from celery.worker import state as worker_state

from vcm.errors import ConfigError
from vcm.workers import routes

log = logging.getLogger(__name__)


class _Controller(WorkController):  # type: ignore[misc]  # celery ships no type information
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.started = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        super().on_consumer_ready(consumer)
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
