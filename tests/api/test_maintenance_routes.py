"""POST /v1/maintenance/{job} and GET /v1/maintenance: the admin's, through the façade's
maintenance part (wired here as the composition root wires it)."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, embed, new_agent
from tests.doubles.dispatcher import InlineDispatcher
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.store.port import MemoryStore
from vcm.tasks.deps import Deps
from vcm.tasks.summary.recursive import extractive
from vcm.workers.maintenance import LocalMaintenanceJobs


@pytest.fixture
def service(hot: HotState, store: MemoryStore, dispatcher: InlineDispatcher) -> MemoryService:
    # The jobs' clock runs a minute ahead, so what lives 1 s has expired when they run.
    deps = Deps(
        settings=hot.settings,
        hot=hot,
        store=store,
        dispatcher=dispatcher,
        embed=embed,
        summarizer=extractive,
        clock=lambda: time.time() + 60,
    )
    return MemoryService(hot, store, dispatcher, embed=embed, maintenance=LocalMaintenanceJobs(lambda: deps))


def test_a_job_runs_now_for_the_admin_and_says_what_it_did(client: TestClient, service: MemoryService) -> None:
    agent = new_agent(client, "maint-a")
    assert client.put("/v1/agents/maint-a/state/step", json={"value": 1, "ttl_s": 1}, headers=agent).status_code < 300
    assert client.post("/v1/maintenance/expire", headers=agent).status_code == 401  # an agent's token: admin only
    r = client.post("/v1/maintenance/expire", headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "job": "expire",
        "outcome": {"outcome": "expired", "messages": 0, "snapshots": 0, "state": 1, "facts": 0, "idempotency": 0},
    }
    runs = {j["job"]: j for j in client.get("/v1/maintenance", headers=ADMIN).json()["jobs"]}
    assert runs["expire"]["outcome"]["state"] == 1 and runs["expire"]["at"] is not None
    assert runs["sweep"]["at"] is None


def test_a_bad_job_or_parameter_is_refused_and_nothing_runs(client: TestClient, service: MemoryService) -> None:
    agent = new_agent(client, "maint-b")
    client.put("/v1/agents/maint-b/state/step", json={"value": 1, "ttl_s": 1}, headers=agent)
    r = client.post("/v1/maintenance/vacuum", headers=ADMIN)
    error = r.json()["error"]
    assert r.status_code == 422 and error["code"] == "VALIDATION_ERROR"
    assert "expire, sweep, consolidate, snapshot" in error["message"]
    r = client.post("/v1/maintenance/expire", params={"dry_run": "1"}, headers=ADMIN)
    assert r.status_code == 422 and "dry_run" in r.text
    r = client.post("/v1/maintenance/expire", json={"force": True}, headers=ADMIN)
    assert r.status_code == 422 and "force" in r.text
    assert service.store.query_events("*", ["maintenance", "expire"]).items == []
    assert client.post("/v1/maintenance/expire", json={}, headers=ADMIN).status_code == 200
