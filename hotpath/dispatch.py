"""The one seam between the hot path and the cold path.

The hot path never imports Celery: it hands work to a :class:`Dispatcher`. ``workers`` provides
the Celery implementation (``workers.dispatch.CeleryDispatcher``); tests and pure hot-path runs
can use :class:`RecordingDispatcher`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Dispatcher(Protocol):
    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        """Write-behind: copy these appended messages to the store's recall log (idempotent)."""

    def evict(self, agent_id: str, batch_id: int) -> None:
        """Commit a begun eviction batch (summarise, store transaction, finish in Redis)."""


class RecordingDispatcher:
    """Keeps what it was asked to do; for runs with no cold path and for tests."""

    def __init__(self) -> None:
        self.spooled: list[tuple[str, tuple[str, ...]]] = []
        self.evictions: list[tuple[str, int]] = []

    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        self.spooled.append((agent_id, tuple(message_ids)))

    def evict(self, agent_id: str, batch_id: int) -> None:
        self.evictions.append((agent_id, batch_id))
