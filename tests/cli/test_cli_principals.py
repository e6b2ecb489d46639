"""``vcm users`` / ``vcm domains`` / ``vcm principals`` and ``vcm facts remember --scope`` on an
embedded data directory, as separate processes (issue 37)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli_agents import vcm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_a_users_fact_written_from_the_command_line_reaches_its_other_agent(tmp_path: Path) -> None:
    for agent in ("ann", "bob"):
        vcm(tmp_path, "agents", "create", agent, "--model", "vcm-demo-2k")
    assert json.loads(vcm(tmp_path, "users", "create", "alice"))["name"] == "alice"
    for agent in ("ann", "bob"):
        assert json.loads(vcm(tmp_path, "principals", agent, "--user", "alice"))["user_id"] == "alice"
    kept = json.loads(vcm(tmp_path, "facts", "remember", "Alice likes tea", "--agent", "ann", "--scope", "user"))
    assert (kept["fact"]["scope"], kept["fact"]["status"]) == ("user", "active")  # the operator's word
    listed = json.loads(vcm(tmp_path, "facts", "list", "--agent", "bob"))["facts"]
    assert [(f["value"], f["scope"]) for f in listed] == [("Alice likes tea", "user")]
    assert json.loads(vcm(tmp_path, "users", "delete", "alice"))["removed"] == {"facts": 1}
    assert json.loads(vcm(tmp_path, "facts", "list", "--agent", "bob"))["facts"] == []
    assert json.loads(vcm(tmp_path, "principals", "bob")) == {"agent_id": "bob", "user_id": None, "domain": None}
    assert json.loads(vcm(tmp_path, "users", "list"))["principals"] == []
