"""The maintenance jobs (vcm.tasks.maintenance.JOBS): what expiry removes and records, how runs are
recorded (bounded), the run-now path through the façade, and the doctor's last-run lines."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doubles.coldpath import MODEL, appended_ids, converse, make_deps, small_settings
from vcm.cli.doctor import maintenance_checks
from vcm.errors import NotFound, ValidationError
from vcm.service import MemoryService
from vcm.service.maintenance import last_run
from vcm.store.types import IdempotencyRecord
from vcm.tasks import maintenance
from vcm.tasks.deps import Deps
from vcm.tasks.spool import spool_messages
from vcm.types import MaintenanceJob
from vcm.workers.maintenance import LocalMaintenanceJobs

AGENT = "agent-m"
SETTINGS = {"maintenance": {"recall_ttl_s": 60}, "durability": {"snapshot_ttl_s": 60}}


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Deps]:
    d = make_deps(tmp_path, settings=small_settings(**SETTINGS))
    yield d
    d.store.close()


def service_of(d: Deps) -> MemoryService:
    return MemoryService(d.hot, d.store, d.dispatcher, maintenance=LocalMaintenanceJobs(lambda: d))


def seeded(d: Deps) -> MemoryService:
    """An agent with stored messages, a fact, a state key and a snapshot, all living 60 s."""
    svc = service_of(d)
    svc.create_agent(AGENT, model=MODEL)
    ids = appended_ids(converse(d.hot, AGENT, 3))
    spool_messages(d.hot, d.store, AGENT, ids, ttl_s=60)
    svc.remember(AGENT, "the launch moved to May", type="goal", ttl_s=60)
    svc.set_state(AGENT, "step", 2, ttl_s=60)
    svc.create_snapshot(AGENT)
    return svc


def test_expire_removes_each_kind_records_it_and_a_second_run_finds_nothing(deps: Deps) -> None:
    svc = seeded(deps)
    deps.clock = lambda: time.time() + 120
    outcome = svc.run_maintenance("expire")["expire"]
    assert outcome == {"outcome": "expired", "messages": 3, "snapshots": 1, "state": 1, "facts": 1, "idempotency": 0}
    assert deps.store.count_messages(AGENT) == 0
    with pytest.raises(NotFound):  # deleted: not merely past its time (0.0 is long before it)
        deps.store.get_state(AGENT, "step", 0.0)
    (row,) = deps.store.query_events("*", ["expire"]).items
    assert {k: row.payload[k] for k in ("messages", "snapshots", "state", "facts")} == {
        "messages": 3,
        "snapshots": 1,
        "state": 1,
        "facts": 1,
    }
    assert svc.run_maintenance("expire")["expire"]["messages"] == 0
    runs = deps.store.query_events("*", ["maintenance"]).items
    assert [r.payload["trigger"] for r in runs] == ["now", "now"]  # asked for: always recorded
    assert last_run(deps.store, MaintenanceJob.EXPIRE, time.time() + 200).outcome["messages"] == 0


def test_an_unknown_job_is_refused_naming_the_jobs_and_nothing_runs(deps: Deps) -> None:
    svc = seeded(deps)
    deps.clock = lambda: time.time() + 120
    with pytest.raises(ValidationError) as refused:
        svc.run_maintenance("vacuum")
    assert "expire, sweep, consolidate, snapshot" in refused.value.message
    assert refused.value.details["jobs"] == ["expire", "sweep", "consolidate", "snapshot"]
    assert deps.store.count_messages(AGENT) == 3
    assert deps.store.query_events("*", ["maintenance", "expire"]).items == []


def test_every_job_runs_now_and_says_what_it_did(deps: Deps) -> None:
    svc = seeded(deps)
    outcomes = svc.run_maintenance()
    assert list(outcomes) == ["expire", "sweep", "consolidate", "snapshot"]
    assert outcomes["snapshot"] == {"outcome": "snapshots", "taken": 1}
    assert outcomes["sweep"]["outcome"] == "swept"
    assert outcomes["consolidate"]["outcome"] == "consolidated"
    assert {r.job for r in svc.maintenance_runs() if r.at is not None} == set(outcomes)


def test_scheduled_runs_that_did_nothing_are_recorded_once_an_hour(deps: Deps) -> None:
    now = 1_000_000.0
    deps.clock = lambda: now
    for _ in range(3):
        maintenance.run(deps, MaintenanceJob.SWEEP)
    assert len(deps.store.query_events("*", ["maintenance"]).items) == 1
    now += maintenance.IDLE_RECORD_S + 1
    maintenance.run(deps, MaintenanceJob.SWEEP)
    assert len(deps.store.query_events("*", ["maintenance"]).items) == 2
    # A run that did something always has its row.
    assert maintenance.record_run(
        deps, MaintenanceJob.SWEEP, {"outcome": "swept", "respooled": 2}, started=now, trigger="beat"
    )


def test_the_doctor_says_when_each_job_last_ran(deps: Deps, tmp_path: Path) -> None:
    svc = seeded(deps)
    svc.run_maintenance("snapshot")
    settings = deps.settings.model_copy(update={"store_url": f"sqlite:///{tmp_path / 'vcm.db'}"})
    lines = {name: (ok, detail) for name, ok, detail in maintenance_checks(settings)}
    assert set(lines) == {f"maintenance {j}" for j in ("expire", "sweep", "consolidate", "snapshot")}
    ok, detail = lines["maintenance snapshot"]
    assert ok and detail.startswith("last ran ") and "taken=1" in detail and "now" in detail
    assert lines["maintenance expire"] == (True, "no run recorded (every 3600s)")
    assert lines["maintenance sweep"] == (True, "no run recorded (every 60s)")


def test_expire_sweeps_idempotency_records_past_their_ttl(deps: Deps) -> None:
    svc = seeded(deps)
    now = time.time()
    deps.store.put_idempotency(
        [
            IdempotencyRecord(AGENT, "old-key", "fp", '{"message_id": "m1"}', now + 60),
            IdempotencyRecord(AGENT, "live-key", "fp", '{"message_id": "m2"}', now + 3600),
        ]
    )
    deps.clock = lambda: now + 120
    assert svc.run_maintenance("expire")["expire"]["idempotency"] == 1
    assert [r.key for r in deps.store.list_idempotency(AGENT)] == ["live-key"]
