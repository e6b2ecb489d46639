"""Builds a running :class:`~hotpath.service.MemoryService` for a process entry point.

The CLI (``vcm serve``, ``vcm demo``, ...) is such an entry point: it may import workers. With a
``memory://`` broker (embedded mode) an in-process Celery worker runs the cold path in a thread
over the same fakeredis and SQLite file; with a real broker, separate worker processes do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from hotpath.service import MemoryService
from hotpath.settings import Settings, get_settings
from tasks import runtime
from tasks.embedding import get_embedder
from tasks.ingest import DocumentIngester


def embedded(settings: Settings) -> bool:
    return settings.broker_url.startswith("memory://")


def build_service(settings: Settings) -> MemoryService:
    from workers.app import app  # noqa: F401  (wires the Celery dispatcher into tasks.runtime)

    deps = runtime.deps()
    ingester = _LazyIngester(deps.store, settings)
    vectorizer = deps.vectorizer
    return MemoryService(
        deps.hot,
        deps.store,
        deps.dispatcher,
        embed=deps.embed,
        ingest=ingester,
        recall_version=(lambda: vectorizer.version) if vectorizer is not None else None,
    )


class _LazyIngester:
    """Loads the embedding model on the first document, not at start."""

    def __init__(self, store: object, settings: Settings) -> None:
        self._store = store
        self._settings = settings
        self._ingester: DocumentIngester | None = None

    def __call__(self, agent_id: str, doc_id: str, text: str, *, source: str = "", metadata: object = None) -> dict:  # type: ignore[type-arg]
        if self._ingester is None:
            self._ingester = DocumentIngester(self._store, get_embedder(self._settings.embedding), self._settings)  # type: ignore[arg-type]
        return self._ingester(agent_id, doc_id, text, source=source, metadata=metadata)  # type: ignore[arg-type]


@contextmanager
def running_service(settings: Settings | None = None) -> Iterator[MemoryService]:
    """A service whose cold path is running: in-process in embedded mode, else external workers."""
    settings = settings or get_settings()
    service = build_service(settings)
    if not embedded(settings):
        yield service
        return
    from workers.app import app
    from workers.embedded import embedded_worker

    with embedded_worker(app):
        yield service
