"""Archival ingestion as a job: the API answers at once with a queued job, the ingest worker's job
runner moves it on, and the façade keeps every entry point's idempotency in one atomic record.
Runs on fakeredis and on the real Redis (the ``redis_client`` fixture)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.conftest import Ingest, api_settings, embed, executor_for, new_agent
from vcm.api.app import create_app
from vcm.dispatch import RecordingDispatcher
from vcm.errors import IdempotencyMismatch, StoreUnavailable, ValidationError
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.store.port import MemoryStore
from vcm.tasks.ingest.jobs import Progress, run_ingest_job
from vcm.types import IngestRequest

DOC = "Falcons nest on cliffs.\n\nOtters hold hands while they sleep."


@pytest.fixture
def queued(hot: HotState, store: MemoryStore) -> tuple[MemoryService, RecordingDispatcher]:
    """A service whose dispatcher only records: jobs wait until the test runs them."""
    dispatcher = RecordingDispatcher()
    return MemoryService(hot, store, dispatcher, embed=embed), dispatcher


def _http(service: MemoryService) -> TestClient:
    return TestClient(create_app(service, executor_for(service), settings=api_settings()), raise_server_exceptions=True)


def test_the_api_answers_with_a_queued_job_and_the_worker_finishes_it(
    queued: tuple[MemoryService, RecordingDispatcher], hot: HotState, store: MemoryStore
) -> None:
    service, dispatcher = queued
    with _http(service) as http:
        me = new_agent(http, "alice")
        r = http.post("/v1/agents/alice/archival", json={"text": DOC, "source": "zoo"}, headers=me)
        assert r.status_code == 202
        job = r.json()
        assert job["status"] == "queued" and job["chunks_done"] == 0 and job["result"] is None
        # Nothing is searchable yet: the request thread did not embed anything.
        assert store.stats("alice")["archival_chunks"] == 0
        (request,) = dispatcher.ingests
        assert request.job_id == job["job_id"] and request.text == DOC and request.actor == "api:agent:alice"

        outcome = run_ingest_job(hot, store, Ingest(store), request, clock=time.time)
        assert outcome.outcome == "done"
        done = http.get(f"/v1/agents/alice/archival/jobs/{job['job_id']}", headers=me).json()
        assert done["status"] == "done" and done["result"]["chunks"] == 2 and done["chunks_total"] == 2
        hits = http.post("/v1/agents/alice/archival/search", json={"query": "otters sleep", "k": 1}, headers=me)
        assert hits.json()["items"][0]["text"] == "Otters hold hands while they sleep."

        def ingest_events() -> list[Any]:
            found = http.get("/v1/agents/alice/events", params={"kinds": "archival_ingest"}, headers=me).json()
            return list(found["items"])

        assert [e["payload"]["job_id"] for e in ingest_events()] == [job["job_id"]]
        # A redelivered task finds the job done and changes nothing.
        assert run_ingest_job(hot, store, Ingest(store), request, clock=time.time).outcome == "already_done"
        assert (
            len(http.get("/v1/agents/alice/events", params={"kinds": "archival_ingest"}, headers=me).json()["items"])
            == 1
        )


def test_the_same_document_is_one_job_queued_once(queued: tuple[MemoryService, RecordingDispatcher]) -> None:
    service, dispatcher = queued
    service.create_agent("alice")
    first = service.ingest_archival("alice", DOC, source="zoo")
    again = service.ingest_archival("alice", DOC, source="zoo")
    assert again.job_id == first.job_id and len(dispatcher.ingests) == 1
    other = service.ingest_archival("alice", DOC, source="elsewhere")  # other source: another document
    assert other.job_id != first.job_id and len(dispatcher.ingests) == 2


def test_a_failed_job_says_why_and_resubmitting_queues_it_again(
    queued: tuple[MemoryService, RecordingDispatcher], hot: HotState, store: MemoryStore
) -> None:
    service, dispatcher = queued
    service.create_agent("alice")

    def refuse(*_: Any, **__: Any) -> Mapping[str, Any]:
        raise ValidationError("document too odd", field="text")

    job = service.ingest_archival("alice", DOC)
    assert run_ingest_job(hot, store, refuse, dispatcher.ingests[0], clock=time.time).outcome == "failed"
    failed = service.ingest_job("alice", job.job_id)
    assert failed.status == "failed" and failed.error == {"code": "VALIDATION_ERROR", "message": "document too odd",
                                                          "field": "text"}  # fmt: skip
    retried = service.ingest_archival("alice", DOC)
    assert retried.job_id == job.job_id and retried.status == "queued" and retried.submissions == 2
    assert len(dispatcher.ingests) == 2
    run_ingest_job(hot, store, Ingest(store), dispatcher.ingests[1], clock=time.time)
    assert service.ingest_job("alice", job.job_id).status == "done"


def test_a_transient_failure_is_raised_for_the_task_to_retry(
    queued: tuple[MemoryService, RecordingDispatcher], hot: HotState, store: MemoryStore
) -> None:
    service, dispatcher = queued
    service.create_agent("alice")
    job = service.ingest_archival("alice", DOC)

    def down(*_: Any, **__: Any) -> Mapping[str, Any]:
        raise StoreUnavailable("store down")

    with pytest.raises(StoreUnavailable):
        run_ingest_job(hot, store, down, dispatcher.ingests[0], clock=time.time)
    assert service.ingest_job("alice", job.job_id).status == "running"  # not failed: the retry may succeed


def test_progress_is_visible_while_the_worker_runs(
    queued: tuple[MemoryService, RecordingDispatcher], hot: HotState, store: MemoryStore
) -> None:
    service, dispatcher = queued
    service.create_agent("alice")
    job = service.ingest_archival("alice", DOC)
    seen: list[tuple[str, int | None, int]] = []

    def watched(agent_id: str, doc_id: str, text: str, *, source: str, metadata: Mapping[str, Any],
                progress: Progress | None = None, incarnation: str | None = None) -> Mapping[str, Any]:  # fmt: skip
        assert progress is not None
        progress(0, 7)
        mid = service.ingest_job("alice", job.job_id)
        seen.append((mid.status, mid.chunks_total, mid.chunks_done))
        return {"chunks": 7, "written": 7}

    run_ingest_job(hot, store, watched, dispatcher.ingests[0], clock=time.time)
    assert seen == [("running", 7, 0)]
    assert service.ingest_job("alice", job.job_id).chunks_done == 7


def test_a_queue_that_refuses_the_document_fails_the_job_and_the_request(hot: HotState, store: MemoryStore) -> None:
    class Down(RecordingDispatcher):
        def ingest(self, request: IngestRequest) -> None:
            raise StoreUnavailable("the ingestion queue is unavailable; retry shortly")

    service = MemoryService(hot, store, Down(), embed=embed)
    service.create_agent("alice")
    with pytest.raises(StoreUnavailable):
        service.ingest_archival("alice", DOC, idempotency_key="k")
    jobs = [k for k in hot.redis.scan_iter("vcm:{alice}:job:*")]
    assert len(jobs) == 1
    # The caller retries with the same key once the queue is back: the job is queued again.
    service.dispatcher = RecordingDispatcher()
    again = service.ingest_archival("alice", DOC, idempotency_key="k")
    assert again.status == "queued" and again.submissions == 2


def test_bad_input_queues_nothing(queued: tuple[MemoryService, RecordingDispatcher], hot: HotState) -> None:
    service, dispatcher = queued
    service.create_agent("alice")
    for kwargs, field in [
        ({"text": ""}, "text"),
        ({"text": DOC, "doc_id": "../etc"}, "doc_id"),
        ({"text": DOC, "metadata": "x"}, "metadata"),
        ({"text": DOC, "idempotency_key": ""}, "idempotency_key"),
    ]:
        with pytest.raises(ValidationError) as err:
            service.ingest_archival("alice", **kwargs)  # type: ignore[arg-type]
        assert err.value.details["field"] == field
    assert dispatcher.ingests == [] and list(hot.redis.scan_iter("vcm:{alice}:job:*")) == []
    with pytest.raises(ValidationError):
        service.ingest_job("alice", "not-a-job")


def _race(n: int, act: Any) -> list[Any]:
    barrier = threading.Barrier(n)
    outcomes: list[Any] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = act(i)
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


@pytest.mark.parametrize("pair", range(5))
def test_concurrent_notes_under_one_key_cannot_both_win(
    queued: tuple[MemoryService, RecordingDispatcher], store: MemoryStore, pair: int
) -> None:
    service, _ = queued
    service.create_agent("alice")
    key = f"note-{pair}"
    outcomes = _race(2, lambda i: service.write_recall("alice", f"text number {i}", idempotency_key=key))
    won = [o for o in outcomes if not isinstance(o, Exception)]
    lost = [o for o in outcomes if isinstance(o, Exception)]
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], IdempotencyMismatch), outcomes
    (stored,) = store.get_messages("alice", [won[0].message_id])
    assert stored.content == won[0].content


def test_concurrent_documents_under_one_key_queue_one_job(queued: tuple[MemoryService, RecordingDispatcher]) -> None:
    service, dispatcher = queued
    service.create_agent("alice")
    outcomes = _race(4, lambda i: service.ingest_archival("alice", f"document {i}", idempotency_key="shared"))
    assert sum(1 for o in outcomes if isinstance(o, IdempotencyMismatch)) == 3, outcomes
    assert len(dispatcher.ingests) == 1


def test_one_key_means_one_thing_across_api_and_tools(queued: tuple[MemoryService, RecordingDispatcher]) -> None:
    # The API and the tool executor share the service's record: a key used for a document through
    # one cannot be reused for another document through the other, and the same document replays.
    service, dispatcher = queued
    with _http(service) as http:
        me = new_agent(http, "alice")
        first = http.post("/v1/agents/alice/archival", json={"text": DOC}, headers={**me, "Idempotency-Key": "k1"})
        assert first.status_code == 202
        tools = executor_for(service)
        assert tools is not None
        replay = tools.execute("alice", "ingest_archival", {"text": DOC, "idempotency_key": "k1",
                                                             "request_heartbeat": False})  # fmt: skip
        assert replay.ok and replay.payload["job_id"] == first.json()["job_id"]
        clash = tools.execute("alice", "ingest_archival", {"text": "another", "idempotency_key": "k1",
                                                           "request_heartbeat": False})  # fmt: skip
        assert not clash.ok and clash.payload["error"]["code"] == "IDEMPOTENCY_MISMATCH"
    assert len(dispatcher.ingests) == 1
