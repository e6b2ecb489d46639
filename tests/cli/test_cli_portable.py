"""``vcm export`` / ``vcm import`` between two embedded data directories, as separate processes
(issue 34, item 4): the file moves the agent, a second import of it changes nothing, an agent that
exists is refused, ``--as`` imports beside it, and a bad file is a coded error naming its line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def vcm(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env.update({"VCM_DATA_DIR": str(data), "VCM_LOG_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"})
    return subprocess.run(
        [sys.executable, "-m", "vcm.cli.main", *args], env=env, capture_output=True, text=True, timeout=240
    )


def ok(data: Path, *args: str) -> str:
    done = vcm(data, *args)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_export_and_import_move_an_agent_between_data_directories(tmp_path: Path) -> None:
    home, away = tmp_path / "home", tmp_path / "away"
    ok(home, "agents", "create", "zoe", "--model", "vcm-demo-2k", "--system", "Be brief.")
    ok(home, "facts", "remember", "Zoe prefers green tea at work", "--agent", "zoe", "--type", "preference")
    ok(home, "snapshots", "create", "--agent", "zoe", "--reason", "before the move")
    out = tmp_path / "zoe.jsonl"
    ok(home, "export", "--agent", "zoe", "--out", str(out))
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["kind"] == "header" and lines[0]["agent_id"] == "zoe" and lines[-1]["kind"] == "end"
    assert {x["kind"] for x in lines} >= {"agent", "fact", "snapshot"}

    first = json.loads(ok(away, "import", str(out)))
    assert first["agent_id"] == "zoe" and first["replayed"] is False and first["counts"]["facts"] == 1
    assert json.loads(ok(away, "import", str(out)))["replayed"] is True
    assert "Zoe prefers green tea at work" in ok(away, "facts", "list", "--agent", "zoe")
    context = json.loads(ok(away, "context", "--agent", "zoe", "--json"))
    assert context["messages"][0]["content"] == "Be brief."
    assert [s["reason"] for s in json.loads(ok(away, "snapshots", "list", "--agent", "zoe"))["snapshots"]] == [
        "before the move"
    ]

    refused = vcm(home, "import", str(out))  # zoe exists at home: never merged
    assert refused.returncode == 2 and "error CONFLICT" in refused.stderr
    beside = json.loads(ok(home, "import", str(out), "--as", "zoe-2"))
    assert beside["agent_id"] == "zoe-2" and beside["source_agent_id"] == "zoe"

    bad = tmp_path / "bad.jsonl"
    text = out.read_text().splitlines(keepends=True)
    bad.write_text("".join([text[0], "[1, 2]\n", *text[1:]]))
    refused = vcm(tmp_path / "third", "import", str(bad))
    assert refused.returncode == 2 and "error VALIDATION_ERROR: line 2:" in refused.stderr
    assert not (tmp_path / "third" / "vcm.db").exists() or "zoe" not in ok(tmp_path / "third", "agents", "list")
