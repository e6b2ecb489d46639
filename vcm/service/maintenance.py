"""The periodic maintenance jobs through the façade: run one now (``vcm maintenance run``,
``POST /v1/maintenance/{job}``) and read when each last ran (``vcm doctor``).

What a job does is the cold path's (:mod:`vcm.tasks.maintenance`), which the service may not
import: a process entry point wires a :class:`MaintenanceJobs` in (``vcm.workers.maintenance``).
The last runs are read from the store's audit rows (kind ``maintenance``, agent ``*``, actor
``worker:<job>``), which every process of a deployment can read: in embedded mode a separate
``vcm doctor`` shares nothing with the server but the store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vcm.errors import ConfigError, ValidationError
from vcm.obs import audit
from vcm.service.core import Core
from vcm.store.audit_names import EventKind
from vcm.store.port import MemoryStore
from vcm.store.types import MemoryEvent
from vcm.types import MaintenanceJob

# A scheduled run that changed nothing is recorded at most this often per job (see
# vcm.tasks.maintenance.record_run): a last run is therefore known to within this, and looked
# for first in a window a little wider.
IDLE_RECORD_S = 3600.0
JOB_NAMES: tuple[str, ...] = tuple(str(j) for j in MaintenanceJob)


class MaintenanceJobs(Protocol):
    def run(self, job: MaintenanceJob) -> Mapping[str, Any]:
        """Run the job here and now, record its run, and return its outcome."""
        ...


@dataclass(frozen=True)
class LastRun:
    job: str
    at: float | None  # None: no run recorded
    outcome: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "at": self.at, "outcome": dict(self.outcome)}


def job_named(name: str) -> MaintenanceJob:
    try:
        return MaintenanceJob(name)
    except ValueError:
        raise ValidationError(
            f"unknown maintenance job {name!r}; the jobs are {', '.join(JOB_NAMES)}", field="job", jobs=list(JOB_NAMES)
        ) from None


def last_run(store: MemoryStore, job: MaintenanceJob, now: float) -> LastRun:
    """The newest recorded run of ``job``. Rows come oldest first, so look in a recent window
    first (where a job that runs at all has a row) and widen only when it holds none."""
    for window in (2 * IDLE_RECORD_S, 8 * 86400.0, None):
        since = None if window is None else now - window
        found: MemoryEvent | None = None
        cursor: str | None = None
        while True:
            page = store.query_events(
                audit.ALL_AGENTS,
                [EventKind.MAINTENANCE],
                since=since,
                actor=audit.worker(str(job)),
                limit=1000,
                cursor=cursor,
            )
            if page.items:
                found = page.items[-1]
            cursor = page.next_cursor
            if not cursor:
                break
        if found is not None:
            outcome = {k: v for k, v in found.payload.items() if k not in ("job", "footprint")}
            return LastRun(str(job), found.created_at, outcome)
    return LastRun(str(job), None, {})


def last_runs(store: MemoryStore, now: float) -> list[LastRun]:
    return [last_run(store, job, now) for job in MaintenanceJob]


class Maintenance:
    """run_maintenance, maintenance_runs."""

    def __init__(self, core: Core, jobs: MaintenanceJobs | None) -> None:
        self.core = core
        self.jobs = jobs

    def run_maintenance(self, job: str | None = None) -> dict[str, dict[str, Any]]:
        """Run one job now (every job, in catalogue order, when ``job`` is None) and answer each
        one's outcome by name. An unknown name is refused before anything runs."""
        chosen = list(MaintenanceJob) if job is None else [job_named(job)]
        jobs = self._jobs()
        return {str(j): dict(jobs.run(j)) for j in chosen}

    def maintenance_runs(self) -> list[LastRun]:
        """When each job last ran, from the store's audit rows."""
        return last_runs(self.core.store, self.core.clock())

    def _jobs(self) -> MaintenanceJobs:
        if self.jobs is None:
            raise ConfigError(
                "this process was wired without maintenance jobs (vcm.workers.maintenance)", setting="maintenance"
            )
        return self.jobs
