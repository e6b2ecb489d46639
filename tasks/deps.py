"""What cold-path jobs need, passed in explicitly (built per process by :mod:`vcm.workers.runtime`).

Nothing per agent lives here: every job reads the agent's state from Redis and the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vcm.dispatch import Dispatcher
from vcm.hotpath.state import HotState
from vcm.settings import Settings
from vcm.store.port import MemoryStore
from vcm.tasks.facts.extraction import Candidate
from vcm.tasks.faults import NO_FAULTS, Faults
from vcm.tasks.ingest.jobs import Ingest
from vcm.tasks.recall.vectors import Vectorizer
from vcm.tasks.summary.memo import RecentVectors
from vcm.tasks.summary.request import Draft, Embed, Params, Request
from vcm.tasks.summary.units import Scan
from vcm.types import Message


class Summarizer(Protocol):
    def __call__(self, request: Request, params: Params) -> Draft: ...


class FactExtractor(Protocol):
    """Shadow-fact candidates of an eviction batch (vcm.tasks.facts.extraction, vcm.tasks.facts.llm)."""

    def __call__(self, messages: Sequence[Message], scan: Scan | None = None) -> list[Candidate]: ...


@dataclass
class Deps:
    settings: Settings
    hot: HotState
    store: MemoryStore
    dispatcher: Dispatcher
    embed: Embed
    summarizer: Summarizer
    faults: Faults = field(default=NO_FAULTS)
    clock: Callable[[], float] = time.time
    # Embeds spooled messages for vector recall; None: recall has BM25 only.
    vectorizer: Vectorizer | None = None
    # Candidates of the facts kept before a batch leaves the context; None: the extractive ones.
    extractor: FactExtractor | None = None
    # Chunks, embeds and stores archival documents (ingestion jobs); None: built from `embed`'s
    # model on the first job (vcm.workers.runtime.ingester).
    ingest: Ingest | None = None
    # The drift texts' vectors of this process's recent eviction jobs (by embedder and text).
    recent_vectors: RecentVectors = field(default_factory=RecentVectors)
