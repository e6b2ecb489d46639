"""Shared fixtures. Integration tests run against the real Redis on 127.0.0.1:6379 and the same
suite against fakeredis; the real leg is skipped (saying why) only when no server answers."""

from __future__ import annotations

import os
from collections.abc import Iterator

import fakeredis
import pytest
import redis

from vcm.hot.state import HotState
from vcm.settings import Settings, load_settings

REDIS_URL = os.environ.get("VCM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _real_redis() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.skip(f"real Redis at {REDIS_URL} is not answering ({exc}); real-server leg skipped")
    return client


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={})


@pytest.fixture(params=["fakeredis", "redis"])
def redis_client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    client: redis.Redis
    client = _real_redis() if request.param == "redis" else fakeredis.FakeRedis(decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def hot(redis_client: redis.Redis, settings: Settings) -> HotState:
    return HotState(redis_client, settings)
