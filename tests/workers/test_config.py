"""The Celery configuration: every setting says why, routes, the visibility-timeout rule, a
dispatcher that never fails its caller, and the metrics the tasks' outcomes drive."""

from __future__ import annotations

import ast
import inspect
import socket
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from vcm.errors import ConfigError
from vcm.settings import load_settings
from vcm.workers import beat, config, metrics, names
from vcm.workers.build import create_app
from vcm.workers.dispatch import CeleryDispatcher


def _returned_dict(function: object) -> ast.Dict:
    tree = ast.parse(inspect.getsource(function))  # type: ignore[arg-type]
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)]
    assert found, "expected a returned dict literal"
    return found[-1]


@pytest.mark.parametrize("function", [config.celery_settings, config.broker_transport_options, beat.schedule])
def test_every_setting_carries_a_comment_saying_why(function: object) -> None:
    """Each key has a comment right above it, or shares one with the keys directly above it."""
    lines = inspect.getsource(function).splitlines()  # type: ignore[arg-type]
    first = inspect.getsourcelines(function)[1]  # type: ignore[arg-type]
    keys = [k for k in _returned_dict(function).keys if isinstance(k, ast.Constant)]
    assert keys
    for key in keys:
        row = key.lineno - 1
        while row > 0 and lines[row - 1].strip().startswith('"'):
            row -= 1  # a group of settings under one comment
        above = lines[row - 1].strip() if row > 0 else ""
        assert above.startswith("#"), f"{key.value} (line {first + key.lineno - 1}) has no comment saying why"


def test_the_reliability_settings_are_what_the_design_needs() -> None:
    conf = config.celery_settings(load_settings(environ={"VCM_BROKER_URL": "redis://127.0.0.1:6379/0"}))
    assert conf["task_acks_late"] and conf["task_retry_on_worker_lost"] and conf["task_reject_on_worker_lost"]
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["worker_send_task_events"] and conf["task_send_sent_event"]
    assert conf["accept_content"] == ["json"]
    vt = conf["broker_transport_options"]["visibility_timeout"]
    assert vt == conf["visibility_timeout"] == conf["result_backend_transport_options"]["visibility_timeout"]
    assert vt > conf["task_time_limit"] + conf["task_annotations"][names.EVICT]["retry_backoff_max"]
    assert set(conf["task_annotations"]) == set(names.RETRIED)


def test_memory_broker_polls_fast_and_prefix_isolates_a_shared_redis() -> None:
    assert config.broker_transport_options(load_settings(environ={})) == {"polling_interval": 0.01}
    s = load_settings(environ={"VCM_BROKER_URL": "redis://h:6379/1", "VCM_WORKER__BROKER_PREFIX": "blue:"})
    assert config.broker_transport_options(s)["global_keyprefix"] == "blue:"


def test_rabbitmq_keeps_the_reliability_settings_and_drops_the_redis_only_ones() -> None:
    redis_conf = config.celery_settings(load_settings(environ={"VCM_BROKER_URL": "redis://127.0.0.1:6379/0"}))
    conf = config.celery_settings(load_settings(environ={"VCM_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//"}))
    same = ("task_acks_late", "task_reject_on_worker_lost", "task_retry_on_worker_lost", "task_acks_on_failure",
            "worker_prefetch_multiplier", "task_annotations", "task_time_limit", "task_queues")  # fmt: skip
    assert {k: conf[k] for k in same} == {k: redis_conf[k] for k in same}
    # publisher confirms instead of the visibility timeout, restore cadence and key prefix of Redis
    assert conf["broker_transport_options"] == {"confirm_publish": True}
    env = {"VCM_BROKER_URL": "amqp://127.0.0.1//", "VCM_WORKER__AMQP_CONFIRM_PUBLISH": "false"}
    assert config.broker_transport_options(load_settings(environ=env)) == {"confirm_publish": False}


def test_rabbitmq_refuses_tasks_that_outlive_its_consumer_timeout() -> None:
    s = load_settings(
        overrides={"worker": {"task_time_limit_s": 1790, "task_soft_time_limit_s": 1700, "visibility_timeout_s": 4000}},
        environ={"VCM_BROKER_URL": "amqp://127.0.0.1//"},
    )
    with pytest.raises(ConfigError, match="consumer_timeout"):
        config.broker_transport_options(s)


def test_with_rabbitmq_the_delivery_counts_live_in_the_hot_state_redis() -> None:
    from tests.redis_legs import real_redis
    from vcm.workers.build import delivery_log as _deliveries
    from vcm.workers.deliveries import RedisDeliveryLog

    client = real_redis()
    url = client.get_connection_kwargs()
    hot = f"redis://127.0.0.1:{url['port']}/{url['db']}"
    env = {"VCM_BROKER_URL": "amqp://127.0.0.1//", "VCM_REDIS_URL": hot, "VCM_WORKER__BROKER_PREFIX": "t-amqp:"}
    log = _deliveries(load_settings(environ=env))
    assert isinstance(log, RedisDeliveryLog)
    assert [log.record("task-x", 0), log.record("task-x", 0), log.record("task-x", 1)] == [1, 2, 1]
    assert client.get("t-amqp:vcm-worker:deliveries:task-x:0") == "2"
    client.delete("t-amqp:vcm-worker:deliveries:task-x:0", "t-amqp:vcm-worker:deliveries:task-x:1")


def test_a_visibility_timeout_below_the_longest_task_is_refused() -> None:
    with pytest.raises(ConfigError, match="visibility_timeout_s"):
        load_settings(overrides={"worker": {"visibility_timeout_s": 300, "task_time_limit_s": 300}}, environ={})
    with pytest.raises(ConfigError, match="sweep_grace_s"):
        load_settings(overrides={"maintenance": {"sweep_grace_s": 4000}}, environ={})


@pytest.mark.parametrize(
    ("task", "queue"),
    [
        (names.EVICT, "hot"),
        (names.SPOOL, "cold"),
        (names.SWEEP, "maintenance"),
        (names.SWEEP_CONFIRM, "maintenance"),
        (names.EXPIRE, "maintenance"),
        (names.DEAD_LETTER, "maintenance"),
        (names.INGEST, "ingest"),
        (names.REEMBED, "ingest"),
        ("tasks.embed_chunks", "ingest"),
    ],
)
def test_routes(task: str, queue: str) -> None:
    app = create_app(load_settings(environ={}))
    assert app.amqp.router.route({}, task)["queue"].name == queue


def test_beat_runs_the_sweeper_and_the_ttl_cleanup() -> None:
    s = load_settings(overrides={"maintenance": {"sweep_interval_s": 30, "expire_interval_s": 600}}, environ={})
    schedule = beat.schedule(s)
    assert {(e["task"], e["schedule"]) for e in schedule.values()} == {
        (names.SWEEP, 30),
        (names.EXPIRE, 600),
        (names.CONSOLIDATE, s.facts.consolidate_interval_s),
    }
    off = load_settings(overrides={"facts": {"consolidate_interval_s": 0}}, environ={})
    assert names.CONSOLIDATE not in {e["task"] for e in beat.schedule(off).values()}


def test_a_dispatch_the_broker_refuses_is_counted_not_raised() -> None:
    app = create_app(load_settings(environ={"VCM_BROKER_URL": "redis://127.0.0.1:1/0"}))
    dispatcher = CeleryDispatcher(app, retries=0)

    def failures(kind: str) -> float:
        return REGISTRY.get_sample_value("vcm_dispatch_failures_total", {"kind": kind}) or 0.0

    before = failures("spool"), failures("evict")
    dispatcher.spool("agent", ["m1"])
    dispatcher.evict("agent", 3)
    assert (failures("spool"), failures("evict")) == (before[0] + 1, before[1] + 1)


def test_outcomes_drive_the_counters() -> None:
    def value(name: str, labels: dict[str, str] | None = None) -> float:
        return REGISTRY.get_sample_value(name, labels or {}) or 0.0

    dead = value("vcm_dead_letters_total", {"task": names.SPOOL})
    metrics.observe(names.SPOOL, {"outcome": "dead_lettered"})
    metrics.observe(names.EVICT, None)  # a retry returns nothing: not counted
    assert value("vcm_dead_letters_total", {"task": names.SPOOL}) == dead + 1
    # The sweeper's own counters are the job's (tests/tasks/test_maintenance_jobs.py).


def test_worker_metrics_endpoint_serves_the_vcm_counters() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = metrics.serve(port, addr="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
        assert f'vcm_dead_letters_total{{task="{names.EVICT}"}}' in body
        assert 'vcm_dispatch_failures_total{kind="spool"}' in body
    finally:
        server.shutdown()
        server.server_close()


def test_multiprocess_directory_is_wiped_at_worker_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "prom"
    directory.mkdir()
    (directory / "counter_123.db").write_bytes(b"stale")
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(directory))
    metrics.wipe_multiprocess_dir()
    assert directory.is_dir() and list(directory.iterdir()) == []
    metrics.process_exited(123)  # a child that never wrote anything is fine too


class _Sender:
    """A task as the task_failure signal names it (after a pool child died on its last attempt)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.request = type("Request", (), {"retries": 3})()
        self.sent: list[tuple[str, list[object]]] = []
        self.app = self

    def send_task(self, name: str, args: list[object]) -> None:
        self.sent.append((name, args))


def test_a_task_lost_with_its_process_is_counted_and_its_dead_letter_sent() -> None:
    from billiard.exceptions import WorkerLostError

    from vcm.workers import signals

    before = REGISTRY.get_sample_value("vcm_dead_letters_total", {"task": names.EVICT}) or 0.0
    evict = _Sender(names.EVICT)
    signals._on_task_failure(sender=evict, task_id="t-1", exception=WorkerLostError("killed"), args=["a1", 7])
    assert evict.sent == [(names.DEAD_LETTER, ["a1", 7, "WorkerLostError: killed", 4, "t-1"])]
    assert REGISTRY.get_sample_value("vcm_dead_letters_total", {"task": names.EVICT}) == before + 1
    other = _Sender("celery.ping")
    signals._on_task_failure(sender=other, task_id="t-2", exception=RuntimeError("x"), args=[])
    assert other.sent == []  # not a vcm task
