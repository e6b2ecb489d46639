"""The one seam between the hot path and the cold path.

The hot path never imports Celery: it hands work to a :class:`Dispatcher`. ``workers`` provides
the Celery implementation (``vcm.workers.dispatch.CeleryDispatcher``); tests and pure hot-path runs
can use :class:`RecordingDispatcher`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from vcm.types import IngestRequest


class Dispatcher(Protocol):
    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        """Write-behind: copy these appended messages to the store's recall log (idempotent)."""

    def evict(self, agent_id: str, batch_id: int) -> None:
        """Commit a begun eviction batch (summarise, store transaction, finish in Redis)."""

    def ingest(self, request: IngestRequest) -> None:
        """Chunk, embed and store a document into archival memory, moving its job on.

        Unlike spooling and evictions, the document exists nowhere else: a failure to hand it
        over raises (StoreUnavailable), so the caller can mark the job failed and say so."""


class RecordingDispatcher:
    """Keeps what it was asked to do; for runs with no cold path and for tests."""

    def __init__(self) -> None:
        self.spooled: list[tuple[str, tuple[str, ...]]] = []
        self.evictions: list[tuple[str, int]] = []
        self.ingests: list[IngestRequest] = []

    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        self.spooled.append((agent_id, tuple(message_ids)))

    def evict(self, agent_id: str, batch_id: int) -> None:
        self.evictions.append((agent_id, batch_id))

    def ingest(self, request: IngestRequest) -> None:
        self.ingests.append(request)
