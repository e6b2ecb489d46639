"""Over HTTP (issue 28, items 3 and 6): a message forgotten after a snapshot stays out of recall
when the snapshot is restored, and an ingestion job's record answers after a reset and a restore.
fakeredis and the embedded store; the ingest worker's job runner is called by hand."""

from __future__ import annotations

import time

import fakeredis
from fastapi.testclient import TestClient

from tests.api.conftest import Ingest, api_settings, embed, new_agent
from vcm.api.app import create_app
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.store.port import MemoryStore
from vcm.tasks.ingest.jobs import run_ingest_job


def _service(store: MemoryStore) -> tuple[MemoryService, RecordingDispatcher]:
    dispatcher = RecordingDispatcher()
    hot = HotState(fakeredis.FakeRedis(decode_responses=True), api_settings())
    return MemoryService(hot, store, dispatcher, embed=embed), dispatcher


def test_a_restored_snapshot_keeps_a_forgotten_message_out_of_recall(store: MemoryStore) -> None:
    service, _ = _service(store)
    with TestClient(create_app(service, None, settings=api_settings())) as http:
        me = new_agent(http, "alice")
        said = http.post(
            "/v1/agents/alice/messages", json={"role": "user", "content": "The heron sleeps in the attic."}, headers=me
        )
        assert said.status_code == 200, said.text
        heron = said.json()["message_id"]
        snap = http.post("/v1/agents/alice/snapshots", json={}, headers=me).json()
        assert http.post("/v1/agents/alice/reset", headers=me).status_code == 200
        assert http.delete(f"/v1/agents/alice/messages/{heron}", headers=me).status_code == 200
        assert http.post(f"/v1/agents/alice/snapshots/{snap['snapshot_id']}/restore", headers=me).status_code == 200
        for mode in ("text", "hybrid"):
            found = http.get("/v1/agents/alice/recall", params={"query": "heron attic", "mode": mode}, headers=me)
            assert found.status_code == 200 and found.json()["items"] == [], found.text
        assert "heron" not in http.get("/v1/agents/alice/context", headers=me).text


def test_reset_and_restore_keep_the_ingestion_job(store: MemoryStore) -> None:
    service, dispatcher = _service(store)
    with TestClient(create_app(service, None, settings=api_settings())) as http:
        me = new_agent(http, "alice")
        job = http.post("/v1/agents/alice/archival", json={"text": "Falcons nest on cliffs."}, headers=me).json()
        assert (
            run_ingest_job(service.hot, store, Ingest(store), dispatcher.ingests[0], clock=time.time).outcome == "done"
        )
        snap = http.post("/v1/agents/alice/snapshots", json={}, headers=me).json()
        assert http.post("/v1/agents/alice/reset", headers=me).status_code == 200
        assert http.post(f"/v1/agents/alice/snapshots/{snap['snapshot_id']}/restore", headers=me).status_code == 200
        kept = http.get(f"/v1/agents/alice/archival/jobs/{job['job_id']}", headers=me)
        assert kept.status_code == 200, kept.text
        assert kept.json()["status"] == "done" and kept.json()["result"]["chunks"] == 1
