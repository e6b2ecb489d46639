"""Periodic maintenance (:mod:`vcm.api.routes.maintenance`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from vcm.api.models.common import RequestBody


class MaintenanceRunIn(RequestBody):
    """A run takes no parameters: the job runs on the server's settings (an empty object, or
    no body)."""


class MaintenanceRunOut(BaseModel):
    job: str
    outcome: dict[str, Any]  # the job's: e.g. expire's messages/snapshots/state/facts counts


class MaintenanceLastRun(BaseModel):
    job: str
    at: float | None  # unix seconds of the newest recorded run; None: none recorded
    outcome: dict[str, Any]


class MaintenanceRuns(BaseModel):
    jobs: list[MaintenanceLastRun]
