"""Where the suite's Redis legs are: the real server (``VCM_TEST_REDIS_URL``, db 15 by default) and a
cluster of your own (``VCM_TEST_REDIS_CLUSTER_URL``), with clients that skip the test, saying why,
when their server does not answer. The fixtures over them are in tests/conftest.py."""

from __future__ import annotations

import os

import pytest
import redis

from vcm.hotpath.connection import connect

REDIS_URL = os.environ.get("VCM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# A cluster of your own (redis+cluster://host:port,...) instead of the private one the suite starts.
CLUSTER_URL = os.environ.get("VCM_TEST_REDIS_CLUSTER_URL", "")


def real_redis() -> redis.Redis:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.skip(f"real Redis at {REDIS_URL} is not answering ({exc}); real-server leg skipped")
    return client


def cluster_client(url: str) -> redis.Redis:
    client = connect(url, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        pytest.skip(f"Redis Cluster at {url} is not answering ({exc}); cluster leg skipped")
    return client
