"""GET /metrics after a short scripted session: every vcm family is exposed and has moved.

Real parts: the app under TestClient, the hot state on the real Redis (``VCM_TEST_REDIS_URL``),
the embedded store in tmp_path behind :class:`~vcm.obs.metered_store.MeteredStore`, and the
in-process Celery worker of embedded mode (``memory://``) running the real tasks. The embedder is
the word-hash stand-in of tests/api/conftest.py, used by the service and the cold path alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import fakeredis
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import ADMIN, ADMIN_TOKEN, Ingest, api_settings, embed, new_agent
from tests.doubles.coldpath import MODEL, line, small_settings
from tests.redis_legs import REDIS_URL, real_redis
from vcm.api.app import create_app
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.obs.metered_store import metered
from vcm.service import MemoryService
from vcm.settings import Settings
from vcm.store import open_store
from vcm.tasks.deps import Deps
from vcm.tasks.faults import Faults, Rule
from vcm.tasks.summary.recursive import extractive
from vcm.tools.executor import ToolExecutor
from vcm.workers import build as worker_build
from vcm.workers import runtime
from vcm.workers.dispatch import CeleryDispatcher
from vcm.workers.embedded import embedded_worker

pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

# Families the session must move (the brief of issue #6, item 2), by family name as the parser
# reports it (counters without "_total").
MOVED = [
    "vcm_context_tokens",
    "vcm_context_occupancy_ratio",
    "vcm_memory_pressure_warnings",
    "vcm_flushes",
    "vcm_evicted_messages",
    "vcm_eviction_batches_committed",
    "vcm_eviction_batches_pending",
    "vcm_dead_letters",
    "vcm_heartbeat_chain_depth",
    "vcm_heartbeat_chain_duration_seconds",
    "vcm_heartbeat_chain_ends",
    "vcm_heartbeat_rate_limited",
    "vcm_recall_search_duration_seconds",
    "vcm_recall_search_hits",
    "vcm_archival_search_duration_seconds",
    "vcm_archival_search_hits",
    "vcm_archival_search_page",
    "vcm_archival_filter_drop_ratio",
    "vcm_summary_drift_score",
    "vcm_resummarizations",
    "vcm_vector_index_trained",
    "vcm_facts",
    "vcm_store_errors",
]
# Exposed too, but this session has nothing to move them.
PRESENT = ["vcm_sweeper_redriven_batches", "vcm_sweeper_respooled_messages", "vcm_dispatch_failures"]


def settings_for(tmp_path: Path, redis_url: str) -> Settings:
    return small_settings(
        redis_url=redis_url,
        broker_url="memory://",
        store_url=f"sqlite:///{tmp_path / 'vcm.db'}",
        default_model=MODEL,
        api={"admin_token": ADMIN_TOKEN},
        heartbeat={"max_depth": 2, "rate_per_s": 1000, "cooldown_ms": 60_000, "token_floor": 0},
        drift={"threshold": 1.0},  # every first draft falls short: each eviction re-summarises once
        worker={"max_retries": 1, "retry_backoff_s": 0.05, "retry_backoff_max_s": 1},
    )


@pytest.fixture
def session(tmp_path: Path) -> Iterator[tuple[TestClient, Deps]]:
    client = real_redis()
    client.flushdb()
    settings = settings_for(tmp_path, REDIS_URL)
    app = worker_build.build(settings).app  # signals connected, as in a worker process
    dispatcher = CeleryDispatcher(app)
    faults = Faults([Rule("evict.before_summarize", agent_prefix="doomed-")])
    # Two IVF lists train on 78 vectors (39 a list), so the 80-chunk ingest below trains the index.
    store = metered(
        open_store(settings.store_url, fault_hook=faults.store_hook, train_threshold=32, n_lists=2, n_probe=2)
    )
    deps = Deps(
        settings, HotState(client, settings), store, dispatcher, embed, extractive, faults, ingest=Ingest(store)
    )
    runtime.install(deps, runtime.LocalDeliveryLog())
    service = MemoryService(deps.hot, store, dispatcher, embed=embed)
    api = create_app(service, ToolExecutor(service), settings=settings)
    try:
        with embedded_worker(app), TestClient(api, raise_server_exceptions=True) as http:
            yield http, deps
    finally:
        runtime.reset()
        client.flushdb()
        client.close()


def scrape(http: TestClient) -> dict[str, Samples]:
    r = http.get("/metrics", headers=ADMIN)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=")
    return {
        family.name: {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
        for family in text_string_to_metric_families(r.text)
        if family.name.startswith("vcm_")
    }


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def delta(before: dict[str, Samples], after: dict[str, Samples], family: str, sample: str, **labels: str) -> float:
    key = (sample, tuple(sorted(labels.items())))
    return after[family].get(key, 0.0) - before.get(family, {}).get(key, 0.0)


def test_metrics_expose_every_family_and_move_after_a_scripted_session(session: tuple[TestClient, Deps]) -> None:
    http, deps = session
    before = scrape(http)

    # appends past warning and flush; the worker commits the eviction (drift, re-summarisation)
    talk = new_agent(http, "talker", model=MODEL, system_prompt="You are brief.")
    actions = [
        http.post("/v1/agents/talker/messages", json={"role": "user", "content": line(i)}, headers=talk).json()
        for i in range(40)
    ]
    assert {"warning", "flush"} <= {a["action"] for a in actions}
    wait_until(lambda: deps.store.committed_batches("talker") != [], "an eviction committed")
    assert http.get("/v1/agents/talker/context", headers=talk).status_code == 200

    # an eviction the worker cannot commit: retried, dead-lettered, left pending in Redis
    doomed = new_agent(http, "doomed-1", model=MODEL)
    r = http.post("/v1/agents/doomed-1/evictions", json={"count": 1}, headers=doomed)
    assert r.status_code == 200 and r.json()["batch"] is None  # nothing to evict yet: no batch
    for i in range(3):
        http.post("/v1/agents/doomed-1/messages", json={"role": "user", "content": line(i)}, headers=doomed)
    assert http.post("/v1/agents/doomed-1/evictions", json={"count": 2}, headers=doomed).json()["batch"]["id"] == 1
    wait_until(lambda: bool(deps.store.query_events("doomed-1", ["dead_letter"]).items), "a dead letter")

    # recall in each mode
    for mode in ("text", "vector", "hybrid"):
        r = http.get("/v1/agents/talker/recall", params={"query": "invoice unpaid", "mode": mode}, headers=talk)
        assert r.status_code == 200 and r.json()["mode"] == mode

    # archival: ingest enough chunks to train the index, search with a filter, then page 2
    paragraphs = [
        f"Paragraph {i} about {'falcon launch' if i % 2 else 'invoice payments'} number {i}." for i in range(80)
    ]
    r = http.post(
        "/v1/agents/talker/archival",
        json={"text": "\n\n".join(paragraphs), "metadata": {"kind": "notes"}},
        headers=talk,
    )
    assert r.status_code == 202
    job_url = f"/v1/agents/talker/archival/jobs/{r.json()['job_id']}"
    wait_until(lambda: http.get(job_url, headers=talk).json()["status"] == "done", "the ingest worker's job")
    assert http.get(job_url, headers=talk).json()["result"]["chunks"] == 80
    search = {"query": "falcon launch", "k": 3, "filters": {"kind": "notes"}}
    first = http.post("/v1/agents/talker/archival/search", json=search, headers=talk).json()
    assert first["next_cursor"]
    second = http.post(
        "/v1/agents/talker/archival/search", json={**search, "cursor": first["next_cursor"]}, headers=talk
    )
    assert second.status_code == 200 and len(second.json()["items"]) == 3
    # a filter that drops every candidate
    none = http.post(
        "/v1/agents/talker/archival/search", json={**search, "filters": {"kind": "mail"}}, headers=talk
    ).json()
    assert none["items"] == []

    # facts: one sticky, one project fact later archived (written by the operator: active at once;
    # an agent's own write without evidence would land shadow, which archiving leaves alone)
    for value, type_ in (("Talker prefers email", "sticky"), ("Invoice run every Friday", "project")):
        r = http.post("/v1/agents/talker/facts", json={"value": value, "type": type_}, headers=ADMIN)
        assert r.status_code in (200, 201), r.text
    archived = http.post("/v1/agents/talker/facts/archive", json={"types": ["project"]}, headers=talk).json()
    assert archived["archived"] >= 1  # ours, and any project fact extraction found in evicted turns

    # a store error: a damaged cursor is the store's VALIDATION_ERROR
    bad = http.post("/v1/agents/talker/archival/search", json={**search, "cursor": "garbage"}, headers=talk)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "VALIDATION_ERROR"

    # a heartbeat chain that the depth guard ends (max_depth 2), then a refusal in its cooldown
    beat = new_agent(http, "beater", model=MODEL)
    ended = []
    for _ in range(4):
        r = http.post(
            "/v1/agents/beater/tools/record_heartbeat", json={"arguments": {"request_heartbeat": True}}, headers=beat
        )
        ended.append(r.json()["payload"]["heartbeat"]["ended"])
    assert ended == [None, None, "depth", "rate_limited"]  # the fourth falls in the cooldown

    after = scrape(http)

    missing = [f for f in MOVED + PRESENT if f not in after]
    assert missing == [], f"families not exposed: {missing}"
    unmoved = [f for f in MOVED if after[f] == before.get(f, {})]
    assert unmoved == [], f"families that did not move: {unmoved}"

    # and moved by what the session did
    batches = deps.store.committed_batches("talker")
    assert delta(before, after, "vcm_eviction_batches_committed", "vcm_eviction_batches_committed_total") == len(
        batches
    )
    assert delta(before, after, "vcm_evicted_messages", "vcm_evicted_messages_total") >= len(batches)
    assert delta(before, after, "vcm_resummarizations", "vcm_resummarizations_total") == len(batches)
    assert delta(before, after, "vcm_dead_letters", "vcm_dead_letters_total", task="tasks.evict_batch") == 1
    assert after["vcm_eviction_batches_pending"][("vcm_eviction_batches_pending", ())] == 1  # the doomed batch
    assert delta(before, after, "vcm_flushes", "vcm_flushes_total", trigger="request") == 1
    assert delta(before, after, "vcm_heartbeat_chain_ends", "vcm_heartbeat_chain_ends_total", reason="depth") == 1
    assert delta(before, after, "vcm_heartbeat_chain_depth", "vcm_heartbeat_chain_depth_sum") == 2
    for mode in ("text", "vector", "hybrid"):
        assert delta(before, after, "vcm_recall_search_hits", "vcm_recall_search_hits_count", mode=mode) == 1
    page1 = delta(before, after, "vcm_archival_search_page", "vcm_archival_search_page_bucket", le="1.0")
    page2 = delta(before, after, "vcm_archival_search_page", "vcm_archival_search_page_bucket", le="2.0")
    assert (page1, page2 - page1) == (2, 1)  # two first pages, one second page
    drops = after["vcm_archival_filter_drop_ratio"]
    assert (
        drops[("vcm_archival_filter_drop_ratio_bucket", (("le", "0.95"),))]
        < drops[("vcm_archival_filter_drop_ratio_count", ())]
    )  # the all-dropping filter landed above 0.95
    code = {"operation": "search_archival", "code": "VALIDATION_ERROR"}
    assert delta(before, after, "vcm_store_errors", "vcm_store_errors_total", **code) == 1
    trained = after["vcm_vector_index_trained"]
    assert trained == {
        (
            "vcm_vector_index_trained",
            (("dimension", "32"), ("embedding_version", "hash32:v1"), ("metric", "cosine")),
        ): 1.0
    }
    facts = after["vcm_facts"]
    assert facts[("vcm_facts", (("status", "active"), ("type", "sticky")))] == 1.0
    assert facts[("vcm_facts", (("status", "archived"), ("type", "project")))] == archived["archived"]
    tokens = after["vcm_context_tokens"]
    assert tokens[("vcm_context_tokens", (("agent", "talker"), ("part", "fifo")))] > 0
    assert {labels[1][1] for _, labels in tokens if labels[0] == ("agent", "talker")} == {
        "system", "working", "summary", "placeholders", "fifo", "free"
    }  # fmt: skip


def test_metrics_need_the_admin_token_by_default(tmp_path: Path) -> None:
    # Per-agent series name agent ids: an agent's token (or none) must not list the others.
    settings = api_settings()
    assert settings.metrics.require_admin is True
    store = open_store(str(tmp_path / "vcm.db"))
    try:
        hot = HotState(fakeredis.FakeRedis(decode_responses=True), settings)
        service = MemoryService(hot, store, RecordingDispatcher())
        with TestClient(create_app(service, None, settings=settings)) as http:
            assert http.get("/metrics").json()["error"]["code"] == "UNAUTHORIZED"
            agent = new_agent(http, "scraper")
            assert http.get("/metrics", headers=agent).json()["error"]["code"] == "UNAUTHORIZED"
            r = http.get("/metrics", headers=ADMIN)
            assert r.status_code == 200 and "vcm_context_tokens" in r.text
    finally:
        store.close()


def test_metrics_can_be_opened_to_anonymous_scrapers(tmp_path: Path) -> None:
    settings = api_settings()
    settings = settings.model_copy(update={"metrics": settings.metrics.model_copy(update={"require_admin": False})})
    store = open_store(str(tmp_path / "vcm.db"))
    try:
        hot = HotState(fakeredis.FakeRedis(decode_responses=True), settings)
        service = MemoryService(hot, store, RecordingDispatcher())
        with TestClient(create_app(service, None, settings=settings)) as http:
            r = http.get("/metrics")
            assert r.status_code == 200 and "# TYPE" in r.text
    finally:
        store.close()
