"""Builds a running :class:`~vcm.service.MemoryService` for a process entry point.

The CLI (``vcm serve``, ``vcm demo``, ...) is such an entry point: it may import workers. With a
``memory://`` broker (embedded mode) an in-process Celery worker runs the cold path in a thread
over the same fakeredis and SQLite file; with a real broker, separate worker processes do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from vcm.service import MemoryService
from vcm.settings import Settings
from vcm.workers import runtime
from vcm.workers.build import Worker, build

log = logging.getLogger(__name__)


def embedded(settings: Settings) -> bool:
    return settings.broker_url.startswith("memory://")


def build_service(settings: Settings) -> MemoryService:
    """The service of an entry point that serves callers (API, CLI), this process wired from
    ``settings`` (:func:`vcm.workers.build.build`)."""
    return _service(build(settings))


def _service(worker: Worker) -> MemoryService:
    """Its spools and evictions are published by a background thread (:class:`BackgroundDispatcher`),
    so no caller waits for the broker. The cold path's own follow-ups keep the synchronous
    dispatcher of its dependencies."""
    from vcm.workers.bulk import LocalBulkJobs
    from vcm.workers.dispatch import BackgroundDispatcher
    from vcm.workers.maintenance import LocalMaintenanceJobs
    from vcm.workers.summaries import LocalSummaries

    deps = runtime.deps()
    vectorizer = deps.vectorizer
    service = MemoryService(
        deps.hot,
        deps.store,
        BackgroundDispatcher(deps.dispatcher),
        # Query vectors of requests are this process's own short work, never queued behind the
        # cold path's batches in the embedding process.
        embed=deps.embed.local() if isinstance(deps.embed, runtime.LazyEmbed) else deps.embed,
        recall_version=(lambda: vectorizer.version) if vectorizer is not None else None,
        bulk=LocalBulkJobs(worker.settings, deps),
        maintenance=LocalMaintenanceJobs(runtime.deps),
        summaries=LocalSummaries(deps),
    )
    # The store is the source of truth: agents whose hot state is missing (embedded mode after a
    # restart, a flushed Redis) are rebuilt before the first request (others rebuild on demand).
    rebuilt = service.rebuild_missing()
    if rebuilt:
        log.info("rebuilt the hot state of %d agents from the store", len(rebuilt))
    return service


@contextmanager
def running_service(settings: Settings, *, beat: bool = True, warm: bool = True) -> Iterator[MemoryService]:
    """A service whose cold path is running: in-process in embedded mode (the worker and beat
    threads; ``beat`` off: no periodic jobs, for a one-shot command), else external workers and beat.
    ``warm`` off: the in-process worker does not preload the embedding model (``worker.preload_embedder``)
    but loads it when a task first needs it - a one-shot command that embeds nothing never
    waits for it (loading it took ~3 s, and its exit waited for the load to finish)."""
    if not warm and settings.worker.preload_embedder:
        settings = settings.model_copy(
            update={"worker": settings.worker.model_copy(update={"preload_embedder": False})}
        )
    worker = build(settings)
    service = _service(worker)
    if not embedded(settings):
        try:
            yield service
        finally:
            _flush(service)
        return
    from vcm.workers.embedded import embedded_beat, embedded_worker
    from vcm.workers.embedder_process import EmbedderProcesses

    # The cold path shares this interpreter with the API: its model work goes to a child process
    # (see vcm.workers.embedder_process for why), started when first needed.
    processes = EmbedderProcesses() if settings.embedding.subprocess else None
    if processes is not None:
        runtime.use_embedder(processes.get)
    try:
        # Beat in a thread beside the worker: the periodic maintenance of production's `celery
        # beat` (vcm.workers.beat), sent to the same in-process worker. It stops first (the inner
        # block), so nothing is sent to a stopped worker.
        with embedded_worker(worker.app), embedded_beat(worker.app) if beat else nullcontext():
            try:
                yield service
            finally:
                _flush(service)  # before the in-process worker stops, so it still runs what was queued
    finally:
        if processes is not None:
            runtime.use_embedder(None)
            processes.close()


def _flush(service: MemoryService) -> None:
    flush = getattr(service.dispatcher, "flush", None)
    if flush is not None:
        flush()
