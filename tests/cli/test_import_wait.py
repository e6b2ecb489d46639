"""``vcm import`` in embedded mode waits for the documents it queued again: a job that failed,
was cancelled or is still running at the timeout fails the command with a coded error instead
of reporting success (the ``--api`` path raises through the client's ``wait_for_ingest``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from vcm.cli.portable import _local_job
from vcm.errors import Conflict, StoreUnavailable
from vcm.hotpath.jobs import IngestJob

RUNNING = IngestJob("j1", "ann", "doc", "running", 1.0, 1.0)


class Jobs:
    """What ``_local_job`` reads of the service: the job, as it moves through ``states``."""

    def __init__(self, *states: IngestJob) -> None:
        self.states = list(states)

    def ingest_job(self, agent_id: str, job_id: str) -> IngestJob:
        assert (agent_id, job_id) == ("ann", "j1")
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def test_a_finished_job_ends_the_wait() -> None:
    _local_job(Jobs(RUNNING, replace(RUNNING, status="done")), "ann", "j1", timeout=5)


def test_a_failed_job_raises_its_coded_error() -> None:
    error: dict[str, Any] = {"code": "STORE_UNAVAILABLE", "message": "the store is down"}
    with pytest.raises(StoreUnavailable, match="the store is down"):
        _local_job(Jobs(RUNNING, replace(RUNNING, status="failed", error=error)), "ann", "j1", timeout=5)


def test_a_cancelled_or_unfinished_job_is_a_conflict() -> None:
    with pytest.raises(Conflict):
        _local_job(Jobs(replace(RUNNING, status="cancelled")), "ann", "j1", timeout=5)
    with pytest.raises(Conflict, match="still running"):
        _local_job(Jobs(RUNNING), "ann", "j1", timeout=0.3)
