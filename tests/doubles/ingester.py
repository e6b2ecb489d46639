"""The archival ingester double: a document split into chunks (sentences or paragraphs), embedded
with a :class:`~tests.doubles.embedder.HashEmbedder` and written through the store port."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from tests.doubles.embedder import hash_embed, split_embed
from vcm.store.port import MemoryStore
from vcm.store.types import ArchivalChunk
from vcm.tasks.ingest.jobs import Progress

Spans = list[tuple[int, int]]


def sentences(text: str) -> Spans:
    """One span per sentence (ending at ``.``, ``!`` or ``?``), surrounding spaces included."""
    return [m.span() for m in re.finditer(r"[^.!?]+[.!?]?", text) if m.group().strip()]


def paragraphs(text: str) -> Spans:
    """One span per paragraph (blank-line separated), without its surrounding spaces."""
    spans, start = [], 0
    for part in (p.strip() for p in text.split("\n\n")):
        if part:
            begin = text.index(part, start)
            start = begin + len(part)
            spans.append((begin, start))
    return spans


class ChunkIngest:
    """Chunks ``text`` by ``split``, embeds each chunk with ``embed``, stores them; counts its calls.
    ``created_at`` stamps the chunks (else the store's default), ``progress`` says whether it
    reports its chunk count to the job runner."""

    def __init__(
        self,
        store: MemoryStore,
        *,
        split: Literal["sentences", "paragraphs"] = "sentences",
        embed: Callable[[Sequence[str]], np.ndarray[Any, Any]] = hash_embed,
        created_at: Callable[[], float] | None = None,
        progress: bool = True,
    ) -> None:
        self.store = store
        self.split = sentences if split == "sentences" else paragraphs
        self.embed = embed
        self.created_at = created_at
        self.report = progress
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
        incarnation: str | None = None,
    ) -> Mapping[str, Any]:
        self.calls += 1
        spans = self.split(text)
        texts = [text[a:b].strip() for a, b in spans]
        vectors = self.embed(texts)
        extra = {} if self.created_at is None else {"created_at": self.created_at()}
        chunks = [
            ArchivalChunk(
                agent_id=agent_id,
                doc_id=doc_id,
                chunk_index=i,
                text=texts[i],
                embedding=[float(x) for x in vectors[i]],
                metric="cosine",
                embedding_version="hash32:v1",
                model_id="hash32",
                char_start=a,
                char_end=b,
                source=source,
                metadata=dict(metadata),
                **extra,  # type: ignore[arg-type]
            )
            for i, (a, b) in enumerate(spans)
        ]
        if progress is not None and self.report:
            progress(0, len(chunks))
        written = self.store.ingest_archival(chunks, incarnation=incarnation)
        return {"chunks": len(chunks), "written": written}


class SentenceIngest(ChunkIngest):
    """One chunk per sentence, embedded with :data:`~tests.doubles.embedder.hash_embed`."""


class ParagraphIngest(ChunkIngest):
    """One chunk per paragraph, embedded with :data:`~tests.doubles.embedder.split_embed`, stamped
    with the time of ingestion, no progress reports (the HTTP API's tests)."""

    def __init__(self, store: MemoryStore) -> None:
        import time

        super().__init__(store, split="paragraphs", embed=split_embed, created_at=time.time, progress=False)
