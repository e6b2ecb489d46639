"""The cold path inline: a :class:`~vcm.dispatch.RecordingDispatcher` that also runs archival
ingestion jobs at once, in the caller's thread, through the workers' own job runner (a stand-in
for the ``ingest`` queue), and optionally spools appended messages to the store at once (the
write-behind, inline). Eviction batches are recorded, never committed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vcm.dispatch import RecordingDispatcher
from vcm.hotpath.state import HotState
from vcm.store.port import MemoryStore
from vcm.tasks.ingest.jobs import Ingest, run_ingest_job
from vcm.tasks.spool import spool_messages
from vcm.types import IngestRequest


class InlineDispatcher(RecordingDispatcher):
    def __init__(
        self,
        hot: HotState,
        store: MemoryStore,
        ingest: Ingest | None = None,
        *,
        spool: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__()
        self.hot = hot
        self.store = store
        self.ingester = ingest
        self.spools = spool
        self.clock = clock or hot.clock

    def ingest(self, request: IngestRequest) -> None:
        super().ingest(request)
        if self.ingester is not None:
            run_ingest_job(self.hot, self.store, self.ingester, request, clock=self.clock)

    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        super().spool(agent_id, message_ids)
        if self.spools:
            spool_messages(self.hot, self.store, agent_id, message_ids)
