"""Late chunking: chunk embeddings pooled from token embeddings of the whole document.

The transformer runs once over the document (once per macro window when the document is longer
than the model window, see :func:`vcm.tasks.ingest.chunking.plan_windows`); a chunk's embedding is the mean
of its tokens' output vectors, L2-normalised for cosine. Tokens thus carry the context of the
text around them ("He" knows who he is), which embedding each chunk alone cannot give.

Special tokens: every window is wrapped in the model's own special tokens (``[CLS] ... [SEP]``
for BERT) exactly as the model was trained, but their outputs never join a chunk's mean - they
belong to the window, not to any chunk - so a chunk's vector does not depend on which window it
came from beyond its tokens' context.

``naive`` mode (each chunk's text embedded alone with the model's own pooling) exists only for
comparison; callers must ask for it explicitly.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from vcm.errors import ConfigError
from vcm.settings.memory import ChunkingSettings
from vcm.tasks.embedding import Embedder
from vcm.tasks.ingest.chunking import ChunkSpan, Window, plan_chunks, plan_windows, sentence_breaks

Mode = Literal["late", "naive"]
MODES: tuple[Mode, ...] = ("late", "naive")
Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True)
class DocumentPlan:
    """A tokenised document with its chunks and model windows (all token indices are content tokens)."""

    text: str
    token_ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]
    chunks: tuple[ChunkSpan, ...]
    windows: tuple[Window, ...]

    def chunk_text(self, chunk: ChunkSpan) -> str:
        return self.text[chunk.char_start : chunk.char_end]


def pool_spans(
    outputs: Sequence[npt.NDArray[np.floating[Any]]],
    windows: Sequence[Window],
    spans: Sequence[tuple[int, int]],
    prefix: int,
) -> Vectors:
    """Unit-length mean of each token span's embeddings (pure).

    ``outputs[i]`` holds window ``i``'s token outputs, its first ``prefix`` rows being special
    tokens; only a window's kept rows are read, so each token counts once. ``spans`` must be in
    document order (starts and ends ascending), as :func:`~vcm.tasks.ingest.chunking.plan_chunks` gives
    them. Sums are taken window by window, so memory stays one window, however long the document.
    """
    if len(outputs) != len(windows):
        raise ValueError(f"{len(outputs)} window outputs for {len(windows)} windows")
    dim = outputs[0].shape[1] if outputs else 0
    sums = np.zeros((len(spans), dim), dtype=np.float64)
    # Spans come in document order (starts and ends ascending), so the spans meeting a window's
    # kept range are found by bisection rather than by scanning them all for every window.
    starts = [a for a, _ in spans]
    ends = [b for _, b in spans]
    for out, w in zip(outputs, windows, strict=True):
        for j in range(bisect.bisect_right(ends, w.keep_start), bisect.bisect_left(starts, w.keep_end)):
            a, b = spans[j]
            lo, hi = max(a, w.keep_start), min(b, w.keep_end)
            if lo < hi:
                rows = out[prefix + lo - w.start : prefix + hi - w.start]
                sums[j] += rows.sum(axis=0, dtype=np.float64)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("a span has no token outputs (empty span or outputs do not cover it)")
    vectors: Vectors = (sums / norms).astype(np.float32)
    return vectors


class LateChunker:
    """Plans and embeds documents with one :class:`~vcm.tasks.embedding.Embedder`'s model and tokenizer."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        tokenizer = embedder.tokenizer
        # The model's own wrapping, read off a one-token probe: "[CLS] a [SEP]" -> prefix/suffix.
        probe = tokenizer("a", add_special_tokens=True, return_special_tokens_mask=True)
        ids, mask = list(probe["input_ids"]), list(probe["special_tokens_mask"])
        first = mask.index(0)
        last = len(mask) - 1 - mask[::-1].index(0)
        self.prefix: tuple[int, ...] = tuple(ids[:first])
        self.suffix: tuple[int, ...] = tuple(ids[last + 1 :])
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        self.max_window = embedder.max_tokens - len(self.prefix) - len(self.suffix)

    def check(self, settings: ChunkingSettings) -> None:
        """ConfigError unless chunks and window overlap fit this model's window."""
        if settings.target_tokens > self.max_window:
            raise ConfigError(
                f"chunking.target_tokens ({settings.target_tokens}) exceeds the embedding model's "
                f"window ({self.max_window} tokens without special tokens)",
                setting="chunking.target_tokens",
            )
        if settings.window_overlap_tokens >= self.max_window:
            raise ConfigError(
                f"chunking.window_overlap_tokens ({settings.window_overlap_tokens}) must be below "
                f"the embedding model's window ({self.max_window} tokens)",
                setting="chunking.window_overlap_tokens",
            )

    def tokenize(self, text: str) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
        """Content token ids of the whole text and their character offsets (no truncation)."""
        enc = self.embedder.tokenizer(
            text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False
        )
        ids = tuple(int(i) for i in enc["input_ids"])
        offsets = tuple((int(a), int(b)) for a, b in enc["offset_mapping"])
        return ids, offsets

    def plan(
        self,
        text: str,
        settings: ChunkingSettings,
        *,
        breaks: Sequence[int] | None = None,
        pack: bool = True,
    ) -> DocumentPlan:
        """Tokenise and plan chunks (at sentence ``breaks`` unless given) and model windows."""
        self.check(settings)
        ids, offsets = self.tokenize(text)
        chunks = plan_chunks(
            offsets,
            sentence_breaks(text) if breaks is None else breaks,
            target_tokens=settings.target_tokens,
            overlap_tokens=settings.overlap_tokens,
            pack=pack,
        )
        windows = plan_windows(len(ids), self.max_window, settings.window_overlap_tokens)
        return DocumentPlan(text, ids, offsets, tuple(chunks), tuple(windows))

    def embed(self, plans: Sequence[DocumentPlan], mode: Mode = "late") -> list[Vectors]:
        """One (chunks x dimension) array of unit vectors per plan."""
        if mode == "late":
            return self.embed_late(plans)
        if mode == "naive":
            return self.embed_naive(plans)
        raise ValueError(f"unknown chunking mode {mode!r}; use one of {', '.join(MODES)}")

    def embed_naive(self, plans: Sequence[DocumentPlan]) -> list[Vectors]:
        """Each chunk's text embedded on its own (comparison baseline; no document context)."""
        texts = [p.chunk_text(c) for p in plans for c in p.chunks]
        vectors = self.embedder.encode(texts)
        out: list[Vectors] = []
        at = 0
        for p in plans:
            out.append(vectors[at : at + len(p.chunks)])
            at += len(p.chunks)
        return out

    def embed_late(self, plans: Sequence[DocumentPlan]) -> list[Vectors]:
        """Chunk vectors pooled from whole-document token embeddings; windows of all plans share batches."""
        jobs = [(d, w) for d, p in enumerate(plans) for w in range(len(p.windows))]
        # Longest first, so each batch holds windows of similar length and pads little.
        jobs.sort(key=lambda job: -plans[job[0]].windows[job[1]].tokens)
        outputs: dict[tuple[int, int], npt.NDArray[np.float32]] = {}
        size = self.embedder.batch_size
        for at in range(0, len(jobs), size):
            batch = jobs[at : at + size]
            rows = [self._wrap(plans[d], plans[d].windows[w]) for d, w in batch]
            for job, hidden in zip(batch, self._forward(rows), strict=True):
                outputs[job] = hidden
        dim = self.embedder.dimension
        result: list[Vectors] = []
        for d, p in enumerate(plans):
            if not p.chunks:
                result.append(np.zeros((0, dim), dtype=np.float32))
                continue
            window_outputs = [outputs[(d, w)] for w in range(len(p.windows))]
            spans = [(c.start, c.end) for c in p.chunks]
            result.append(pool_spans(window_outputs, p.windows, spans, len(self.prefix)))
        return result

    def _wrap(self, plan: DocumentPlan, window: Window) -> list[int]:
        return [*self.prefix, *plan.token_ids[window.start : window.end], *self.suffix]

    def _forward(self, rows: Sequence[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        """Last hidden states of a padded batch, each trimmed back to its own length."""
        return self.embedder.hidden_states(rows, self.pad_id)
