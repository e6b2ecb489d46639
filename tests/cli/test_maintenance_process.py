"""Embedded mode runs its own maintenance: one real ``vcm serve`` process, nothing else, with
retention of a few seconds; its in-process beat expires messages, facts, state and snapshots and
records it. ``vcm maintenance run --api`` then runs a job on that server and prints its outcome."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_restart import ADMIN, MODEL, VCM, Server, _env, _up, free_port, wait_until
from vcm.client import VcmClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_embedded_serve_expires_what_outlived_its_retention_by_itself(tmp_path: Path) -> None:
    port = free_port()
    env = _env(
        tmp_path,
        VCM_MAINTENANCE__RECALL_TTL_S="8",
        VCM_MAINTENANCE__EXPIRE_INTERVAL_S="1",
        VCM_DURABILITY__SNAPSHOT_TTL_S="8",
    )
    server = Server(tmp_path, env, [*VCM, "serve", "--port", str(port)], "serve")
    url = f"http://127.0.0.1:{port}"
    admin = VcmClient(url, ADMIN)
    try:
        server.start()
        wait_until(_up(port), 90, "vcm serve")
        admin.create_agent("ann", model=MODEL)
        for i in range(3):
            admin.append("ann", "user", f"Ann packed the kayak number {i} for the lake.")
        found = lambda: admin.search_recall("ann", "kayak", mode="text", limit=10)["items"] != []  # noqa: E731
        wait_until(found, 6, "the messages in recall before they expire")
        fact = admin.remember("ann", "Ann paddles on Sunday", type="goal", ttl_s=4)
        admin.set_state("ann", "step", 1, ttl_s=4)
        admin.create_snapshot("ann")

        def gone() -> bool:
            hits = admin.search_recall("ann", "kayak", mode="text", limit=10)["items"]
            snaps = admin.snapshots("ann")
            return not hits and "step" not in json.dumps(admin.state("ann")) and not snaps.get("snapshots", snaps)

        wait_until(gone, 30, "messages, state and snapshots past their retention to go")
        fact_id = fact.get("fact_id") or fact["fact"]["fact_id"]
        assert admin.fact("ann", fact_id)["status"] == "expired"
        expected = {"messages": 3, "state": 1, "snapshots": 1, "facts": 1}

        def recorded() -> dict[str, int]:
            rows = admin.all_events(kinds=["expire"], limit=1000)["items"]
            return {k: sum(int(r["payload"].get(k, 0)) for r in rows) for k in expected}

        # The snapshot listing hides an expired snapshot at once; its row goes at the next sweep.
        wait_until(lambda: recorded() == expected, 15, f"expire rows adding up to {expected}")
        runs = admin.all_events(kinds=["maintenance"], limit=100)["items"]
        assert any(r["actor"] == "worker:expire" and r["payload"]["trigger"] == "beat" for r in runs)

        # Run now, through the server: the CLI prints the job's outcome.
        out = subprocess.run(
            [*VCM, "maintenance", "run", "--job", "snapshot", "--api", url, "--token", ADMIN],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert json.loads(out) == {"job": "snapshot", "outcome": {"outcome": "snapshots", "taken": 1}}
    except BaseException:
        print(server.log())
        raise
    finally:
        server.kill()
