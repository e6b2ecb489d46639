"""Test wiring for a MemoryService on a real embedded store, with small deterministic doubles for
the embedding model and the archival ingester, and a dispatcher that spools at once."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vcm.hotpath.state import HotState
from vcm.store.port import MemoryStore
from vcm.store.types import ArchivalChunk
from vcm.tasks.ingest.jobs import Ingest, Progress, run_ingest_job
from vcm.tasks.spool import spool_messages
from vcm.types import IngestRequest

DIM = 32
WORD = re.compile(r"\w+")


def hash_embed(texts: Sequence[str]) -> np.ndarray:
    """Bag of hashed words as a unit vector: texts sharing words point the same way."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in WORD.findall(text.lower()):
            out[i, int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
        norm = float(np.linalg.norm(out[i]))
        out[i] = out[i] / norm if norm else np.eye(DIM, dtype=np.float32)[0]
    return out


class SentenceIngest:
    """Archival ingest double: one chunk per sentence, embedded with :func:`hash_embed`."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.calls = 0

    def __call__(
        self,
        agent_id: str,
        doc_id: str,
        text: str,
        *,
        source: str,
        metadata: Mapping[str, Any],
        progress: Progress | None = None,
    ) -> Mapping[str, Any]:
        self.calls += 1
        spans = [m.span() for m in re.finditer(r"[^.!?]+[.!?]?", text) if m.group().strip()]
        vectors = hash_embed([text[a:b] for a, b in spans])
        chunks = [
            ArchivalChunk(
                agent_id=agent_id,
                doc_id=doc_id,
                chunk_index=i,
                text=text[a:b].strip(),
                embedding=[float(x) for x in vectors[i]],
                metric="cosine",
                embedding_version="hash32:v1",
                model_id="hash32",
                char_start=a,
                char_end=b,
                source=source,
                metadata=dict(metadata),
            )
            for i, (a, b) in enumerate(spans)
        ]
        if progress is not None:
            progress(0, len(chunks))
        written = self.store.ingest_archival(chunks)
        return {"chunks": len(chunks), "written": written}


class SpoolingDispatcher:
    """Spools appended messages to the store at once (the cold path's write-behind, inline) and
    runs archival ingestion jobs inline through the workers' own job runner; records eviction
    batches without committing them."""

    def __init__(self, hot: HotState, store: MemoryStore, ingest: Ingest | None = None) -> None:
        self.hot = hot
        self.store = store
        self.ingester = ingest
        self.evictions: list[tuple[str, int]] = []
        self.ingests: list[IngestRequest] = []

    def ingest(self, request: IngestRequest) -> None:
        self.ingests.append(request)
        if self.ingester is not None:
            run_ingest_job(self.hot, self.store, self.ingester, request, clock=self.hot.clock)

    def spool(self, agent_id: str, message_ids: Sequence[str]) -> None:
        spool_messages(self.hot, self.store, agent_id, message_ids)

    def evict(self, agent_id: str, batch_id: int) -> None:
        self.evictions.append((agent_id, batch_id))


class Clock:
    """A clock tests move by hand; ``step`` > 0 also advances it on every read."""

    def __init__(self, now: float = 1_700_000_000.0, step: float = 0.0) -> None:
        self.now = now
        self.step = step

    def __call__(self) -> float:
        t = self.now
        self.now += self.step
        return t

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Harness:
    """A MemoryService on a real embedded store plus a ToolExecutor, with shorthands for tests."""

    def __init__(self, hot: HotState, path: str, *, clock: Clock | None = None, ingest: Any = None) -> None:
        from vcm.service import MemoryService
        from vcm.store import open_store
        from vcm.tools.executor import ToolExecutor

        self.hot = hot
        self.store = open_store(path)
        self.ingest = ingest(self.store) if ingest is not None else SentenceIngest(self.store)
        self.dispatcher = SpoolingDispatcher(hot, self.store, self.ingest)
        self.clock = clock or Clock(step=0.5)  # 2 heartbeat requests a second: under the rate limit
        self.service = MemoryService(hot, self.store, self.dispatcher, embed=hash_embed)
        self.executor = ToolExecutor(self.service, clock=self.clock)

    def call(self, agent_id: str, name: str, heartbeat: bool = False, **arguments: Any) -> Any:
        return self.executor.execute(agent_id, name, {**arguments, "request_heartbeat": heartbeat})

    def fifo(self, agent_id: str) -> list[Any]:
        return self.hot.snapshot(agent_id).fifo

    def close(self) -> None:
        self.store.close()
