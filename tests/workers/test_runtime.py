"""Per-process dependencies built from settings, as a worker process builds them."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.doubles.coldpath import MODEL, small_settings
from vcm.errors import StoreUnavailable
from vcm.hotpath.connection import connect
from vcm.settings import Settings
from vcm.store.types import EvictionCommit, StoredMessage
from vcm.tasks.faults import ENV as FAULTS_ENV
from vcm.tasks.summary.llm import LlmSummarizer
from vcm.tasks.summary.recursive import extractive
from vcm.workers import build as worker_build
from vcm.workers import runtime
from vcm.workers.deliveries import RedisDeliveryLog
from vcm.workers.dispatch import CeleryDispatcher


def embedded(tmp_path: Path, **overrides: object) -> Settings:
    return small_settings(redis_url="", broker_url="memory://", store_url=f"sqlite:///{tmp_path}/vcm.db", **overrides)


@pytest.fixture
def built(tmp_path: Path) -> Iterator[runtime.Deps]:
    settings = embedded(tmp_path)
    worker_build.build(settings)  # the entry point's wiring: registers the Celery dispatcher
    deps = runtime.build(settings)
    yield deps
    deps.store.close()


def test_embedded_settings_build_working_dependencies(built: runtime.Deps, tmp_path: Path) -> None:
    assert isinstance(built.dispatcher, CeleryDispatcher)  # registered by vcm.workers.build.build
    assert built.summarizer is extractive
    assert isinstance(built.embed, runtime.LazyEmbed)
    built.hot.create_agent("rt-agent", model=MODEL)
    assert "rt-agent" in connect("").smembers("vcm:agents")  # the process's shared fakeredis
    assert (tmp_path / "vcm.db").exists() and built.store.health().ok


def test_a_serving_process_embeds_queries_on_one_thread_unless_configured(tmp_path: Path) -> None:
    default = embedded(tmp_path)
    assert default.embedding.backend == "auto" and default.embedding.threads == 0
    # ONNX Runtime's or OpenVINO's default (a thread per core, sleeping when idle) for the queries too.
    assert runtime.LazyEmbed(default).local().settings.threads == 0
    settings = default.model_copy(update={"embedding": default.embedding.model_copy(update={"backend": "torch"})})
    assert runtime.LazyEmbed(settings).settings.threads == 0  # the cold path's: torch's default
    assert runtime.LazyEmbed(settings).local().settings.threads == runtime.QUERY_THREADS == 1
    configured = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"threads": 3})})
    assert runtime.LazyEmbed(configured).local().settings.threads == 3
    # The cold path in the same process: torch's default stays (its threads are the process's).
    inline = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"subprocess": False})})
    assert runtime.LazyEmbed(inline).local().settings.threads == 0


def test_faults_from_the_environment_reach_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULTS_ENV, json.dumps([{"point": "commit_eviction.before_commit", "agent_prefix": "x"}]))
    deps = runtime.build(embedded(tmp_path))
    try:
        message = StoredMessage("x1", "m1", 1, "user", "hi", 2, 1.0)
        with deps.faults.scope("x1"), pytest.raises(StoreUnavailable):
            deps.store.commit_eviction(EvictionCommit("x1", 1, [message], "sum", 3, None))
        assert deps.store.committed_batches("x1") == []
    finally:
        deps.store.close()


def test_deps_are_built_once_per_process_and_can_be_replaced(built: runtime.Deps) -> None:
    runtime.install(built)
    try:
        assert runtime.deps() is built
    finally:
        runtime.reset()


def test_delivery_log_follows_the_broker(tmp_path: Path) -> None:
    memory = worker_build.delivery_log(embedded(tmp_path))
    assert isinstance(memory, runtime.LocalDeliveryLog)
    assert [memory.record("t", 0), memory.record("t", 0), memory.record("t", 1)] == [1, 2, 1]
    on_redis = worker_build.delivery_log(small_settings(broker_url="redis://127.0.0.1:6379/9"))
    assert isinstance(on_redis, RedisDeliveryLog)


@pytest.mark.redis
def test_redis_delivery_log_counts_each_attempt_separately() -> None:
    log = RedisDeliveryLog("redis://127.0.0.1:6379/9", ttl_s=60, prefix=f"t-{uuid.uuid4().hex}:")
    try:
        counts = [log.record("task", 0), log.record("task", 0), log.record("task", 1)]
    except redis.exceptions.ConnectionError as exc:
        pytest.skip(f"real Redis is not answering ({exc})")
    assert counts == [1, 2, 1]


def test_llm_summarizer_is_chosen_by_settings(tmp_path: Path) -> None:
    settings = embedded(tmp_path, summarizer={"kind": "llm", "llm_url": "http://127.0.0.1:9/v1", "llm_model": "m"})
    assert isinstance(runtime.build_summarizer(settings), LlmSummarizer)


def test_message_vectors_follow_recall_settings_and_load_the_model_lazily(tmp_path: Path) -> None:
    deps = runtime.build(embedded(tmp_path, recall={"context_mode": "late", "context_turns": 3}))
    try:
        vectorizer = deps.vectorizer
        assert isinstance(vectorizer, runtime.LazyVectorizer)
        assert vectorizer._built is None  # nothing loaded until a spool needs it
    finally:
        deps.store.close()
    off = runtime.build(embedded(tmp_path / "off", recall={"vectors": False}))
    try:
        assert off.vectorizer is None
    finally:
        off.store.close()


def test_the_service_searches_recall_under_the_workers_vector_version(
    built: runtime.Deps, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vcm.tasks.recall.vectors import Turn
    from vcm.workers import wiring

    class Stub:
        version, context, after = "stub-model:late6:v1", 6, 0

        def embed(self, history: list[Turn], targets: list[Turn]) -> list[None]:
            return [None for _ in targets]

    monkeypatch.setattr(runtime, "deps", lambda: built)
    monkeypatch.setattr(built, "vectorizer", Stub())
    service = wiring.build_service(built.settings)
    assert service.recall_version is not None and service.recall_version() == "stub-model:late6:v1"
    monkeypatch.setattr(built, "vectorizer", None)
    assert wiring.build_service(built.settings).recall_version is None


def test_a_retry_that_cannot_be_published_is_requeued_not_dead_lettered(monkeypatch: pytest.MonkeyPatch) -> None:
    # Celery's Task.retry rejects *without* requeue when it cannot publish the retry (the broker
    # is the Redis that just blinked); vcm requeues, so a one-second outage is no dead letter.
    from celery.exceptions import Reject

    from vcm.workers import signals
    from vcm.workers.tasks import spool

    def unpublishable(*_: object, **__: object) -> None:
        raise Reject(ConnectionError("Error 111 connecting to 127.0.0.1:6379"), requeue=False)

    monkeypatch.setattr(spool, "retry", unpublishable)
    spool.push_request(retries=0, id="t-1")
    try:
        with pytest.raises(Reject) as rejected:
            spool.retry_or_give_up(ConnectionError("redis blinked"), "a1", ["m1"])
    finally:
        spool.pop_request()
    assert rejected.value.requeue is True
    before = _dead_letters(spool.name)
    signals._on_task_failure(sender=spool, task_id="t-1", exception=rejected.value, args=["a1", ["m1"]])
    assert _dead_letters(spool.name) == before  # a requeued task is not given up


def _dead_letters(task: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("vcm_dead_letters_total", {"task": task}) or 0.0
