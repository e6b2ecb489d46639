"""``vcm agents`` / ``vcm snapshots`` / ``vcm context`` / ``vcm facts`` on an embedded data directory, as separate
processes: each one rebuilds what it needs from the store, no server running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.doubles.llm import FakeLLM, streamed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def vcm(data: Path, *args: str, **extra_env: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env.update({"VCM_DATA_DIR": str(data), "VCM_LOG_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1", **extra_env})
    done = subprocess.run(
        [sys.executable, "-m", "vcm.cli.main", *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_agents_and_snapshots_live_in_the_data_directory(tmp_path: Path) -> None:
    created = json.loads(vcm(tmp_path, "agents", "create", "zoe", "--model", "vcm-demo-2k", "--system", "Be brief."))
    assert created["agent_id"] == "zoe" and created["token"].startswith("vcm_")
    assert json.loads(vcm(tmp_path, "agents", "list"))["agents"] == ["zoe"]
    snap = json.loads(vcm(tmp_path, "snapshots", "create", "--agent", "zoe", "--reason", "first"))
    listed = json.loads(vcm(tmp_path, "snapshots", "list", "--agent", "zoe"))["snapshots"]
    assert [s["snapshot_id"] for s in listed] == [snap["snapshot_id"]] and listed[0]["reason"] == "first"
    context = json.loads(vcm(tmp_path, "context", "--agent", "zoe", "--json"))
    assert context["gauges"]["system"] > 0 and context["messages"][0]["content"] == "Be brief."
    assert (tmp_path / "vcm.db").exists()
    kept = json.loads(vcm(tmp_path, "facts", "remember", "Maya is Priya's sister", "--agent", "zoe",
                          "--type", "relation", "--key", "Priya|sister|Maya"))  # fmt: skip
    assert kept["fact"]["status"] == "shadow"  # structure written online waits for a person's word
    promoted = json.loads(vcm(tmp_path, "facts", "promote", kept["fact"]["fact_id"], "--agent", "zoe"))
    assert promoted["fact"]["status"] == "active"
    around = json.loads(vcm(tmp_path, "facts", "entity", "priya", "--agent", "zoe"))
    assert [n["key"] for n in around["neighbours"]] == ["maya"] and around["relations"][0]["type"] == "relation"
    # A terminal chat turn over a local OpenAI-compatible model: streamed (a memory tag cut across
    # deltas never shows), then kept in memory.
    llm = FakeLLM([streamed("Hello ", "Priya! [MEMORY:rel", "ation]Maya is Priya's sister[/MEMORY]")])
    try:
        said = vcm(tmp_path, "chat", "--agent", "zoe", "--name", "Priya", "--message", "Hi, who is Maya?",
                   VCM_CHAT__BASE_URL=llm.url)  # fmt: skip
    finally:
        llm.close()
    assert said.strip() == "zoe> Hello Priya!"
    sent = [m["content"] for m in llm.requests[0]["messages"]]
    assert sent[0] == "Be brief." and sent[-1] == "Hi, who is Maya?" and any("Maya" in c for c in sent[1:-1])
    removed = json.loads(vcm(tmp_path, "agents", "delete", "zoe"))["removed"]
    assert removed.get("agents") == 1
    assert json.loads(vcm(tmp_path, "agents", "list"))["agents"] == []
