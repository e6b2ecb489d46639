"""Worker process lifecycle: per-process resources, warm-up, metrics.

Nothing heavy happens before a fork: torch and the SQLite store are built in the process that
runs tasks (docs/reference/celery.md pitfall "Torch model in prefork parent"). The embedder is warmed in a
background thread, so a prefork child answers the parent within ``worker_proc_alive_timeout``
(4 s) although loading the model takes ~10 s; the first task simply waits for it.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery.concurrency.prefork import TaskPool as PreforkPool
from celery.exceptions import Reject
from celery.signals import (
    celeryd_init,
    task_failure,
    task_postrun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
)

from vcm.workers import metrics, names, runtime

log = logging.getLogger(__name__)

WARM_MESSAGE = "vcm worker warm"


def _on_celeryd_init(**_: Any) -> None:
    metrics.wipe_multiprocess_dir()


def _on_worker_init(**_: Any) -> None:
    # Several worker processes share the cores: one torch thread each unless configured.
    runtime.configure(embed_threads=1)


def _on_child_start(**_: Any) -> None:
    _warm_in_background()


def _on_ready(sender: Any = None, **_: Any) -> None:
    if not isinstance(getattr(sender, "pool", None), PreforkPool):
        _warm_in_background()  # solo/threads pools run tasks in this process
    port = runtime.settings().worker.metrics_port
    if port:
        metrics.serve(port)


def _on_child_exit(pid: int | None = None, **_: Any) -> None:
    metrics.process_exited(pid or os.getpid())


def _on_task_done(task: Any = None, retval: Any = None, **_: Any) -> None:
    if task is not None:
        metrics.observe(task.name, retval)


def _on_task_failure(
    sender: Any = None, task_id: str | None = None, exception: BaseException | None = None, args: Any = None, **_: Any
) -> None:
    """vcm tasks never raise (they retry or dead-letter themselves), so a failure here is a process
    that died on the task's last attempt (pool child killed, hard time limit). Count it as a dead
    letter; an eviction's event is recorded by a worker that has the store."""
    name = getattr(sender, "name", "")
    if name not in names.RETRIED:
        return
    if isinstance(exception, Reject) and exception.requeue:  # handed back to the queue: not given up
        log.warning("%s[%s] requeued: %s", name, task_id, exception.reason)
        return
    metrics.DEAD_LETTERS.labels(task=name).inc()
    reason = f"{type(exception).__name__}: {exception}"
    log.error("%s[%s] given up: %s", name, task_id, reason)
    if name == names.EVICT and isinstance(args, list | tuple) and len(args) == 2:
        attempts = int(getattr(getattr(sender, "request", None), "retries", 0) or 0) + 1
        try:
            sender.app.send_task(names.DEAD_LETTER, args=[args[0], int(args[1]), reason, attempts, task_id or "-"])
        except Exception as exc:  # the batch is still in Redis; the sweeper re-drives it
            log.error("could not send the dead letter of %s: %r", args, exc)


def _warm_in_background() -> None:
    threading.Thread(target=_warm, name="vcm-warm", daemon=True).start()


def _warm() -> None:
    try:
        deps = runtime.deps()
        warm = getattr(deps.embed, "warm", None)
        if deps.settings.worker.preload_embedder and warm is not None:
            warm()
        log.warning("%s (pid %s)", WARM_MESSAGE, os.getpid())
    except Exception:  # the first task will meet (and retry) the same problem
        log.exception("warming the worker failed")


def connect() -> None:
    """Connect vcm's handlers to Celery's signals (process-wide; connecting again is a no-op)."""
    celeryd_init.connect(_on_celeryd_init, weak=False, dispatch_uid="vcm_on_celeryd_init")
    worker_init.connect(_on_worker_init, weak=False, dispatch_uid="vcm_on_worker_init")
    worker_process_init.connect(_on_child_start, weak=False, dispatch_uid="vcm_on_child_start")
    worker_ready.connect(_on_ready, weak=False, dispatch_uid="vcm_on_ready")
    worker_process_shutdown.connect(_on_child_exit, weak=False, dispatch_uid="vcm_on_child_exit")
    task_postrun.connect(_on_task_done, weak=False, dispatch_uid="vcm_on_task_done")
    task_failure.connect(_on_task_failure, weak=False, dispatch_uid="vcm_on_task_failure")
