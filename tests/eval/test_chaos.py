"""A short chaos run (``scripts/chaos.py``): real API, worker, beat and Redis processes on loopback,
one SIGKILL of each kind and one FLUSHDB of the hot state during ~20 s of keyed appends, every
acknowledged key retried, one delete during an eviction, then the exactly-once audit.

The script does the work and writes its report as JSON; this test runs it as a process (as an
operator would) and asserts on the report. It starts a private ``redis-server`` and never touches
the shared one, so it is skipped only when that binary is missing. To fit the budget on two cores
the spool skips message embeddings (``--no-vectors``; evictions still summarise with the real
model) and the load starts before the workers have loaded the model. Six agents with one
appender each rather than fewer busier ones: the early evictions of an agent grow its summary,
and an install that pushes the context past the flush line begins a batch in the worker, so most
runs cover that way of beginning a batch too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "chaos.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(360),
    pytest.mark.skipif(
        shutil.which("redis-server") is None, reason="redis-server is not on PATH (the chaos run starts its own)"
    ),
]


def _summary(report: dict[str, Any]) -> str:
    keep = [
        *("acknowledged", "lost", "duplicated", "missing_flush_rows", "missing_evict_rows", "duplicated_flush_rows"),
        *("duplicated_evict_rows", "committed_batches", "drained", "faults", "unexpected_exits", "workdir"),
        *("missing_flush_causes", "flush_writers", "lost_examples", "duplicated_examples", "undrained"),
        *("not_ready_after_load", "unexpected_exit_log", "log_error_examples", "timing_s"),
        *("drain", "lost_within_window", "pending_at_end", "retries", "cross_agent_by_place", "delete_cycles"),
    ]
    return json.dumps({k: report[k] for k in keep}, indent=1, default=str)


def test_a_short_chaos_run_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    command = [
        sys.executable, str(SCRIPT), "--duration", "20", "--json", str(out), "--workdir", str(tmp_path / "run"),
        "--worker-kills", "1", "--api-kills", "1", "--redis-crashes", "1", "--flushdbs", "1", "--delete-cycles", "1",
        "--agents", "6", "--appenders", "1", "--pause", "0.1", "--no-vectors", "--no-wait-warm",
        "--settle", "15", "--drain-timeout", "120", "--startup-timeout", "120",
    ]  # fmt: skip
    # On a timeout subprocess.run SIGKILLs the script; its children die with it (setpriv --pdeathsig).
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=330)
    assert out.exists(), f"no report (exit {run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    report = json.loads(out.read_text())
    detail = f"{_summary(report)}\n{run.stdout[-3000:]}"

    assert report["faults"] == {"worker_kill": 1, "api_kill": 1, "redis_crash": 1, "flushdb": 1}, detail
    assert report["acknowledged"] > 0 and report["committed_batches"] > 0, detail
    assert report["drained"] and report["drain"]["drained"], detail
    # Nothing lost outside the contract's window (write-behind's 2 s before the FLUSHDB, the AOF's
    # second before the crash); pending batches are drained, so none is left to count apart.
    assert report["lost"] == 0 and report["duplicated"] == 0 and report["pending_at_end"] == 0, detail
    retries = report["retries"]
    assert retries["sent"] > 0 and retries["duplicated_by_retry"] == 0 and retries["wrong_id"] == 0, detail
    assert retries["replayed"] + retries["reappended"] == retries["sent"] - retries["failed"], detail
    # The deleted agent's rows never reach the agent re-created under its id.
    assert [c["recreated"] for c in report["delete_cycles"]] == [True], detail
    assert report["cross_agent_rows"] == 0, detail
    assert report["twice_acknowledged_keys"] == 0 and report["idempotency_violations"] == 0, detail
    # One flush and one evict row per committed batch (a batch begun by a summary install or by a
    # replayed request used to leave its flush row out).
    assert report["missing_flush_rows"] == 0, detail
    assert report["missing_evict_rows"] == 0, detail
    assert report["duplicated_flush_rows"] == 0 and report["duplicated_evict_rows"] == 0, detail
    assert run.returncode == (0 if report["ok"] else 1), detail
    # Every process of the run is gone: Redis names the run's directory in its arguments, and
    # the API and worker processes in their environment (the store URL).
    assert _processes_mentioning(str(tmp_path)) == [], "processes of the run survived it"


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if text.encode() in cmdline or text.encode() in environ:
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {command[:200]}")
    return found
