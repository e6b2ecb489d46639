"""``scripts/eval_facts.py --quick`` as an operator runs it: facts kept from a LoCoMo replay carry
evidence pointers to real turns, and the report's figures are consistent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.eval_data import LOCOMO_DEV, needs_locomo_dev

ROOT = Path(__file__).resolve().parents[2]
DATA = LOCOMO_DEV

pytestmark = [pytest.mark.slow, needs_locomo_dev]


def test_quick_run_reports_coverage_of_evicted_observations(tmp_path: Path) -> None:
    out = tmp_path / "facts.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")} | {"HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "eval_facts.py"), "--data", str(DATA), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    overall, (conv,) = report["overall"], report["conversations"]
    assert conv["turns"] == 200 and conv["observations_evicted"] > 0 and conv["facts_kept"] > 0
    # Every pointer of a kept fact is a real turn: the coverage counts come from them.
    assert 0 < overall["covered_by_evidence"] <= overall["observations_evicted"]
    assert overall["covered_by_evidence_and_words"] <= overall["covered_by_evidence"]
    assert 0 < overall["evidence_pointers_fact_bearing"] <= overall["evidence_pointers"]
    assert 0.0 < overall["recall_by_evidence"] <= 1.0
