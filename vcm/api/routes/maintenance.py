"""Periodic maintenance, the admin's: run one job now, and when each last ran. The jobs are the
ones beat runs on its schedule (:class:`vcm.types.MaintenanceJob`).

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Path, Request

from vcm.api.deps import Admin, ServiceDep
from vcm.api.models import ERROR_RESPONSES, WRITE_ERROR_RESPONSES
from vcm.api.models.maintenance import MaintenanceLastRun, MaintenanceRunIn, MaintenanceRunOut, MaintenanceRuns
from vcm.errors import ValidationError

router = APIRouter(prefix="/v1/maintenance", tags=["admin"])


def no_query(request: Request) -> None:
    """These routes take no query parameters: a misspelt one is refused, not ignored."""
    for name in request.query_params:
        raise ValidationError(f"unknown query parameter {name!r}", field=name)


NoQuery = Annotated[None, Depends(no_query)]


@router.post("/{job}", response_model=MaintenanceRunOut, responses=WRITE_ERROR_RESPONSES)
def run_job(
    job: Annotated[str, Path(max_length=64, description="expire, sweep, consolidate or snapshot")],
    who: Admin,
    service: ServiceDep,
    _q: NoQuery,
    body: Annotated[MaintenanceRunIn | None, Body()] = None,
) -> MaintenanceRunOut:
    """Run one maintenance job now, on the server, and answer what it did. An unknown job:
    VALIDATION_ERROR naming the jobs, with nothing run."""
    outcomes = service.run_maintenance(job)
    name, outcome = next(iter(outcomes.items()))
    return MaintenanceRunOut(job=name, outcome=outcome)


@router.get("", response_model=MaintenanceRuns, responses=ERROR_RESPONSES)
def last_runs(who: Admin, service: ServiceDep, _q: NoQuery) -> MaintenanceRuns:
    """When each job last ran (from the audit log: every run that did something, and at least
    one row an hour per job that runs)."""
    return MaintenanceRuns(jobs=[MaintenanceLastRun(**r.as_dict()) for r in service.maintenance_runs()])
