"""The workers' metrics endpoint and multi-process setup. The families themselves (dead letters,
sweeper re-drives, dispatch failures and the cold path's evictions, drift and store errors) are
defined with all of vcm's in :mod:`vcm.obs.metrics`; per-task rates, runtimes and worker liveness
come from Flower's ``/metrics`` (built from task events).

Multi-process: prefork children each count in their own memory. Set ``PROMETHEUS_MULTIPROC_DIR``
(an empty directory, wiped at worker start) in the worker's environment so that the parent's
endpoint (``[worker] metrics_port``) sums all children; with ``-P solo`` or ``threads`` one
process counts everything and no directory is needed. Gauges carry their aggregation mode where
they are defined.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import multiprocess as prom_multiprocess
from prometheus_client import start_http_server

from vcm.obs import metrics
from vcm.obs.metrics import DEAD_LETTERS, DISPATCH_FAILURES, MULTIPROC_ENV, REDRIVEN, RESPOOLED
from vcm.workers import names

log = logging.getLogger(__name__)

for _task in (names.EVICT, names.SPOOL):
    DEAD_LETTERS.labels(task=_task)


def observe(task_name: str, retval: Any) -> None:
    """Count a finished task by the outcome it returned (see vcm.workers.tasks)."""
    if not isinstance(retval, dict):
        return
    outcome = retval.get("outcome")
    if outcome == "dead_lettered":
        DEAD_LETTERS.labels(task=task_name).inc()
    # A sweep's re-drives and re-spools are counted by the job itself (vcm.tasks.maintenance.run),
    # whoever ran it: beat's task or a run-now.


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
    server, _ = start_http_server(port, addr=addr, registry=metrics.registry())
    log.info("vcm worker metrics on %s:%s/metrics", addr, port)
    return server


__all__ = ["DEAD_LETTERS", "DISPATCH_FAILURES", "MULTIPROC_ENV", "REDRIVEN", "RESPOOLED", "observe", "serve"]
