"""Shared fixtures. Integration tests run against the real Redis on 127.0.0.1:6379, against a
private three-master Redis Cluster, and the same suite against fakeredis; a real leg is skipped
(saying why) only when its server does not answer or cannot be started."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest
import redis

from tests.rediscluster import ClusterUnavailable, RedisClusterProcesses
from vcm.hotpath.connection import connect
from vcm.hotpath.state import HotState
from vcm.settings import Settings, load_settings

REDIS_URL = os.environ.get("VCM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# A cluster of your own (redis+cluster://host:port,...) instead of the private one the suite starts.
CLUSTER_URL = os.environ.get("VCM_TEST_REDIS_CLUSTER_URL", "")


def _real_redis() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.skip(f"real Redis at {REDIS_URL} is not answering ({exc}); real-server leg skipped")
    return client


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


def cluster_client(url: str) -> redis.Redis:
    client = connect(url, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        pytest.skip(f"Redis Cluster at {url} is not answering ({exc}); cluster leg skipped")
    return client


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={})


@pytest.fixture(params=["fakeredis", "redis", "cluster"])
def redis_client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    client: redis.Redis
    if request.param == "cluster":
        client = cluster_client(request.getfixturevalue("redis_cluster_url"))
    elif request.param == "redis":
        client = _real_redis()
    else:
        client = fakeredis.FakeRedis(decode_responses=True)
    client.flushdb()  # on a cluster: every master
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def hot(redis_client: redis.Redis, settings: Settings) -> HotState:
    return HotState(redis_client, settings)
