"""``vcm report`` over a real service: hot state on real Redis (and fakeredis), a real SQLite
store, evictions committed by the cold path's own code. The figure must move with its signals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import redis

from tests.doubles.coldpath import MODEL, line, make_deps, small_settings
from tests.redis_legs import REDIS_URL
from vcm.errors import NotFound
from vcm.eval.report import build_report, render
from vcm.service import MemoryService
from vcm.store.types import MemoryEvent
from vcm.tasks import evict
from vcm.tasks.deps import Deps
from vcm.tasks.spool import spool_messages

AGENT = "rep-1"
ROOT = Path(__file__).resolve().parents[2]


class InlineSpool:
    """Spools at once like the write-behind; eviction batches wait for the test to commit them."""

    def __init__(self) -> None:
        self.deps: Deps | None = None

    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        assert self.deps is not None
        spool_messages(self.deps.hot, self.deps.store, agent_id, message_ids)

    def evict(self, agent_id: str, batch_id: int) -> None:
        pass


@pytest.fixture
def world(redis_client: redis.Redis, tmp_path: Path) -> Iterator[tuple[Deps, MemoryService]]:
    dispatcher = InlineSpool()
    deps = make_deps(tmp_path, client=redis_client, dispatcher=dispatcher)
    dispatcher.deps = deps
    service = MemoryService(deps.hot, deps.store, dispatcher, embed=deps.embed)
    service.create_agent(AGENT, model=MODEL, system_prompt="You are a careful assistant.")
    yield deps, service
    deps.store.close()


def converse_until(service: MemoryService, pending: int) -> int:
    i = 0
    while len(service.hot.pending_batches(AGENT)) < pending:
        service.append(AGENT, "user" if i % 2 else "assistant", line(i), idempotency_key=f"t{i}")
        i += 1
    return i


def figure(service: MemoryService, now: float | None = None) -> dict[str, object]:
    out = build_report(service, now=now).as_dict()["agents"][AGENT]
    assert isinstance(out, dict)
    return out


def test_report_moves_with_its_signals(world: tuple[Deps, MemoryService]) -> None:
    deps, service = world
    converse_until(service, 2)
    first, second = deps.hot.pending_batches(AGENT)[:2]
    assert evict.evict_batch(deps, AGENT, first).outcome == "committed"

    base = figure(service)
    f = base["factors"]
    assert isinstance(f, dict) and isinstance(base["conveyance"], float)
    assert 0.0 < base["conveyance"] <= 1.0 and base["zeroed_by"] == []
    assert f["R"] == 1.0  # every appended message is spooled
    drift = [e.payload["drift"] for e in deps.store.query_events(AGENT, ["evict"]).items]
    assert f["W"] == pytest.approx(drift[0], abs=1e-4)
    assert f["G"] < 1.0  # the pending batch is evicted but not yet linked to the summary

    # A batch left pending for a minute: T grows with its age and divides C.
    flushed = {e.payload["batch_id"]: e.created_at for e in deps.store.query_events(AGENT, ["flush"]).items}
    stale = figure(service, now=flushed[second] + 60.0)
    assert isinstance(stale["factors"], dict) and stale["factors"]["T"] == pytest.approx(60.0, abs=0.01)
    assert stale["conveyance"] < base["conveyance"] / 30  # type: ignore[operator]

    # Committing it links its messages (G back to 1) and brings T back.
    assert evict.evict_batch(deps, AGENT, second).outcome == "committed"
    done = figure(service)
    assert isinstance(done["factors"], dict) and done["factors"]["G"] == 1.0 and done["factors"]["T"] == 1.0

    # A chain stopped by a guard halves H (one of two chains yielded by the agent).
    for reason, n in (("explicit_yield", 1), ("depth", 2)):
        service.record_event(AGENT, "heartbeat_end", {"reason": reason}, event_id=f"{AGENT}:hb:{n}")
    guarded = figure(service)
    assert isinstance(guarded["factors"], dict) and guarded["factors"]["H"] == 0.5
    assert guarded["conveyance"] == pytest.approx(done["conveyance"] / 2, rel=1e-3)  # type: ignore[operator]

    # Naive chunking anywhere in this agent's archival memory zeroes it, and the overall figure.
    deps.store.append_event(MemoryEvent(AGENT, "compliance_violation", {"mode": "naive"}, event_id="naive-1"))
    report = build_report(service)
    assert report.agents[0].conveyance.value == 0.0 and report.overall.value == 0.0
    assert any("naive" in r for r in report.overall.zeroed_by)
    assert "zeroed by: naive-chunked archival documents ingested" in render(report)


def test_unreachable_store_zeroes_the_overall_figure(world: tuple[Deps, MemoryService]) -> None:
    deps, service = world
    converse_until(service, 1)
    assert build_report(service).overall.value > 0.0
    deps.store.close()
    report = build_report(service)
    assert report.overall.value == 0.0 and report.agents == []
    assert report.unreachable and any("unreachable" in r for r in report.overall.zeroed_by)


def test_naive_chunking_configured_zeroes_it(world: tuple[Deps, MemoryService], tmp_path: Path) -> None:
    deps, service = world
    converse_until(service, 1)
    naive = MemoryService(deps.hot, deps.store, service.dispatcher, embed=deps.embed)
    naive.settings = small_settings(ingest={"mode": "naive"})
    assert build_report(service).overall.value > 0.0
    assert build_report(naive).overall.value == 0.0


def test_unknown_agent_is_not_found(world: tuple[Deps, MemoryService]) -> None:
    _, service = world
    with pytest.raises(NotFound):
        build_report(service, ["nobody-here"])


def test_vcm_report_cli_prints_the_table_and_json(tmp_path: Path) -> None:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True, socket_connect_timeout=1)
    try:
        client.flushdb()
    except redis.exceptions.ConnectionError:
        pytest.skip(f"needs the real Redis at {REDIS_URL}: embedded hot state is private to each process")
    deps = make_deps(tmp_path, client=client, settings=small_settings(redis_url=REDIS_URL))
    service = MemoryService(deps.hot, deps.store, InlineSpool())
    service.create_agent(AGENT, model="vcm-demo-2k")  # a model of the default settings the CLI loads
    deps.store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    env.update(
        HF_HUB_OFFLINE="1",
        VCM_REDIS_URL=REDIS_URL,
        VCM_STORE_URL=f"sqlite:///{tmp_path / 'vcm.db'}",
    )

    def vcm(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "vcm.cli.main", "report", *args]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    table = vcm()
    assert table.returncode == 0, table.stderr
    assert "Conveyance C = (W*R*H/T) * Ctx^1.7" in table.stdout and AGENT in table.stdout
    doc = json.loads(vcm("--json", "--agent", AGENT).stdout)
    assert set(doc["agents"]) == {AGENT} and doc["alpha"] == 1.7
    assert doc["overall"]["conveyance"] == doc["agents"][AGENT]["conveyance"] > 0.0
    client.flushdb()
