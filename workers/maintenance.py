"""The maintenance jobs a process runs now, through the façade
(:class:`vcm.service.maintenance.MaintenanceJobs`): ``vcm maintenance run`` and
``POST /v1/maintenance/{job}``. They run the job functions beat's tasks run
(:data:`vcm.tasks.maintenance.JOBS`), in the calling thread, so the caller gets the outcome; the
composition root (:mod:`vcm.workers.wiring`) hands this in."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from vcm.tasks import maintenance
from vcm.tasks.deps import Deps
from vcm.types import MaintenanceJob


class LocalMaintenanceJobs:
    """Runs a job here, on this process's dependencies (its hot state, store and dispatcher)."""

    def __init__(self, deps: Callable[[], Deps]) -> None:
        self._deps = deps
        # One run-now at a time in a process: two operators asking for the same sweep would only
        # do the work twice.
        self._lock = threading.Lock()

    def run(self, job: MaintenanceJob) -> dict[str, Any]:
        with self._lock:
            return maintenance.run(self._deps(), job, trigger="now")
