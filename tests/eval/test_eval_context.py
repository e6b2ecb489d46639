"""``scripts/eval_context.py`` on a slice of LoCoMo as an operator runs it: the report has every
level per category, and each level holds at least what the one below it holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.eval_data import LOCOMO_DEV, needs_locomo_dev
from vcm.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
DATA = LOCOMO_DEV

pytestmark = [pytest.mark.slow, needs_locomo_dev]


def test_slice_reports_evidence_present_per_level(tmp_path: Path) -> None:
    out = tmp_path / "context.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")} | {"HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "eval_context.py"), "--data", str(DATA), "--quick",
         "--questions", "40", "--json", str(out)],
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(c) builder" in done.stdout
    report = json.loads(out.read_text())
    (conv,) = report["conversations"].values()
    assert conv["turns"] == 200 and conv["evictions"] > 0 and conv["questions"] == 40
    presence = report["presence"]
    assert presence["all"]["n"] == 40 and sum(e["n"] for g, e in presence.items() if g != "all") == 40
    for entry in presence.values():
        fifo, summary, builder = (entry[level] for level in ("fifo", "fifo+summary", "builder"))
        for key in ("mean_pct", "all_present_pct"):
            assert 0.0 <= fifo[key] <= summary[key] <= builder[key] <= 100.0
    overall = presence["all"]
    # Most evidence of the slice was evicted, and relevant memory brought some of it back.
    assert overall["evidence_evicted"] > 0
    assert sum(n for source, n in overall["held_by"].items() if source.startswith("memory:")) > 0
    budget = load_settings(environ={}).context.memory * 4096
    assert 0 < overall["tokens"]["memory"] <= budget  # within the memory layer's budget
    # The summary rule finds no more of the turns no summary holds than of the evicted ones.
    check = conv["summary_rule_check"]["piece"]
    assert check["fifo_pct"] < check["evicted_pct"]
