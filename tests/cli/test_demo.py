"""The main job end to end: `vcm demo` on the embedded default, as the README's first command runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_vcm_demo_accounts_for_every_message(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env.update(HF_HUB_OFFLINE="1", VCM_STORE_URL=f"sqlite:///{tmp_path}/vcm.db")
    proc = subprocess.run(
        [sys.executable, "-m", "vcm.cli.main", "demo", "--limit", "140"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(r"eviction\s+batch 1: \d+ messages", out)
    assert re.search(r"summary\s+v1 after batch 1", out)
    # Each turn is appended with its speaker's name: summary lines say who, never "user:".
    summaries = re.findall(r"summary\s+v\d+ after batch \d+ \(\d+ tokens\): (\w+):", out)
    assert summaries and not {"user", "assistant"} & set(summaries), summaries
    acct = re.search(r"accounting: (\{.*\})", out)
    assert acct is not None
    numbers = dict(re.findall(r"'(\w+)': (\d+)", acct.group(1)))
    assert numbers["unaccounted"] == "0" and numbers["pending_eviction"] == "0"
    assert int(numbers["in_fifo"]) + int(numbers["committed_to_recall"]) == int(numbers["appended"])
    assert int(numbers["spooled_to_store"]) == int(numbers["appended"])
    assert re.search(r"recall: \d+\.\d% of evidence turns found in the top 10", out)
