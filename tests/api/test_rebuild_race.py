"""A FLUSHDB under concurrent requests: a request whose hot state went missing finds it rebuilt by
another request (or process) that got there first. It must go on with the rebuilt agent, not
answer 401 or 404 because it rebuilt nothing itself (the chaos run's FLUSHDB case saw 2 such 401s
in ~1 300 appends)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fakeredis
import pytest

from vcm.api.auth import TokenAuthority
from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.service import MemoryService
from vcm.settings import load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore

MODEL = "vcm-demo-2k"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = open_store(f"sqlite:///{tmp_path / 'vcm.db'}", text_index_lag_ok=False)
    yield s
    s.close()


def services(store: MemoryStore) -> tuple[fakeredis.FakeRedis, MemoryService, MemoryService]:
    """Two processes' services over one Redis and one store."""
    client = fakeredis.FakeRedis(decode_responses=True)
    cfg = load_settings(overrides={"durability": {"messages": "write_through"}}, environ={})
    return client, *(MemoryService(HotState(client, cfg), store, RecordingDispatcher()) for _ in range(2))  # type: ignore[return-value]


def test_a_token_check_after_another_request_rebuilt_the_agent_passes(store: MemoryStore) -> None:
    client, first, other = services(store)
    _, token = first.create_agent_with_token("ada", model=MODEL)
    client.flushdb()

    def rebuilt_by_someone_else(agent_id: str) -> bool:
        other.rebuild(agent_id)  # the concurrent request's rebuild lands first...
        return first.rebuild(agent_id)  # ...so this one rebuilds nothing (False)

    authority = TokenAuthority(first.hot.tokens, "0" * 64, rebuild=rebuilt_by_someone_else)
    assert authority.principal(f"Bearer {token}").agent_id == "ada"


def test_a_hot_call_after_another_request_rebuilt_the_agent_goes_on(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, first, other = services(store)
    first.create_agent("bea", model=MODEL)
    first.append("bea", "user", "Bea said this before the flush.")
    client.flushdb()
    rebuild = first.core.durable.rebuild

    def rebuilt_by_someone_else(agent_id: str) -> Any:
        other.rebuild(agent_id)
        return rebuild(agent_id)  # None: Redis has the agent again

    monkeypatch.setattr(first.core.durable, "rebuild", rebuilt_by_someone_else)
    res = first.append("bea", "user", "Bea said this after it.")
    assert [m.content for m in first.hot.snapshot("bea").fifo] == [
        "Bea said this before the flush.",
        "Bea said this after it.",
    ] and not res.replayed
