"""Two client instances of one agent, each in its own process (tests/api/sync_instance.py), with
local caches against one real server (uvicorn on a port): concurrent edits of the same key end as
each conflict strategy says, no acknowledged write is lost, every conflict is an audit event,
the change feed reaches the other instance's cache, and killing an instance (SIGKILL) loses only
the changes it had not flushed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from tests.api.conftest import ADMIN_TOKEN, LiveServer, api_settings, embed
from vcm.api.app import create_app
from vcm.cli.main import main as cli
from vcm.client import VcmClient
from vcm.dispatch import RecordingDispatcher
from vcm.errors import NotFound
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

AGENT = "shared"  # the agent of tests/api/sync_instance.py
ROOT = Path(__file__).resolve().parents[2]


class Proc:
    """A client instance process: one JSON command in, one JSON reply out."""

    def __init__(self, url: str, token: str) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-m", "tests.api.sync_instance", url, token],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        assert json.loads(self._line()) == {"ready": True}

    def _line(self) -> str:
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        assert line, f"instance process ended (rc {self.p.poll()})"
        return line

    def send(self, **cmd: Any) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")

    def reply(self) -> dict[str, Any]:
        return dict(json.loads(self._line()))

    def __call__(self, **cmd: Any) -> Any:
        self.send(**cmd)
        out = self.reply()
        return out.get("ok", out)

    def close(self) -> None:
        if self.p.poll() is None:
            self.send(op="exit")
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.p.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The API on a real port over one service; the agent and its token."""
    cfg = api_settings()
    store = open_store(str(tmp_path_factory.mktemp("sync") / "vcm.db"))
    service = MemoryService(HotState(fakeredis.FakeRedis(decode_responses=True), cfg), store, RecordingDispatcher(),
                            embed=embed)  # fmt: skip
    with LiveServer(create_app(service, None, settings=cfg)) as live:
        with VcmClient(live.url, ADMIN_TOKEN) as admin:
            token = admin.create_agent(AGENT)["token"]
        yield live.url, token
    store.close()


@pytest.fixture
def admin(server: tuple[str, str]) -> Iterator[VcmClient]:
    with VcmClient(server[0], ADMIN_TOKEN) as c:
        yield c


def _pair(server: tuple[str, str]) -> Iterator[tuple[Proc, Proc]]:
    a, b = Proc(*server), Proc(*server)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.fixture(scope="module")
def shared_pair(server: tuple[str, str]) -> Iterator[tuple[Proc, Proc]]:
    """Two instance processes for the strategy tests (each opens clients of its own in them)."""
    yield from _pair(server)


@pytest.fixture
def pair(server: tuple[str, str]) -> Iterator[tuple[Proc, Proc]]:
    """Two instance processes of the test's own (one gets killed)."""
    yield from _pair(server)


def _config(strategy: str, **extra: Any) -> dict[str, Any]:
    return {"conflict": strategy, "sync_interval_s": 0, **({"merge": "union"} if strategy == "merge" else {}), **extra}


def _conflicts(admin: VcmClient, key: str) -> list[dict[str, Any]]:
    items = admin.events(AGENT, kinds=["sync_conflict"], limit=1000)["items"]
    return [e["payload"] for e in items if e["payload"]["key"] == key]


def _eventually(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


# strategy -> (the key's final value, the conflict's resolution, the value the audit row keeps)
EXPECTED = {
    "reject": (["a", "seed"], "rejected", ["b", "seed"]),
    "last_write_wins": (["b", "seed"], "local_won", ["a", "seed"]),
    "merge": (["a", "b", "seed"], "merged", None),
}


@pytest.mark.parametrize("strategy", list(EXPECTED))
def test_an_edit_on_a_stale_version_ends_as_the_strategy_says(
    strategy: str, shared_pair: tuple[Proc, Proc], admin: VcmClient
) -> None:
    a, b = pair = shared_pair
    name = f"one-{strategy}"
    key = f"one-{strategy}"
    seed = admin.set_state(AGENT, key, ["seed"])
    for proc in pair:
        proc(op="open", name=name, config=_config(strategy))
        assert proc(op="get", name=name, key=key)["value"] == ["seed"]  # both caches hold the seed
    first = a(op="set", name=name, key=key, value=["a", "seed"])
    second = b(op="set", name=name, key=key, value=["b", "seed"])  # made on the seed: stale now

    final, resolution, kept = EXPECTED[strategy]
    now = admin.state(AGENT, key)
    assert now["value"] == final
    if strategy == "reject":
        error = second["error"]
        assert error["code"] == "REV_CONFLICT"
        assert error["local"]["value"] == ["b", "seed"] and error["local"]["version"] == seed["_rev"]
        assert error["remote"]["value"] == ["a", "seed"] and error["remote"]["version"] == first["_rev"]
    else:
        assert second["value"] == final and second["_rev"] == now["_rev"]
    (event,) = _conflicts(admin, key)
    assert event["strategy"] == strategy and event["resolution"] == resolution
    assert event["local"]["base_version"] == seed["_rev"] and event["remote"]["version"] == first["_rev"]
    assert event["remote"]["updated_at"] == pytest.approx(first["updated_at"])
    assert event.get("losing_value") == kept
    if strategy != "reject":  # B's write reaches A's cache through the change feed
        assert _eventually(lambda: now["_rev"] in [v for v, _ in a(op="seen", name=name, key=key)])
    assert a(op="get", name=name, key=key)["value"] == final


@pytest.mark.parametrize("strategy", list(EXPECTED))
def test_concurrent_edits_lose_no_acknowledged_write(
    strategy: str, shared_pair: tuple[Proc, Proc], admin: VcmClient
) -> None:
    a, b = pair = shared_pair
    name = f"many-{strategy}"
    key = f"many-{strategy}"
    admin.set_state(AGENT, key, [])
    for proc in pair:
        proc(op="open", name=name, config=_config(strategy))
        proc(op="get", name=name, key=key)  # both start from the same cached version
    a.send(op="append", name=name, key=key, n=15, tag="a")  # both at once
    b.send(op="append", name=name, key=key, n=15, tag="b")
    runs = [a.reply()["ok"], b.reply()["ok"]]
    acked = {token for run in runs for token, _ in run["acked"]}
    assert len(acked) == 30  # every write was acknowledged in the end

    final = set(admin.state(AGENT, key)["value"])
    events = _conflicts(admin, key)
    counted = sum(p(op="metrics", name=name)["conflicts"] for p in pair)
    assert len(events) == counted > 0  # every conflict recorded, once
    for e in events:
        assert e["strategy"] == strategy and e["remote"]["version"] and e["local"]["base_version"]
    if strategy == "last_write_wins":
        # An overwritten value is in the audit trail: no acknowledged token vanishes.
        overwritten = {t for e in events for t in e.get("losing_value") or []}
        assert acked <= final | overwritten
    else:
        assert acked <= final  # reject: refused writes were retried on a fresh read; merge: unions
    if strategy == "reject":
        assert sum(run["refused"] for run in runs) == len(events)


def test_killing_an_instance_loses_only_its_unflushed_changes(
    pair: tuple[Proc, Proc], admin: VcmClient, server: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = pair
    a(op="open", name="c", config={"write": "back", "sync_interval_s": 0, "instance_id": "machine-a"})
    b(op="open", name="c", config={"sync_interval_s": 0, "instance_id": "machine-b"})
    assert a(op="set", name="c", key="kept", value="flushed")["pending"] is True
    assert a(op="sync", name="c")["pushed"] == 1  # acknowledged by the server
    assert a(op="set", name="c", key="kept", value="unflushed")["pending"] is True
    assert a(op="set", name="c", key="lost", value="unflushed")["pending"] is True
    assert a(op="get", name="c", key="lost")["value"] == "unflushed"  # A reads its own pending change
    assert b(op="get", name="c", key="kept")["value"] == "flushed"
    assert b(op="get", name="c", key="lost")["error"]["code"] == "NOT_FOUND"

    os.kill(a.p.pid, signal.SIGKILL)
    a.p.wait()

    assert b(op="sync", name="c")["rejected"] == []
    for key, expected in (("kept", "flushed"), ("lost", None)):
        seen = b(op="get", name="c", key=key)
        if expected is None:
            assert seen["error"]["code"] == "NOT_FOUND"
            with pytest.raises(NotFound):
                admin.state(AGENT, key)
        else:
            assert seen["value"] == expected == admin.state(AGENT, key)["value"]
    # Both instances reported their status; `vcm instances` lists them.
    listed = {i["instance_id"]: i for i in admin.instances(AGENT)["instances"]}
    assert {"machine-a", "machine-b"} <= set(listed)
    assert listed["machine-a"]["syncs"] >= 1 and listed["machine-b"]["status"] == "synced"
    assert cli(["instances", "--agent", AGENT, "--api", server[0], "--token", server[1]]) == 0
    table = capsys.readouterr().out
    assert "machine-a" in table and "machine-b" in table and "synced" in table
