"""vcm's own worker metrics (Prometheus, ``vcm_`` prefix). Per-task rates, runtimes and worker
liveness come from Flower's ``/metrics`` (built from task events); these count what events
cannot tell: dead letters, redriven batches, failed dispatches.

Multi-process: prefork children each count in their own memory. Set ``PROMETHEUS_MULTIPROC_DIR``
(an empty directory, wiped at worker start) in the worker's environment so that the parent's
endpoint (``[worker] metrics_port``) sums all children; with ``-P solo`` or ``threads`` one
process counts everything and no directory is needed. Counters only, so no gauge aggregation
mode is involved.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, start_http_server
from prometheus_client import multiprocess as prom_multiprocess

from tasks import names

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

DEAD_LETTERS = Counter(
    "vcm_dead_letters", "Task runs given up after their retries or delivery cap (batches stay in Redis)", ["task"]
)
REDRIVEN = Counter("vcm_sweeper_redriven_batches", "Eviction batches the sweeper dispatched again")
RESPOOLED = Counter("vcm_sweeper_respooled_messages", "Messages the sweeper spooled that the write-behind missed")
DISPATCH_FAILURES = Counter(
    "vcm_dispatch_failures", "Hot-path dispatches the broker refused (the sweeper catches up)", ["kind"]
)
for _task in (names.EVICT, names.SPOOL):
    DEAD_LETTERS.labels(task=_task)
for _kind in ("evict", "spool"):
    DISPATCH_FAILURES.labels(kind=_kind)


def observe(task_name: str, retval: Any) -> None:
    """Count a finished task by the outcome it returned (see tasks.celery_tasks)."""
    if not isinstance(retval, dict):
        return
    outcome = retval.get("outcome")
    if outcome == "dead_lettered":
        DEAD_LETTERS.labels(task=task_name).inc()
    elif outcome == "swept":
        REDRIVEN.inc(int(retval.get("redriven", 0)))
        RESPOOLED.inc(int(retval.get("respooled", 0)))


def wipe_multiprocess_dir() -> None:
    """At worker start: files of a previous run would add stale counts."""
    directory = os.environ.get(MULTIPROC_ENV)
    if not directory:
        return
    path = Path(directory)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)


def process_exited(pid: int) -> None:
    if os.environ.get(MULTIPROC_ENV):
        prom_multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def serve(port: int, addr: str = "0.0.0.0") -> WSGIServer:
    """Expose /metrics on ``port`` (all children summed in multiprocess mode); returns the server."""
    registry: CollectorRegistry = REGISTRY
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        prom_multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    server, _ = start_http_server(port, addr=addr, registry=registry)
    log.info("vcm worker metrics on %s:%s/metrics", addr, port)
    return server
