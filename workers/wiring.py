"""Builds a running :class:`~vcm.service.MemoryService` for a process entry point.

The CLI (``vcm serve``, ``vcm demo``, ...) is such an entry point: it may import workers. With a
``memory://`` broker (embedded mode) an in-process Celery worker runs the cold path in a thread
over the same fakeredis and SQLite file; with a real broker, separate worker processes do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from vcm.service import MemoryService
from vcm.settings import Settings, get_settings
from vcm.tasks import runtime


def embedded(settings: Settings) -> bool:
    return settings.broker_url.startswith("memory://")


def build_service(settings: Settings) -> MemoryService:
    from vcm.workers.app import app  # noqa: F401  (wires the Celery dispatcher into vcm.tasks.runtime)

    deps = runtime.deps()
    vectorizer = deps.vectorizer
    return MemoryService(
        deps.hot,
        deps.store,
        deps.dispatcher,
        embed=deps.embed,
        recall_version=(lambda: vectorizer.version) if vectorizer is not None else None,
    )


@contextmanager
def running_service(settings: Settings | None = None) -> Iterator[MemoryService]:
    """A service whose cold path is running: in-process in embedded mode, else external workers."""
    settings = settings or get_settings()
    service = build_service(settings)
    if not embedded(settings):
        yield service
        return
    from vcm.workers.app import app
    from vcm.workers.embedded import embedded_worker

    with embedded_worker(app):
        yield service
