"""The append and the context read check the bearer token inside their own Redis call, and
``/healthz`` answers from memory. What those shortcuts must keep (a rotated or revoked token stops
working at once and changes nothing; a caller without an agent's token cannot learn whether the
agent exists) and what they save: Redis round trips, counted on the wire of a real Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis
from fastapi.testclient import TestClient

from tests.api.conftest import ADMIN, ADMIN_TOKEN, bearer, new_agent, state
from tests.doubles.clock import Clock
from tests.redis_legs import REDIS_URL, real_redis
from vcm.api.app import create_app
from vcm.api.health import HealthCache
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.service import MemoryService, tokens
from vcm.settings import load_settings
from vcm.store import open_store

MESSAGE = {"role": "user", "content": "a message of a few words"}


class CountingConnection(redis.Connection):
    """Counts writes to the socket: one per command, one per pipeline, i.e. one per round trip.
    The service's own background threads (named ``vcm-...``: write-behind, health refresh, turn
    keeper) are not the request's trips: the write-behind thread drains the appends while the next
    request runs, and on a loaded machine its reads landed inside a measured request."""

    writes = 0
    sent: ClassVar[list[str]] = []  # what was counted, for a failure's message

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        thread = threading.current_thread().name
        if not thread.startswith("vcm-"):
            CountingConnection.writes += 1
            head = command if isinstance(command, bytes) else b"".join(command[:2])
            CountingConnection.sent.append(f"{thread}: {head[:80]!r}")
        super().send_packed_command(command, check_health)


@pytest.fixture
def counted(tmp_path: Path) -> Iterator[tuple[TestClient, MemoryService]]:
    """The app on the real Redis through a counting connection, configured as in production
    (write-behind: the store is written by the cold path, not by the append)."""
    real_redis().flushdb()
    pool = redis.ConnectionPool.from_url(REDIS_URL, connection_class=CountingConnection, decode_responses=True)
    client = redis.Redis(connection_pool=pool)
    settings = load_settings(
        {"api": {"admin_token": ADMIN_TOKEN}, "durability": {"messages": "write_behind"}}, environ={}
    )
    store = open_store(str(tmp_path / "vcm.db"))
    service = MemoryService(HotState(client, settings), store, RecordingDispatcher())
    try:
        with TestClient(create_app(service, None, settings=settings)) as c:
            yield c, service
    finally:
        store.close()
        client.flushdb()
        client.close()


def round_trips(call: Any) -> tuple[Any, int]:
    before = CountingConnection.writes
    CountingConnection.sent = []
    result = call()
    return result, CountingConnection.writes - before


def test_an_append_and_a_context_read_are_one_round_trip_each(counted: tuple[TestClient, MemoryService]) -> None:
    client, _ = counted
    me = new_agent(client, "alice")
    # Warm: the scripts are loaded and the agent's model is known to this process.
    assert client.post("/v1/agents/alice/messages", json=MESSAGE, headers=me).status_code == 200
    assert client.get("/v1/agents/alice/context", headers=me).status_code == 200
    for headers in (me, ADMIN):
        r, trips = round_trips(lambda h=headers: client.post("/v1/agents/alice/messages", json=MESSAGE, headers=h))
        assert r.status_code == 200 and trips == 1, (r.text, CountingConnection.sent)
        r, trips = round_trips(lambda h=headers: client.get("/v1/agents/alice/context", headers=h))
        assert r.status_code == 200 and trips == 1, (r.text, CountingConnection.sent)
        assert r.json()["messages"][-1]["content"] == MESSAGE["content"]
    # A process that has not seen the agent yet reads its model with the token, in one more trip,
    # and the time of the FIFO's newest message (for the date markers, vcm.hotpath.timeline) in one.
    app2 = create_app(
        MemoryService(HotState(counted[1].hot.redis, counted[1].settings), counted[1].store, RecordingDispatcher()),
        None,
        settings=counted[1].settings,
    )
    with TestClient(app2) as fresh:
        r, trips = round_trips(lambda: fresh.post("/v1/agents/alice/messages", json=MESSAGE, headers=me))
        assert r.status_code == 200 and trips == 3, (r.text, CountingConnection.sent)


def test_healthz_answers_from_memory_and_readyz_probes(counted: tuple[TestClient, MemoryService]) -> None:
    client, _ = counted
    first, _ = round_trips(lambda: client.get("/healthz"))  # the first ask probes
    assert first.status_code == 200 and first.json()["redis"]["ok"] is True
    answers, trips = round_trips(lambda: [client.get("/healthz") for _ in range(20)])
    # From memory: no probe per request. On a loaded machine the 20 asks may outlast the report's
    # max age (1 s), which starts one background refresh, so at most one round trip.
    assert trips <= 1 and all(a.json()["redis"]["ok"] is True for a in answers)
    ready, trips = round_trips(lambda: client.get("/readyz"))
    assert ready.status_code == 200 and ready.json() == first.json() and trips == 1  # the PING


def test_a_rotated_token_stops_working_on_the_hot_routes_at_once(client: TestClient, service: MemoryService,
                                                                 dispatcher: RecordingDispatcher) -> None:  # fmt: skip
    old = new_agent(client, "alice")
    assert client.post("/v1/agents/alice/messages", json=MESSAGE, headers=old).status_code == 200
    new = bearer(client.post("/v1/agents/alice/token", headers=ADMIN).json()["token"])
    before = state(service, dispatcher)
    for method, path, body in (("POST", "/messages", MESSAGE), ("GET", "/context", None)):
        r = client.request(method, "/v1/agents/alice" + path, json=body, headers=old)
        assert r.status_code == 401, r.text
        assert r.json() == {"error": {"code": "UNAUTHORIZED", "message": "invalid bearer token"}}
        assert r.headers["WWW-Authenticate"] == 'Bearer realm="vcm"'
    assert state(service, dispatcher) == before
    assert client.post("/v1/agents/alice/messages", json=MESSAGE, headers=new).status_code == 200
    assert [m["content"] for m in client.get("/v1/agents/alice/context", headers=new).json()["messages"][1:]] == [
        MESSAGE["content"]
    ] * 2


@pytest.mark.parametrize("path", ["/messages", "/context"])
def test_a_forged_token_reveals_nothing_about_the_agent_it_names(
    client: TestClient, service: MemoryService, dispatcher: RecordingDispatcher, path: str
) -> None:
    me = new_agent(client, "alice")
    method, body = ("POST", MESSAGE) if path == "/messages" else ("GET", None)
    forged = {agent: bearer(tokens.agent_token(agent)) for agent in ("alice", "ghost")}
    before = state(service, dispatcher)
    for warm in (False, True):  # before and after this process has seen alice
        for agent, headers in forged.items():
            r = client.request(method, f"/v1/agents/{agent}{path}", json=body, headers=headers)
            assert r.status_code == 401, (agent, r.text)  # never 404 for the agent that does not exist
            assert r.json()["error"]["code"] == "UNAUTHORIZED"
        assert state(service, dispatcher) == before
        if not warm:
            assert client.request(method, f"/v1/agents/alice{path}", json=body, headers=me).status_code == 200
            before = state(service, dispatcher)


# --- the health report kept in memory -------------------------------------------------------


def test_the_health_report_is_refreshed_in_the_background_and_goes_stale() -> None:
    clock, probes, gate = Clock(now=100.0), [], threading.Event()
    gate.set()

    def probe() -> dict[str, Any]:
        gate.wait(10)
        probes.append(clock.now)
        return {"ok": True, "redis": True, "store": True, "store_backend": "embedded", "n": len(probes)}

    cache = HealthCache(probe, max_age_s=1.0, stale_after_s=10.0, clock=clock)
    assert cache.cached() is None  # nothing probed yet: the route probes once itself
    assert cache.refresh()["n"] == 1
    clock.now += 0.5
    assert cache.cached() == cache.cached() and len(probes) == 1  # young: no probe
    clock.now += 1.0
    assert cache.cached()["n"] == 1  # old: answered at once, a refresh starts behind it
    deadline = time.monotonic() + 5
    while cache.cached()["n"] == 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.cached()["n"] == 2 and len(probes) == 2
    # A probe that hangs (a Redis that stopped answering): the report goes stale, then not ok.
    gate.clear()
    clock.now += 2.0
    assert cache.cached()["ok"] is True  # the hung refresh started; one at a time
    clock.now += 9.0
    stale = cache.cached()
    assert stale is not None and stale["ok"] is False and len(probes) == 2
    gate.set()


def test_an_idle_server_answers_from_a_new_probe_not_a_stale_report() -> None:
    clock = Clock(now=100.0)
    probes: list[float] = []

    def probe() -> dict[str, Any]:
        probes.append(clock.now)
        return {"ok": True, "redis": True, "store": True, "store_backend": "embedded"}

    cache = HealthCache(probe, max_age_s=1.0, stale_after_s=10.0, clock=clock)
    cache.refresh()
    clock.now += 30.0  # nobody asked for 30 s: no probe is in flight
    assert cache.cached() is None  # the route probes now instead of answering a 30 s old report
    assert cache.refresh()["ok"] is True and probes == [100.0, 130.0]
    assert cache.cached() is not None and cache.cached()["ok"] is True


def test_healthz_after_30_s_idle_answers_200(client: TestClient) -> None:
    cache = client.app.state.vcm.health  # type: ignore[attr-defined]
    clock = Clock(now=1000.0)
    cache._clock = clock  # the app's own cache, on a clock the test moves
    assert client.get("/healthz").status_code == 200
    clock.now += 30.0
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["ok"] is True
