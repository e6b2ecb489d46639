"""Cold-path wiring for tests: small settings, a ready Deps (fakeredis or a given client, a real
SQLite store, a recording dispatcher, the 64-dimensional :data:`~tests.doubles.embedder.word_embed`,
the extractive summariser), and a varied, deterministic conversation."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import fakeredis
import redis

from tests.doubles.embedder import word_embed
from vcm.dispatch import Dispatcher, RecordingDispatcher
from vcm.durable import agent_config
from vcm.hotpath.state import HotState
from vcm.settings import Settings, load_settings
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.tasks.deps import Deps
from vcm.tasks.faults import Faults
from vcm.tasks.recall.vectors import Vectorizer
from vcm.tasks.summary.recursive import extractive
from vcm.types import AgentInfo, AppendResult

MODEL = "vcm-test-512"
DIM = word_embed.dim  # the width of the cold path's vectors


def small_settings(**overrides: object) -> Settings:
    # The cold-path scenarios are tuned to the budget's lines on a 512-token window; the room the
    # context builder keeps (memory_reserve) would move the flush line to 10 % above warning.
    budget = {"memory_reserve": 0.0, **dict(overrides.pop("budget", {}))}  # type: ignore[call-overload]
    return load_settings(overrides={"models": {MODEL: 512}, "budget": budget, **overrides}, environ={})


def make_deps(
    tmp_path: Path,
    *,
    settings: Settings | None = None,
    client: redis.Redis | None = None,
    faults: Faults | None = None,
    dispatcher: Dispatcher | None = None,
    vectorizer: Vectorizer | None = None,
) -> Deps:
    settings = settings or small_settings()
    faults = faults or Faults()
    return Deps(
        settings=settings,
        hot=HotState(client or fakeredis.FakeRedis(decode_responses=True), settings),
        store=open_store(f"sqlite:///{tmp_path / 'vcm.db'}", fault_hook=faults.store_hook, text_index_lag_ok=False),
        dispatcher=dispatcher or RecordingDispatcher(),
        embed=word_embed,
        summarizer=extractive,
        faults=faults,
        vectorizer=vectorizer,
    )


class Meanwhile(Faults):
    """Fault points that run ``action`` once, the first time a job reaches ``point`` (then behave
    as no rules): what happens "meanwhile", between a job's read of its work and its writes."""

    def __init__(self, point: str, action: Callable[[], object]) -> None:
        super().__init__()
        self.at = point
        self.action: Callable[[], object] | None = action

    def __bool__(self) -> bool:
        return True

    def point(self, name: str, agent_id: str | None = None) -> None:
        if name == self.at and self.action is not None:
            action, self.action = self.action, None
            action()


def create_agent(
    hot: HotState,
    store: MemoryStore,
    agent_id: str,
    *,
    model: str = MODEL,
    system_prompt: str = "",
    tools: Sequence[Mapping[str, Any]] = (),
) -> AgentInfo:
    """An agent as the service creates it, for cold-path tests that skip the façade: its hot state
    and its store record, with one new incarnation (every cold-path store write checks it, and
    fails for an agent without a record: a deleted one)."""
    info = hot.create_agent(
        agent_id, model=model, system_prompt=system_prompt, tools=tools, incarnation=uuid.uuid4().hex
    )
    store.put_agent(agent_id, agent_config(info.model, system_prompt, tools), incarnation=hot.incarnation(agent_id))
    return info


TOPICS = [
    "Alice moved the launch of Project Falcon to May {n}.",
    "Bob said the invoice INV-{n} is still unpaid.",
    "We talked about the weather, which was mild.",
    "Carol will send the contract to legal on day {n}.",
    "The build {n} failed on the arm64 runner.",
    "Thanks, that sounds good to me.",
]


def line(i: int) -> str:
    """A varied, deterministic conversation line."""
    return f"{TOPICS[i % len(TOPICS)].format(n=i)} Note {i}: keep an eye on it."


def converse(hot: HotState, agent_id: str, count: int, start: int = 0) -> list[AppendResult]:
    """Append ``count`` alternating user/assistant lines; returns every append result."""
    results = []
    for i in range(start, start + count):
        role = "user" if i % 2 == 0 else "assistant"
        results.append(hot.append(agent_id, role, line(i), name="alice" if role == "user" and i % 4 == 0 else None))
    return results


def appended_ids(results: Sequence[AppendResult]) -> list[str]:
    """Every message id the appends created (memory-pressure notices included)."""
    ids: list[str] = []
    for r in results:
        ids.append(r.message_id)
        if r.pressure_message_id:
            ids.append(r.pressure_message_id)
    return ids
