"""Where the suite's Redis legs are: the real server (``VCM_TEST_REDIS_URL``, db 15 by default) and a
cluster of your own (``VCM_TEST_REDIS_CLUSTER_URL``), with clients that skip the test, saying why,
when their server does not answer. The fixtures over them are in tests/conftest.py."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from vcm.hotpath.connection import connect

# Under pytest-xdist (scripts/test runs the suite in worker processes gw0, gw1, ...) tests of
# different workers run at once, and tests flush their database: each worker has databases and
# loopback ports of its own, worker n the suite's database numbers minus n and ports 100 n higher.
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
assert WORKER < 6, "databases 15-n and 9-n of the shared server must not meet: at most 6 workers"


def worker_db(db: int) -> int:
    """This worker's database in place of the suite's ``db`` (15: the hot-state legs, 9: the CLI's)."""
    return db - WORKER


def worker_ports(first: int, count: int = 100) -> range:
    """This worker's share of loopback ports for private servers (a cluster's nodes, say)."""
    return range(first + count * WORKER, first + count * (WORKER + 1))


def _worker_url(url: str) -> str:
    parts = urlsplit(url)
    db = worker_db(int(parts.path.strip("/") or 0))
    assert db >= 0, f"{url}: too low a database number for xdist worker {WORKER} (it uses the number minus {WORKER})"
    return urlunsplit(parts._replace(path=f"/{db}"))


REDIS_URL = _worker_url(os.environ.get("VCM_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))
# The database of tests that start `vcm` processes on the shared server (their hot state).
CLI_REDIS_URL = _worker_url("redis://127.0.0.1:6379/9")
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
