"""The one seam between the hot path and the cold path.

The hot path never imports Celery: it hands work to a :class:`Dispatcher`. ``workers`` provides
the Celery implementation (``vcm.workers.dispatch.CeleryDispatcher``); tests and pure hot-path runs
can use :class:`RecordingDispatcher`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


class ColdPathGate:
    """Lets the cold path wait while a model generates in this process (seed 004: the cold path
    pauses during generation, so summarising and embedding do not compete with the answer for
    the CPU). Only work running in the same process waits: the in-process worker of embedded
    mode. Worker processes never see a generation here and never wait. A wait is bounded, so a
    long or stuck generation delays evictions by at most ``max_wait_s``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0

    @contextmanager
    def generating(self) -> Iterator[None]:
        with self._cond:
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    @property
    def active(self) -> int:
        return self._active

    def wait_idle(self, max_wait_s: float) -> float:
        """Block while a generation runs, at most ``max_wait_s``; the seconds waited."""
        start = time.monotonic()
        with self._cond:
            self._cond.wait_for(lambda: self._active == 0, timeout=max_wait_s)
        return time.monotonic() - start


# One per process: the API's chat handlers hold it, the in-process worker's tasks wait on it.
COLD_PATH = ColdPathGate()
