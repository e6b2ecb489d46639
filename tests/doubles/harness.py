"""A MemoryService on a real embedded store, with the doubles of this package for the embedding
model, the archival ingester and the cold path, plus a ToolExecutor, with shorthands for tests."""

from __future__ import annotations

from typing import Any

from tests.doubles.clock import Clock
from tests.doubles.dispatcher import InlineDispatcher
from tests.doubles.embedder import hash_embed
from tests.doubles.ingester import SentenceIngest
from vcm.hotpath.state import HotState


class Harness:
    """A MemoryService on a real embedded store plus a ToolExecutor, with shorthands for tests."""

    def __init__(self, hot: HotState, path: str, *, clock: Clock | None = None, ingest: Any = None) -> None:
        from vcm.service import MemoryService
        from vcm.store import open_store
        from vcm.tools.executor import ToolExecutor

        self.hot = hot
        self.store = open_store(path)
        self.ingest = ingest(self.store) if ingest is not None else SentenceIngest(self.store)
        self.dispatcher = InlineDispatcher(hot, self.store, self.ingest, spool=True)
        self.clock = clock or Clock(step=0.5)  # 2 heartbeat requests a second: under the rate limit
        self.service = MemoryService(hot, self.store, self.dispatcher, embed=hash_embed)
        self.executor = ToolExecutor(self.service, clock=self.clock)

    def call(self, agent_id: str, name: str, heartbeat: bool = False, **arguments: Any) -> Any:
        return self.executor.execute(agent_id, name, {**arguments, "request_heartbeat": heartbeat})

    def fifo(self, agent_id: str) -> list[Any]:
        return self.hot.snapshot(agent_id).fifo

    def close(self) -> None:
        self.store.close()
