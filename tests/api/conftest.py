"""A real MemoryService behind the app: hot state on fakeredis and on the real Redis (db 15, via the
parametrised ``redis_client`` fixture of tests/conftest.py), the embedded store in tmp_path, a
recording dispatcher that runs ingestion jobs inline, and a deterministic 32-dimensional hashing
embedder instead of a model (tests/doubles)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import redis
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import ASGIApp

from tests.doubles.dispatcher import InlineDispatcher
from tests.doubles.embedder import split_embed
from tests.doubles.ingester import ParagraphIngest
from tests.doubles.llm import FakeLLM
from vcm.api.app import ToolRunner, create_app
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore

ADMIN_TOKEN = "test-admin-token-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


embed = split_embed  # each word hashed into one of 32 buckets; unit length
Ingest = ParagraphIngest  # paragraphs become chunks, embedded with `embed`, stored through the port


def api_settings(**api: Any) -> Settings:
    return load_settings({"api": {"admin_token": ADMIN_TOKEN, **api}}, environ={})


@pytest.fixture
def settings() -> Settings:
    return api_settings()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    st = open_store(str(tmp_path / "vcm.db"))
    yield st
    st.close()


@pytest.fixture
def hot(redis_client: redis.Redis, settings: Settings) -> HotState:
    return HotState(redis_client, settings)


@pytest.fixture
def dispatcher(hot: HotState, store: MemoryStore) -> InlineDispatcher:
    # Records spools and evictions; runs each archival ingestion job at once, in the caller's thread.
    return InlineDispatcher(hot, store, Ingest(store), clock=time.time)


@pytest.fixture
def service(hot: HotState, store: MemoryStore, dispatcher: InlineDispatcher) -> MemoryService:
    return MemoryService(hot, store, dispatcher, embed=embed)


def executor_for(service: MemoryService) -> ToolRunner | None:
    try:
        from vcm.tools.executor import ToolExecutor
    except ImportError:  # the executor lands in another change; tool-call tests skip until then
        return None
    return ToolExecutor(service)  # type: ignore[return-value]


@pytest.fixture
def app(service: MemoryService, settings: Settings) -> FastAPI:
    return create_app(service, executor_for(service), settings=settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    # raise_server_exceptions: a genuine bug (the catch-all's 500) fails the test with its traceback.
    with TestClient(app, raise_server_exceptions=True) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def new_agent(client: TestClient, agent_id: str, **body: Any) -> dict[str, str]:
    """Create an agent as admin; its auth headers."""
    r = client.post("/v1/agents", json={"agent_id": agent_id, **body}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return bearer(r.json()["token"])


def state(service: MemoryService, dispatcher: RecordingDispatcher) -> dict[str, Any]:
    """Everything a request could change: every Redis key (idempotency records and tokens too),
    the store's counts, and what was dispatched to the cold path."""
    r = service.hot.redis
    keys: dict[str, Any] = {}
    for k in sorted(r.scan_iter(match="vcm*")):
        kind = r.type(k)
        if kind == "hash":
            keys[k] = r.hgetall(k)
        elif kind == "list":
            keys[k] = r.lrange(k, 0, -1)
        elif kind == "zset":
            keys[k] = r.zrange(k, 0, -1, withscores=True)
        elif kind == "set":
            keys[k] = sorted(r.smembers(k))
        elif kind == "stream":  # the agent's change feed
            keys[k] = r.xrange(k)
        else:
            keys[k] = r.get(k)
    stats = service.store.stats()
    counts = ("messages", "archival_chunks", "events", "edges", "committed_batches", "core_blocks", "summaries")
    store = {k: stats[k] for k in counts}
    # Refusals and failed tool calls are audited by design (`error` rows with the code and numbers),
    # and a failed call starts a heartbeat chain (`hb_start`): rows that record a request, not a
    # change of memory, so they do not count as a change here.
    requests = service.store.query_events(None, ["error", "hb_start", "heartbeat_end"], limit=1000).items
    store["events"] -= len(requests)
    return {
        "redis": keys,
        # Counts only: file sizes and the text index's progress move on their own.
        "store": store,
        "spooled": list(dispatcher.spooled),
        "evictions": list(dispatcher.evictions),
    }


@dataclass
class LiveServer:
    """The app on a real uvicorn server on 127.0.0.1, in a thread."""

    app: FastAPI | ASGIApp
    url: str = ""
    lifespan: Literal["on", "off"] = "off"  # "on" for an app whose lifespan starts what it serves (the MCP app)
    _server: uvicorn.Server | None = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __enter__(self) -> LiveServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan=self.lifespan)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)


@pytest.fixture
def live(app: FastAPI) -> Iterator[LiveServer]:
    with LiveServer(app) as server:
        yield server


@pytest.fixture
def upstream() -> Iterator[FakeLLM]:
    """A local OpenAI-compatible fake that records what it is sent (the chat and proxy suites)."""
    server = FakeLLM([])
    yield server
    server.close()


def upstream_settings(upstream: FakeLLM) -> Settings:
    """The API's settings with chat pointed at ``upstream``, no retries. A suite that talks to the
    fake binds it as its ``settings`` fixture: ``settings = pytest.fixture(upstream_settings, name="settings")``."""
    s = api_settings()
    return s.model_copy(update={"chat": s.chat.model_copy(update={"base_url": upstream.url, "max_retries": 0})})
