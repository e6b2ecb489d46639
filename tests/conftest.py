"""Shared fixtures. Integration tests run against the real Redis on 127.0.0.1:6379, against a
private three-master Redis Cluster, and the same suite against fakeredis; a real leg is skipped
(saying why) only when its server does not answer or cannot be started (tests/redis_legs.py).

``store``, ``clock`` and ``svc`` are a façade over fakeredis and a real SQLite store with agent
"ann", for the structured-memory and change-feed tests (tests/facts, tests/service,
tests/hotpath); modules and directories with fixtures of these names keep their own."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
import redis

from tests.doubles.clock import Clock
from tests.doubles.embedder import hash_embed
from tests.redis_legs import CLUSTER_URL, cluster_client, real_redis
from tests.rediscluster import ClusterUnavailable, RedisClusterProcesses
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore

MODEL = "vcm-demo-2k"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order in which scripts/test's xdist workers take whole files (``--dist loadfile
    --no-loadscope-reorder``): files with ``slow`` tests first, then the others by their number of
    tests, so that no long file is handed out last to keep one worker busy while the other idles.
    The sort is stable: a file's tests keep their order and stay together."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    tests_in = Counter(item.path for item in items)
    items.sort(key=lambda item: (item.path not in slow, -tests_in[item.path]))


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A three-master Redis Cluster of private redis-server processes, started once per session."""
    if CLUSTER_URL:
        yield CLUSTER_URL
        return
    cluster = RedisClusterProcesses(Path(tmp_path_factory.mktemp("redis-cluster")))
    try:
        try:
            url = cluster.start()
        except ClusterUnavailable as exc:
            pytest.skip(f"no Redis Cluster could be started ({exc}); cluster leg skipped")
        yield url
    finally:
        cluster.stop()


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={})


@pytest.fixture(params=["fakeredis", "redis", "cluster"])
def redis_client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    client: redis.Redis
    if request.param == "cluster":
        client = cluster_client(request.getfixturevalue("redis_cluster_url"))
    elif request.param == "redis":
        client = real_redis()
    else:
        client = fakeredis.FakeRedis(decode_responses=True)
    client.flushdb()  # on a cluster: every master
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def hot(redis_client: redis.Redis, settings: Settings) -> HotState:
    return HotState(redis_client, settings)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    s = open_store(f"sqlite:///{tmp_path / 'vcm.db'}", text_index_lag_ok=False)
    yield s
    s.close()


@pytest.fixture
def clock() -> Clock:
    return Clock(step=0.01)


@pytest.fixture
def svc(store: MemoryStore, clock: Clock) -> MemoryService:
    service = MemoryService(
        HotState(fakeredis.FakeRedis(decode_responses=True), load_settings(environ={}), clock=clock),
        store,
        RecordingDispatcher(),
        embed=hash_embed,
        clock=clock,
    )
    service.create_agent("ann", model=MODEL)
    return service
