"""The main job end to end: `vcm demo` on the embedded default, as the README's first command runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from vcm.eval.conversation import generate, parse_sample, session_time
from vcm.store import open_store

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
    # The product: the prompt built for one of the questions, its layers and relevant memory, dated.
    assert re.search(r"the prompt the model sees for \".+\" \(\d+ tokens\):", out)
    assert re.search(r"\n  summary +\d+ tokens: \w+:", out)
    assert re.search(r"\n  memory +\d+ tokens, \d+ lines:\n      - \[message m\d+, \w+, \d+ \w+ 2024", out), out[-2500:]
    # Each turn is dated by its session (created_at), not by when the demo ran: the prompt's
    # date markers and the summary's dates are the conversation's.
    conv = parse_sample(generate(seed=7)[0])
    store = open_store(f"sqlite:///{tmp_path}/vcm.db")
    try:
        (agent,) = [a.agent_id for a in store.list_agents() if a.agent_id.startswith("demo-")]
        said = {m.metadata.get("dia_id"): m for m in store.list_messages(agent, limit=1000)}
        for turn in conv.turns[:140]:
            start = session_time(turn.date_time)
            assert start is not None and start < said[turn.dia_id].created_at < start + 3600
        markers = [m.metadata.get("_vcm", {}).get("marker") for m in said.values()]
        assert "[Wed 17 January 2024, 1 week later]" in markers, sorted({str(m) for m in markers})
    finally:
        store.close()
