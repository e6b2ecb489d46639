"""A façade over fakeredis and a real SQLite store with agent "ann", for the structured-memory
tests (test_facts, test_entity_graph); modules with fixtures of these names keep their own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fakeredis
import pytest

from tests.hotpath.services import Clock, hash_embed
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore

MODEL = "vcm-demo-2k"


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
