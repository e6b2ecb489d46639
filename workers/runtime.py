"""Per-process dependencies of the cold path, built lazily from settings.

Built on first use in the process that runs tasks, never before a fork: the SQLite store, the
Redis pool and the embedding model must not be shared across a prefork worker's children, so the
cache is keyed by process id and a forked child builds its own. Nothing per agent is cached.

The process's entry point registers its settings and what ``tasks`` cannot build itself without
importing Celery plumbing, the dispatcher and the delivery log (:func:`configure`, called by
:func:`vcm.workers.build.build`); nothing here reads settings on its own.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from vcm.dispatch import Dispatcher, RecordingDispatcher
from vcm.errors import ConfigError
from vcm.hotpath.connection import connect
from vcm.hotpath.state import HotState
from vcm.obs.metered_store import metered
from vcm.settings import Settings
from vcm.settings.memory import EmbeddingSettings
from vcm.store import MemoryStore, open_store
from vcm.store.diversity import Diversity
from vcm.tasks.deps import Deps, FactExtractor, Summarizer
from vcm.tasks.embedding import Embedder, get_embedder
from vcm.tasks.embedding_choice import batch_embedder
from vcm.tasks.faults import Faults
from vcm.tasks.ingest.documents import DocumentIngester
from vcm.tasks.ingest.jobs import Ingest, Progress
from vcm.tasks.ingest.late_chunking import LateChunker
from vcm.tasks.recall.vectors import MessageVectorizer, Turn, Vectorizer
from vcm.tasks.recall.vectors import Vectors as MessageVectors
from vcm.tasks.summary.recursive import extractive
from vcm.tasks.summary.selection import Vectors

log = logging.getLogger(__name__)


class DeliveryLog(Protocol):
    """Counts how often one attempt of a task was delivered (redeliveries after a worker died)."""

    def record(self, task_id: str, attempt: int) -> int:
        """Count this delivery; return the number of deliveries so far, this one included."""


class LocalDeliveryLog:
    """In process memory: right for in-process (embedded) workers, where no other process redelivers."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def record(self, task_id: str, attempt: int) -> int:
        with self._lock:
            n = self._counts.get((task_id, attempt), 0) + 1
            self._counts[(task_id, attempt)] = n
            if len(self._counts) > 100_000:  # bounded: old attempts are long finished
                self._counts.pop(next(iter(self._counts)))
            return n


def cold_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder of the cold path's model work: the one an entry point registered (embedded
    mode's child process, :mod:`vcm.workers.embedder_process`), else this process's own, by
    ``[embedding] batch_backend`` (:func:`vcm.tasks.embedding_choice.batch_embedder`)."""
    factory = _providers.embedder
    return factory(settings) if factory is not None else batch_embedder(settings)


# Intra-op threads of a serving process's query model on the torch backend (see LazyEmbed.local).
QUERY_THREADS = 1


class LazyEmbed:
    """The process's embedder, loaded on first call (or :meth:`warm`): the cold path's
    (:func:`cold_embedder`), or with ``local`` this process's own (an API request's query)."""

    def __init__(self, settings: Settings, threads: int = 0, *, local: bool = False) -> None:
        embedding = settings.embedding
        if threads and not embedding.threads:
            embedding = embedding.model_copy(update={"threads": threads})
        self._settings = embedding
        self._local = local

    @property
    def settings(self) -> EmbeddingSettings:
        return self._settings

    def embedder(self) -> Embedder:
        return get_embedder(self._settings) if self._local else cold_embedder(self._settings)

    def local(self) -> LazyEmbed:
        """The same model, always loaded in this process: a serving process's, for queries. On
        the torch backend, with ``threads`` unset, it runs on :data:`QUERY_THREADS` intra-op
        threads: a query is one short text, and torch's default (one thread per core) makes it
        wait on cores that request threads and the cold path are using (on 2 shared cores:
        13 ms p50 on one thread, 67 ms p50 / 490 ms p95 on two, ``scripts/bench_context.py``).
        Not when the cold path's model work runs in this process too (``[embedding] subprocess``
        off): torch's threads are the process's, and batches need them. The ONNX backends keep
        ONNX Runtime's default (one thread per core): its idle threads sleep rather than spin,
        and two threads embed a LoCoMo turn faster than one on a quiet machine (p50 7.8 against
        9.6 ms) and under load alike (18.5 against 21.4 ms with three busy processes on the 2
        cores)."""
        found = LazyEmbed.__new__(LazyEmbed)
        settings = self._settings
        torch = settings.backend == "torch" or (settings.backend == "auto" and settings.device != "cpu")
        if not settings.threads and settings.subprocess and torch:
            settings = settings.model_copy(update={"threads": QUERY_THREADS})
        found._settings, found._local = settings, True
        return found

    def warm(self) -> None:
        self.embedder()

    def __call__(self, texts: Sequence[str]) -> Vectors:
        return self.embedder().encode(texts)


class LazyVectorizer:
    """The process's message vectorizer (settings' ``[recall]``), its model loaded on first use,
    so a worker that never spools never loads it."""

    def __init__(self, settings: Settings, threads: int = 0) -> None:
        self._embed = LazyEmbed(settings, threads)
        self._recall = settings.recall
        self._built: MessageVectorizer | None = None
        self._lock = threading.Lock()

    def _vectorizer(self) -> MessageVectorizer:
        with self._lock:
            if self._built is None:
                chunker = LateChunker(self._embed.embedder())
                recall = self._recall
                self._built = MessageVectorizer(
                    chunker, mode=recall.context_mode, context=recall.context_turns, after=recall.context_after
                )
            return self._built

    @property
    def version(self) -> str:
        return self._vectorizer().version

    @property
    def context(self) -> int:
        return self._vectorizer().context

    @property
    def after(self) -> int:
        return self._vectorizer().after

    def embed(self, history: Sequence[Turn], targets: Sequence[Turn]) -> list[MessageVectors | None]:
        return self._vectorizer().embed(history, targets)


class LazyIngester:
    """Archival ingestion with the configured model, loaded on the first document, not at start."""

    def __init__(self, store: MemoryStore, settings: Settings, threads: int = 0) -> None:
        self._store = store
        self._settings = settings
        self._embed = LazyEmbed(settings, threads)
        self._built: DocumentIngester | None = None
        self._lock = threading.Lock()

    def __call__(
        self,
        agent_id: str,
        doc_id: str,
        text: str,
        *,
        source: str,
        metadata: Mapping[str, Any],
        progress: Progress | None = None,
        incarnation: str | None = None,
    ) -> Mapping[str, Any]:
        with self._lock:
            if self._built is None:
                self._built = DocumentIngester(self._store, self._embed.embedder(), self._settings)
        return self._built(
            agent_id, doc_id, text, source=source, metadata=metadata, progress=progress, incarnation=incarnation
        )


def ingester(deps: Deps) -> Ingest:
    """The ingester of these dependencies (built from settings when they carry none)."""
    if deps.ingest is None:
        deps.ingest = LazyIngester(deps.store, deps.settings, _providers.embed_threads)
    return deps.ingest


def build_vectorizer(settings: Settings, threads: int = 0) -> Vectorizer | None:
    """Message vectors for recall, unless ``[recall] vectors`` is off."""
    return LazyVectorizer(settings, threads) if settings.recall.vectors else None


def build_summarizer(settings: Settings) -> Summarizer:
    if settings.summarizer.kind == "llm":
        from vcm.tasks.summary.llm import LlmSummarizer

        return LlmSummarizer.of(settings.summarizer)
    return extractive


def build_extractor(settings: Settings) -> FactExtractor | None:
    """The LLM fact extractor when ``[facts] extractor = "llm"``; None: the extractive one."""
    if settings.facts.extractor == "llm":
        from vcm.tasks.facts.llm import LlmFactExtractor

        return LlmFactExtractor.of(settings.facts)
    return None


@dataclasses.dataclass
class _Providers:
    settings: Settings | None = None
    dispatcher: Callable[[Settings], Dispatcher] | None = None
    deliveries: Callable[[Settings], DeliveryLog] | None = None
    embed_threads: int = 0
    embedder: Callable[[EmbeddingSettings], Embedder] | None = None


_providers = _Providers()
_lock = threading.Lock()
_built: dict[int, Deps] = {}
_deliveries: dict[int, DeliveryLog] = {}


def configure(
    *,
    settings: Settings | None = None,
    dispatcher: Callable[[Settings], Dispatcher] | None = None,
    deliveries: Callable[[Settings], DeliveryLog] | None = None,
    embed_threads: int | None = None,
) -> None:
    """Register this process's settings and factories (their products are built lazily, per
    process). The entry point calls this once, through :func:`vcm.workers.build.build`."""
    with _lock:
        if settings is not None:
            _providers.settings = settings
        if dispatcher is not None:
            _providers.dispatcher = dispatcher
        if deliveries is not None:
            _providers.deliveries = deliveries
        if embed_threads is not None:
            _providers.embed_threads = embed_threads


def use_embedder(factory: Callable[[EmbeddingSettings], Embedder] | None) -> None:
    """Where the cold path's model work runs from now on (None: in this process). Embedded mode's
    entry point registers its child process here (:func:`vcm.workers.wiring.running_service`)."""
    with _lock:
        _providers.embedder = factory


def store_options(settings: Settings) -> dict[str, Any]:
    """Adapter options from settings: the ArangoDB users (passwords from the environment only,
    see ``vcm.settings``), the UDS-only rule, and the server-side TTL index when recall
    retention is on; the embedded adapter takes only its recall tail bound."""
    s = settings.store
    if not settings.store_url.startswith("arango"):
        return {"recall_tail_limit": s.recall_tail_limit}
    options: dict[str, Any] = {
        "uds_only": s.uds_only,
        "retention": bool(settings.maintenance.recall_ttl_s and s.server_ttl_index),
    }
    if s.username:
        options["username"] = s.username
    if s.password.get_secret_value():
        options["password"] = s.password.get_secret_value()
    if s.ro_username:
        options["ro_username"] = s.ro_username
        options["ro_password"] = s.ro_password.get_secret_value()
    return options


def open_configured_store(settings: Settings, **extra: Any) -> MemoryStore:
    recall = settings.recall
    spread = Diversity(penalty=recall.diversity_penalty, reach=recall.diversity_reach)
    return open_store(
        settings.store_url,
        recall_diversity=spread,
        other_author_weight=recall.other_author_weight,
        **store_options(settings),
        **extra,
    )


def build(settings: Settings) -> Deps:
    """Fresh dependencies from settings (the store opened, the embedder not yet loaded)."""
    faults = Faults.from_env(os.environ)
    options = {"fault_hook": faults.store_hook} if faults else {}
    if faults:
        log.warning("fault injection is on (%s rules); this is a test run", len(faults.rules))
    dispatcher: Dispatcher
    if _providers.dispatcher is not None:
        dispatcher = _providers.dispatcher(settings)
    else:
        log.warning("no dispatcher configured: follow-up evictions wait for the sweeper")
        dispatcher = RecordingDispatcher()
    return Deps(
        settings=settings,
        hot=HotState(connect(settings.redis_url), settings),
        store=metered(open_configured_store(settings, **options)),
        dispatcher=dispatcher,
        embed=LazyEmbed(settings, _providers.embed_threads),
        summarizer=build_summarizer(settings),
        extractor=build_extractor(settings),
        faults=faults,
        clock=time.time,
        vectorizer=build_vectorizer(settings, _providers.embed_threads),
    )


def settings() -> Settings:
    """The settings this process's entry point registered."""
    found = _providers.settings
    if found is None:
        raise ConfigError(
            "this process's cold path has no settings: its entry point must call "
            "vcm.workers.build.build(settings) first (celery -A vcm.workers.app does)",
            setting="worker",
        )
    return found


def deps() -> Deps:
    """This process's dependencies (built on first call in each process)."""
    pid = os.getpid()
    with _lock:
        found = _built.get(pid)
        if found is None:
            found = _built[pid] = build(settings())
        return found


def install(value: Deps, deliveries: DeliveryLog | None = None) -> None:
    """Use these dependencies (and delivery log) in this process (in-process workers and tests)."""
    with _lock:
        _built[os.getpid()] = value
        if deliveries is not None:
            _deliveries[os.getpid()] = deliveries


def deliveries() -> DeliveryLog:
    pid = os.getpid()
    with _lock:
        found = _deliveries.get(pid)
        if found is None:
            factory = _providers.deliveries
            found = _deliveries[pid] = factory(settings()) if factory is not None else LocalDeliveryLog()
        return found


def reset() -> None:
    """Forget (and close) this process's dependencies; the next :func:`deps` builds new ones."""
    pid = os.getpid()
    with _lock:
        found = _built.pop(pid, None)
        _deliveries.pop(pid, None)
    if found is not None:
        found.store.close()
