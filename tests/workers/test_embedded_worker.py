"""The real Celery worker in a thread over memory:// (embedded mode): retries with backoff,
dead-lettering, the delivery cap and the sweeper, end to end through CeleryDispatcher.

Hot state is fakeredis and the store a SQLite file, as in embedded mode; the embedder is the
word-hash stand-in (the subprocess tests use the real model).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.signals import task_postrun
from prometheus_client import REGISTRY

from tests.doubles.coldpath import MODEL, create_agent, make_deps, small_settings
from tests.doubles.embedder import WordVectorizer, word_embed
from tests.workers.traffic import Traffic, assert_exactly_once, settled, wait_until
from vcm.settings import Settings
from vcm.tasks.deps import Deps
from vcm.tasks.faults import Faults, Rule
from vcm.workers import names, runtime
from vcm.workers.build import build
from vcm.workers.dispatch import BackgroundDispatcher, CeleryDispatcher
from vcm.workers.embedded import embedded_worker

pytestmark = pytest.mark.timeout(120)


def fast_settings(tmp_path: Path) -> Settings:
    return small_settings(
        broker_url="memory://",
        store_url=f"sqlite:///{tmp_path / 'vcm.db'}",
        worker={"max_retries": 3, "retry_backoff_s": 0.05, "retry_backoff_max_s": 1, "max_deliveries": 2},
        maintenance={"sweep_grace_s": 0.3, "redrive_dead_letters_after_s": 0},
    )


@dataclass
class Cold:
    app: Celery
    deps: Deps
    dispatcher: CeleryDispatcher

    def traffic(self, prefix: str = "a") -> Traffic:
        agent = f"{prefix}-{uuid.uuid4().hex[:8]}"
        create_agent(self.deps.hot, self.deps.store, agent, model=MODEL, system_prompt="You are a careful assistant.")
        return Traffic(self.deps.hot, self.dispatcher, agent)

    def drain(self, t: Traffic, timeout_s: float = 60) -> None:
        wait_until(lambda: settled(self.deps.hot, self.deps.store, t.agent_id, t.message_ids), timeout_s, "drained")


def start(tmp_path: Path, faults: Faults, deliveries: runtime.DeliveryLog | None = None) -> Iterator[Cold]:
    settings = fast_settings(tmp_path)
    app = build(settings).app
    dispatcher = CeleryDispatcher(app)
    deps = make_deps(tmp_path, settings=settings, faults=faults, dispatcher=dispatcher, vectorizer=WordVectorizer())
    runtime.install(deps, deliveries or runtime.LocalDeliveryLog())
    try:
        with embedded_worker(app):
            yield Cold(app, deps, dispatcher)
    finally:
        runtime.reset()


POINTS = [
    "evict.before_summarize",
    "evict.after_summarize",
    "commit_eviction.after_recall_append",
    "commit_eviction.before_commit",
    "evict.after_commit",
]
# One worker serves every test of the module; rules apply to agents by id prefix.
RULES = [
    *(Rule(point, agent_prefix=f"f{i}-", times=2) for i, point in enumerate(POINTS)),
    Rule("spool.before_write", agent_prefix="f", times=1),
    Rule("spool.before_embed", agent_prefix="v-", times=1),
    Rule("evict.before_summarize", agent_prefix="doomed-"),
    Rule("evict.before_summarize", agent_prefix="p-", action="sleep"),  # counts calls only
]


class SwitchLog(runtime.LocalDeliveryLog):
    """Counts deliveries, or reports each as the 99th while ``poisoned``."""

    poisoned = False

    def record(self, task_id: str, attempt: int) -> int:
        return 99 if self.poisoned else super().record(task_id, attempt)


SWITCH = SwitchLog()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cold]:
    yield from start(tmp_path_factory.mktemp("cold"), Faults(RULES), SWITCH)


@pytest.fixture
def cold(shared: Cold) -> Cold:
    return shared


def dead_letters(task: str) -> float:
    return REGISTRY.get_sample_value("vcm_dead_letters_total", {"task": task}) or 0.0


def test_conversation_is_committed_exactly_once(cold: Cold) -> None:
    t = cold.traffic()
    t.send(60)
    cold.drain(t)
    assert_exactly_once(cold.deps.hot, cold.deps.store, t.agent_id, t.message_ids)


def test_the_apis_background_publisher_spools_agents_together_exactly_once(cold: Cold) -> None:
    # The API's dispatcher (vcm.workers.wiring.build_service): one spool_agents task per round for
    # every agent that appended; an agent whose spool fails ("f" agents fail their first spool
    # write) is handed to a spool task of its own and retried there.
    ran: list[str] = []

    def record(sender: Any = None, **_: Any) -> None:
        ran.append(sender.name)

    task_postrun.connect(record, weak=False)
    publisher = BackgroundDispatcher(cold.dispatcher, linger_s=0.05)
    try:
        ok, failing = cold.traffic("bg"), cold.traffic("fbg")
        ok.dispatcher = failing.dispatcher = publisher
        for _ in range(40):
            ok.send(1)
            failing.send(1)
        assert publisher.flush(10)
        cold.drain(ok)
        cold.drain(failing)
    finally:
        task_postrun.disconnect(record)
        publisher.close()
    for t in (ok, failing):
        assert_exactly_once(cold.deps.hot, cold.deps.store, t.agent_id, t.message_ids)
    assert cold.deps.faults.fired("spool.before_write", failing.agent_id) == 1
    assert names.SPOOL_MANY in ran and names.SPOOL in ran  # the hand-over
    assert ran.count(names.SPOOL_MANY) < 40  # coalesced: 80 appends, far fewer tasks


@pytest.mark.parametrize("point", POINTS)
def test_failures_at_each_step_are_retried_to_the_same_end_state(cold: Cold, point: str) -> None:
    t = cold.traffic(f"f{POINTS.index(point)}")
    t.send(40)
    cold.drain(t)
    faults = cold.deps.faults
    assert faults.fired(point, t.agent_id) == 2  # two failed deliveries, then the retry won
    assert faults.fired("spool.before_write", t.agent_id) == 1
    assert_exactly_once(cold.deps.hot, cold.deps.store, t.agent_id, t.message_ids)
    assert cold.deps.store.query_events(t.agent_id, ["dead_letter"]).items == []


def test_spooled_messages_are_embedded_and_a_failed_embedding_is_retried(cold: Cold) -> None:
    t = cold.traffic("v")
    t.send(6)  # fits the window: every message stays in Redis for the retry
    store = cold.deps.store
    query = [float(x) for x in word_embed([t.message_ids[0]])[0]]

    def embedded() -> set[str]:
        page = store.search_recall_hybrid(t.agent_id, "x", query, mode="vector", limit=100)
        return {h.message.message_id for h in page.items}

    wait_until(lambda: embedded() == set(t.message_ids), 30, "every message embedded")
    assert cold.deps.faults.fired("spool.before_embed", t.agent_id) == 1  # failed once, after the write
    assert store.count_messages(t.agent_id) == len(t.message_ids)


def test_exhausted_retries_dead_letter_the_batch_and_keep_it(cold: Cold) -> None:
    before = dead_letters(names.EVICT)
    t = cold.traffic("doomed")
    t.send(30)
    store, hot = cold.deps.store, cold.deps.hot
    wait_until(lambda: bool(store.query_events(t.agent_id, ["dead_letter"]).items), 30, "dead-lettered")
    [event] = store.query_events(t.agent_id, ["dead_letter"]).items
    assert event.payload["batch_id"] == 1 and event.payload["attempts"] == 4  # 1 + max_retries
    assert "InjectedFailure" in str(event.payload["reason"])
    assert dead_letters(names.EVICT) == before + 1
    assert hot.pending_batches(t.agent_id)[0] == 1  # never dropped
    assert store.committed_batches(t.agent_id) == []  # and nothing committed out of order
    assert cold.deps.faults.fired("evict.before_summarize", t.agent_id) == 4
    # write-behind still covers the messages not in a batch
    fifo = [m.id for m in hot.snapshot(t.agent_id).fifo]
    wait_until(lambda: len(store.get_messages(t.agent_id, fifo)) == len(fifo), 30, "FIFO spooled")


def test_the_delivery_cap_dead_letters_without_running_the_task(cold: Cold) -> None:
    t = cold.traffic("p")
    SWITCH.poisoned = True  # every delivery now looks like its worker died 98 times before
    try:
        t.send(30)
        store = cold.deps.store
        wait_until(lambda: bool(store.query_events(t.agent_id, ["dead_letter"]).items), 30, "dead-lettered")
    finally:
        SWITCH.poisoned = False
    event = store.query_events(t.agent_id, ["dead_letter"]).items[0]
    assert "delivered 99 times" in str(event.payload["reason"])
    assert cold.deps.faults.fired("evict.before_summarize", t.agent_id) == 0  # the logic never ran
    assert cold.deps.hot.pending_batches(t.agent_id)[0] == 1
    assert store.committed_batches(t.agent_id) == []


def test_the_sweeper_redrives_a_batch_whose_task_was_lost(cold: Cold) -> None:
    t = cold.traffic()
    t.send(30)
    cold.drain(t)
    lost = Traffic(cold.deps.hot, _Dropping(), t.agent_id, list(t.message_ids))
    lost.send(20)  # these dispatches vanish, as if the broker lost them
    assert cold.deps.hot.pending_batches(t.agent_id)
    cold.app.send_task(names.SWEEP)  # what beat does every sweep_interval_s
    cold.drain(lost)
    assert_exactly_once(cold.deps.hot, cold.deps.store, t.agent_id, lost.message_ids)


class _Dropping:
    def spool(self, agent_id: str, message_ids: object) -> None:
        pass

    def evict(self, agent_id: str, batch_id: int) -> None:
        pass


def test_a_dead_letter_sent_by_a_parent_process_is_recorded(cold: Cold) -> None:
    t = cold.traffic()
    cold.app.send_task(names.DEAD_LETTER, args=[t.agent_id, 5, "WorkerLostError: killed", 9, "task-9"])
    store = cold.deps.store
    wait_until(lambda: bool(store.query_events(t.agent_id, ["dead_letter"]).items), 30, "recorded")
    [event] = store.query_events(t.agent_id, ["dead_letter"]).items
    assert (event.payload["batch_id"], event.payload["attempts"], event.payload["reason"]) == (
        5,
        9,
        "WorkerLostError: killed",
    )


def test_reembed_task_embeds_stored_messages_in_bounded_runs(cold: Cold, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's re-embedding task, through the real (in-process) Celery worker: it stops after
    REEMBED_PER_RUN new vectors and sends itself again for the rest."""
    from vcm.store.types import StoredMessage
    from vcm.workers import tasks as celery_tasks

    monkeypatch.setattr(celery_tasks, "REEMBED_PER_RUN", 4)
    agent = f"re-{uuid.uuid4().hex[:8]}"
    store = cold.deps.store
    ids = [f"m{i:03d}" for i in range(11)]
    notes = [StoredMessage(agent, m, i + 1, "user", f"note {i} on the plan", 6, 1.7e9 + i) for i, m in enumerate(ids)]
    store.put_agent(agent, {"model": MODEL})  # a re-embedding writes only for a known agent
    store.spool_messages(notes)
    version = WordVectorizer.version
    assert store.message_vector_ids(agent, ids, version) == set()

    cold.app.send_task(names.REEMBED, args=[agent])
    wait_until(lambda: store.message_vector_ids(agent, ids, version) == set(ids), 30, "every message embedded")
    runs = store.query_events(agent, ["reembed"]).items
    assert sorted(e.payload["embedded"] for e in runs) == [3, 4, 4]  # three runs of at most 4


def test_an_archival_document_is_ingested_by_the_worker_as_a_job(cold: Cold, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.doubles.ingester import SentenceIngest
    from vcm.service import MemoryService

    monkeypatch.setattr(cold.deps, "ingest", SentenceIngest(cold.deps.store))
    service = MemoryService(cold.deps.hot, cold.deps.store, cold.dispatcher, embed=word_embed)
    agent = f"ing-{uuid.uuid4().hex[:8]}"
    service.create_agent(agent, model=MODEL)
    job = service.ingest_archival(agent, "Falcons nest high. Otters float.", doc_id="zoo", idempotency_key="z")
    assert job.status in ("queued", "running", "done")  # the request thread did not wait for it
    wait_until(lambda: service.ingest_job(agent, job.job_id).status == "done", 30, "the ingest task")
    done = service.ingest_job(agent, job.job_id)
    assert done.result is not None and done.result["chunks"] == 2 and done.chunks_done == 2
    assert [c.text for c in cold.deps.store.get_archival(agent, "zoo")] == ["Falcons nest high.", "Otters float."]


def test_an_ingestion_that_keeps_failing_is_reported_failed(cold: Cold, monkeypatch: pytest.MonkeyPatch) -> None:
    from vcm.service import MemoryService

    calls: list[str] = []

    def broken(agent_id: str, doc_id: str, text: str, **_: object) -> dict[str, int]:
        calls.append(doc_id)
        raise RuntimeError("embedding backend crashed")

    monkeypatch.setattr(cold.deps, "ingest", broken)
    service = MemoryService(cold.deps.hot, cold.deps.store, cold.dispatcher, embed=word_embed)
    agent = f"ing-{uuid.uuid4().hex[:8]}"
    service.create_agent(agent, model=MODEL)
    job = service.ingest_archival(agent, "Nothing will come of this.")
    wait_until(lambda: service.ingest_job(agent, job.job_id).status == "failed", 30, "the dead-lettered job")
    failed = service.ingest_job(agent, job.job_id)
    assert failed.error is not None and "embedding backend crashed" in failed.error["message"]
    assert len(calls) == 1 + cold.deps.settings.worker.max_retries  # every retry ran, then it gave up
