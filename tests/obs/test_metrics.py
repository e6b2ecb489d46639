"""vcm's metrics: recording helpers, the store wrapper, the page depth and filter-drop figures the
embedded adapter reports, and multi-process aggregation with real processes sharing one
``PROMETHEUS_MULTIPROC_DIR``.

The families are process-global, so every check compares a value before and after."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import numpy as np
import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client import multiprocess as prom_multiprocess

from vcm.dispatch import RecordingDispatcher
from vcm.errors import NotFound, ValidationError
from vcm.hotpath.state import HotState
from vcm.obs import metrics
from vcm.obs.metered_store import MeteredStore, metered
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.store.types import ArchivalChunk
from vcm.types import Gauges

ROOT = Path(__file__).resolve().parents[2]
DIM = 8


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def gauges(fifo: int = 100) -> Gauges:
    return Gauges(window=1000, max_tokens=900, system=50, working=20, summary=30, placeholders=5, fifo=fifo, pinned=0)


def test_context_sets_every_part_and_free_per_agent() -> None:
    before = value("vcm_context_occupancy_ratio_count")
    metrics.context("gauge-agent", gauges(), per_agent=True)
    parts = {p: value("vcm_context_tokens", agent="gauge-agent", part=p) for p in metrics.PARTS}
    assert parts == {"system": 50, "working": 20, "summary": 30, "placeholders": 5, "fifo": 100, "free": 695}
    assert value("vcm_context_occupancy_ratio_count") == before + 1


def test_per_agent_off_records_no_agent_series() -> None:
    before = value("vcm_context_occupancy_ratio_count")
    metrics.context("unlabelled-agent", gauges(), per_agent=False)
    assert REGISTRY.get_sample_value("vcm_context_tokens", {"agent": "unlabelled-agent", "part": "fifo"}) is None
    assert value("vcm_context_occupancy_ratio_count") == before + 1


def test_per_agent_series_are_bounded_least_recently_updated_first() -> None:
    for name in ("cap-a", "cap-b", "cap-c"):
        metrics.context(name, gauges(), per_agent=True, max_agents=3)
    metrics.context("cap-a", gauges(), per_agent=True, max_agents=3)  # a is recent again; b is oldest
    metrics.context("cap-d", gauges(), per_agent=True, max_agents=3)
    alive = {a for a in ("cap-a", "cap-b", "cap-c", "cap-d") if REGISTRY.get_sample_value(
        "vcm_context_tokens", {"agent": a, "part": "fifo"}) is not None}  # fmt: skip
    assert alive == {"cap-a", "cap-c", "cap-d"}
    metrics.context("cap-b", gauges(), per_agent=True, max_agents=3)  # back, at the cost of c
    assert REGISTRY.get_sample_value("vcm_context_tokens", {"agent": "cap-b", "part": "fifo"}) == 100
    assert REGISTRY.get_sample_value("vcm_context_tokens", {"agent": "cap-c", "part": "fifo"}) is None


def test_recording_never_raises_into_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object, **__: object) -> None:
        raise OSError("multiprocess directory is gone")

    monkeypatch.setattr(metrics.WARNINGS, "inc", broken)
    monkeypatch.setattr(metrics.FLUSHES, "labels", broken)
    metrics.warning()
    metrics.flush("threshold")
    metrics.context("x", Gauges(0, 0, 0, 0, 0, 0, 0, 0), per_agent=True)  # window 0: no ratio, no error


def test_chain_ends_count_reasons_and_observe_only_real_chains() -> None:
    depth = value("vcm_heartbeat_chain_depth_count")
    limited = value("vcm_heartbeat_rate_limited_total")
    metrics.chain_end("depth", 8, 3.5, chain=True)
    metrics.chain_end("rate_limited", 0, 0.0, chain=False)  # refused before a chain started
    assert value("vcm_heartbeat_chain_depth_count") == depth + 1
    assert value("vcm_heartbeat_rate_limited_total") == limited + 1
    assert value("vcm_heartbeat_chain_ends_total", reason="depth") >= 1


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    st = metered(open_store(str(tmp_path / "vcm.db")))
    yield st
    st.close()


def _chunks(agent: str, n: int) -> list[ArchivalChunk]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        vec = rng.normal(size=DIM)
        vec /= np.linalg.norm(vec)
        out.append(
            ArchivalChunk(
                agent, f"doc{i % 3}", i, f"chunk {i}", [float(x) for x in vec], "cosine", "v1", "m", 0, 7,
                metadata={"colour": "red" if i % 4 == 0 else "blue"}, created_at=time.time(),
            )
        )  # fmt: skip
    return out


def test_store_errors_are_counted_by_operation_and_code_and_reraised(store: MemoryStore) -> None:
    before = value("vcm_store_errors_total", operation="get_core", code="NOT_FOUND")
    with pytest.raises(NotFound):
        store.get_core("agent-e", "nope")
    assert value("vcm_store_errors_total", operation="get_core", code="NOT_FOUND") == before + 1
    bad = value("vcm_store_errors_total", operation="search_archival", code="VALIDATION_ERROR")
    with pytest.raises(ValidationError):
        store.search_archival("agent-e", [1.0] * DIM, 3, cursor="not-a-cursor")
    assert value("vcm_store_errors_total", operation="search_archival", code="VALIDATION_ERROR") == bad + 1


def test_wrapping_is_idempotent_and_passes_adapter_operations_through(store: MemoryStore) -> None:
    assert isinstance(store, MeteredStore)
    assert metered(store) is store
    assert store.flush_text_index() is True  # EmbeddedStore's own


def test_archival_pages_report_their_depth_and_the_filter_drop_ratio(store: MemoryStore) -> None:
    store.ingest_archival(_chunks("agent-p", 40))
    query = _chunks("agent-p", 1)[0].embedding
    pages = value("vcm_archival_search_page_count")
    page2 = value("vcm_archival_search_page_bucket", le="2.0") - value("vcm_archival_search_page_bucket", le="1.0")
    drops = value("vcm_archival_filter_drop_ratio_count")

    first = store.search_archival("agent-p", query, 3, filters={"colour": "red"})
    assert first.stats is not None and first.stats.offset == 0
    assert first.stats.judged > first.stats.dropped > 0  # three of four chunks are blue
    assert first.next_cursor is not None
    second = store.search_archival("agent-p", query, 3, filters={"colour": "red"}, cursor=first.next_cursor)
    assert second.stats is not None and second.stats.offset == 3
    assert second.next_cursor is not None
    third = store.search_archival("agent-p", query, 3, filters={"colour": "red"}, cursor=second.next_cursor)
    assert third.stats is not None and third.stats.offset == 6  # served from the stored snapshot

    assert value("vcm_archival_search_page_count") == pages + 3
    now2 = value("vcm_archival_search_page_bucket", le="2.0") - value("vcm_archival_search_page_bucket", le="1.0")
    assert now2 == page2 + 1
    # the first two pages ranked (and filtered); the third came from the snapshot
    assert value("vcm_archival_filter_drop_ratio_count") == drops + 2


def test_seed_telemetry_names_exist_as_families(store: MemoryStore) -> None:
    """Seed 000's recall.hit_rate (hits / all recall pages) and archival.nProbe_distribution."""
    hit, miss = (
        value("vcm_recall_searches_total", mode="text", outcome="hit"),
        value("vcm_recall_searches_total", mode="text", outcome="miss"),
    )
    metrics.recall_search("text", 0.01, 3)
    metrics.recall_search("text", 0.01, 0)
    assert value("vcm_recall_searches_total", mode="text", outcome="hit") == hit + 1
    assert value("vcm_recall_searches_total", mode="text", outcome="miss") == miss + 1
    probes, low, defaults = (
        value("vcm_archival_search_nprobe_count"),
        value("vcm_archival_search_nprobe_bucket", le="8.0"),
        value("vcm_archival_search_nprobe_default_total"),
    )
    metrics.archival_n_probe(8)
    metrics.archival_n_probe(32)
    metrics.archival_n_probe(None)
    assert value("vcm_archival_search_nprobe_count") == probes + 2
    assert value("vcm_archival_search_nprobe_bucket", le="8.0") == low + 1
    assert value("vcm_archival_search_nprobe_default_total") == defaults + 1
    blocked = value("vcm_compliance_violations_total", rule="late_chunking", outcome="blocked")
    metrics.compliance_violation("late_chunking", "blocked")
    assert value("vcm_compliance_violations_total", rule="late_chunking", outcome="blocked") == blocked + 1
    # The other names the seed lists (page depth, k actual, post-filter drop rate, hb.rate_limited)
    # are families already; docs/operations.md maps each.
    names = {m.name for m in REGISTRY.collect()}
    for family in (
        "vcm_archival_search_page",
        "vcm_archival_search_hits",
        "vcm_archival_filter_drop_ratio",
        "vcm_heartbeat_rate_limited",
        "vcm_recall_searches",
        "vcm_archival_search_nprobe",
    ):
        assert family in names
    doc = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    for seed in (
        "recall.hit_rate",
        "archival.nProbe_distribution",
        "archival.page_depth",
        "archival.k_actual",
        "archival.post_filter_drop_rate",
        "hb.rate_limited",
    ):
        assert f"| `{seed}` |" in doc


# --- multi-process ---------------------------------------------------------------------------------
_CHILD = """
import sys
from vcm.obs import metrics
from vcm.types import Gauges
fifo = int(sys.argv[1])
metrics.warning()
metrics.eviction_committed(3)
metrics.drift(0.9, None)
metrics.recall_search("hybrid", 0.01, 4)
metrics.context("shared-agent", Gauges(1000, 900, 50, 0, 0, 0, fifo, 0), per_agent=True)
"""


def _child(directory: Path, fifo: int) -> None:
    env = {k: v for k, v in os.environ.items() if k != metrics.MULTIPROC_ENV}
    env |= {metrics.MULTIPROC_ENV: str(directory), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", _CHILD, str(fifo)], cwd=ROOT, env=env, check=True, timeout=120)


def _samples(directory: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    prom_multiprocess.MultiProcessCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in registry.collect() for s in family.samples}


def test_processes_sharing_a_multiproc_dir_sum_counters_and_histograms(tmp_path: Path) -> None:
    _child(tmp_path, 100)
    _child(tmp_path, 250)  # later: its gauge value is the most recent
    assert len(list(tmp_path.glob("*.db"))) >= 2  # one file per process and kind
    got = _samples(tmp_path)
    assert got[("vcm_memory_pressure_warnings_total", ())] == 2
    assert got[("vcm_evicted_messages_total", ())] == 6
    assert got[("vcm_eviction_batches_committed_total", ())] == 2
    assert got[("vcm_summary_drift_score_count", (("attempt", "first"),))] == 2
    assert got[("vcm_recall_search_hits_sum", (("mode", "hybrid"),))] == 8
    # mostrecent: the agent's state as last written, not a sum over processes
    assert got[("vcm_context_tokens", (("agent", "shared-agent"), ("part", "fifo")))] == 250
    assert got[("vcm_context_tokens", (("agent", "shared-agent"), ("part", "free")))] == 900 - 50 - 250


def test_registry_serves_the_multiproc_dir_when_it_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _child(tmp_path, 10)
    monkeypatch.setenv(metrics.MULTIPROC_ENV, str(tmp_path))
    samples = {s.name: s.value for f in metrics.registry().collect() for s in f.samples if not s.labels}
    assert samples["vcm_memory_pressure_warnings_total"] == 1  # the child's count, not this process's


def test_appends_are_counted_and_a_replayed_retry_is_not(store: MemoryStore) -> None:
    settings = load_settings(environ={})
    svc = MemoryService(HotState(fakeredis.FakeRedis(decode_responses=True), settings), store, RecordingDispatcher())
    svc.create_agent("counted", model="vcm-demo-2k")
    before = value("vcm_appended_messages_total")
    svc.append("counted", "user", "one", idempotency_key="k1")
    svc.append("counted", "user", "two")
    svc.append("counted", "user", "one", idempotency_key="k1")  # the retry replays
    assert value("vcm_appended_messages_total") - before == 2
