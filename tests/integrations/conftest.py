"""A real vcm server for the framework integrations: the HTTP API on uvicorn on a free port
(tests.api.conftest.LiveServer), over a MemoryService on the real Redis (``VCM_TEST_REDIS_URL``;
skipped, saying why, when it does not answer) and the embedded SQLite store, with the suite's
inline dispatcher and hashing embedder (tests/doubles)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.conftest import ADMIN_TOKEN, Ingest, LiveServer, api_settings, embed, executor_for
from tests.doubles.dispatcher import InlineDispatcher
from tests.redis_legs import real_redis
from vcm.api.app import create_app
from vcm.client import VcmClient
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.store import open_store


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    redis = real_redis()
    redis.flushdb()
    settings = api_settings()
    hot = HotState(redis, settings)
    store = open_store(str(tmp_path / "vcm.db"))
    service = MemoryService(hot, store, InlineDispatcher(hot, store, Ingest(store), clock=time.time), embed=embed)
    try:
        with LiveServer(create_app(service, executor_for(service), settings=settings)) as live:
            yield live
    finally:
        store.close()
        redis.flushdb()
        redis.close()


@pytest.fixture
def admin(server: LiveServer) -> Iterator[VcmClient]:
    with VcmClient(server.url, ADMIN_TOKEN, timeout=10) as client:
        yield client
