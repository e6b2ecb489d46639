"""Smoke run of ``scripts/bench_store.py --quick``: it runs end to end and reports numbers.

The benchmark's figures are not asserted (they depend on the machine); only that every
measurement is there and positive, so the script cannot rot unnoticed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    """``scripts/bench_store.py`` run as a process, as an operator would; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_store.py"), *args],
        cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


@pytest.mark.slow
def test_bench_store_quick_reports_every_measurement_and_reuses_its_agent_store(tmp_path: Path) -> None:
    """One full ``--quick`` run that keeps its one-agent store (``--store-dir``), then a second run
    of the agent measurement alone: it copies the kept store (the writer writes into the copy
    only) and measures the same vector recall on it."""
    out, cache = tmp_path / "bench.json", tmp_path / "cache"
    done = _bench("--quick", "--store-dir", str(cache), "--dir", str(tmp_path / "first"), "--json", str(out))
    report = json.loads(out.read_text())

    assert {"machine", "config", "ingest", "recall", "archival", "targets", "total_s"} <= set(report)
    assert [r["messages"] for r in report["ingest"]["messages"]] == report["config"]["message_sizes"]
    for row in report["ingest"]["messages"]:
        assert _positive(row["messages_per_s"]) and row["added"] > 0
    for row in report["ingest"]["archival"]:
        assert _positive(row["chunks_per_s"]) and row["added"] > 0
    assert [r["messages"] for r in report["recall"]] == report["config"]["message_sizes"]
    for row in report["recall"]:
        assert _positive(row["p50_ms"]) and _positive(row["p99_ms"]) and row["p99_ms"] >= row["p50_ms"]
        assert _positive(row["mean_hits"])
    assert [r["vectors"] for r in report["archival"]] == report["config"]["vector_sizes"]
    for row in report["archival"]:
        assert row["index"] == "ivf" and _positive(row["n_lists"]) and _positive(row["default_n_probe"])
        probes = [p["n_probe"] for p in row["sweep"]]
        assert probes == [*report["config"]["n_probes"], "default"]
        for point in row["sweep"]:
            assert _positive(point["p50_ms"]) and _positive(point["p99_ms"])
            assert 0 < point["recall_at_10"] <= 1
    assert [r["messages"] for r in report["agent"]] == report["config"]["agent_sizes"]
    for row in report["agent"]:
        assert row["index"] == "ivf" and 0 < row["vector_recall_at_10"] <= 1
        for mode in ("text", "vector", "hybrid"):
            m = row[mode]
            assert _positive(m["p50_ms"]) and m["p50_ms"] <= m["p95_ms"] <= m["p99_ms"] and _positive(m["mean_hits"])
    assert "recall BM25" in done.stdout and "archival top-10" in done.stdout and "one agent: hybrid" in done.stdout
    second_out = tmp_path / "second.json"
    _bench("--quick", "--skip", "recall", "--skip", "archival", "--store-dir", str(cache),
           "--dir", str(tmp_path / "second"), "--json", str(second_out))  # fmt: skip
    first, second = report["agent"][0], json.loads(second_out.read_text())["agent"][0]
    assert not first["store_cached"] and second["store_cached"]
    assert second["load_s"] == first["load_s"] and second["index_build_s"] == first["index_build_s"]
    assert second["vector_recall_at_10"] == first["vector_recall_at_10"]
    assert first["writer"] == "process" and first["writer_messages"] > 0 and second["writer_messages"] > 0
    [entry] = [p for p in cache.iterdir() if p.is_dir()]
    assert (entry / "ready.json").exists() and (entry / "agent.db").exists()
    # the cached store did not take the writer's messages: only its copies did
    assert json.loads((entry / "ready.json").read_text())["messages"] == first["messages"]
