"""Synthetic embeddings for the store benchmark: clustered like real ones around given centres
(documents near topics, chunks near documents), and a running exact top-k to measure recall against."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


DIM = 384


TOP_K = 10


STRUCTURE_RANK = 128


@dataclass(frozen=True)
class VectorSpec:
    """How spread the synthetic embeddings are (cosine to the parent is ~1/sqrt(1 + spread^2))."""

    doc_spread: float = 0.9  # document centre around its topic centre
    chunk_spread: float = 0.55  # chunk around its document centre
    structured: float = 0.75  # share of the spread along real embeddings' principal directions
    chunks_per_doc: int = 8  # mean; documents have 1 .. 2*mean-1 chunks
    seed: int = 2024


class VectorSource:
    """Chunks of documents in a fixed order; block ``b`` is reproducible on its own."""

    def __init__(self, centres: F32, spec: VectorSpec) -> None:
        self.spec = spec
        self.centres = centres
        centred = centres - centres.mean(axis=0)
        _, singular, vt = np.linalg.svd(centred, full_matrices=False)
        # The leading directions real embeddings vary in (most of their variance; fewer random
        # draws per vector), scaled so a standard normal draw has unit expected norm.
        singular, vt = singular[:STRUCTURE_RANK], vt[:STRUCTURE_RANK]
        scale = singular / np.sqrt((singular**2).sum())
        self.basis = (scale[:, None] * vt).astype(np.float32)
        rng = np.random.default_rng(spec.seed)
        # Topic popularity: Zipf-like, as real corpora are unbalanced.
        weights = 1.0 / np.arange(1, len(centres) + 1) ** 0.8
        self.topic_p = rng.permutation(weights / weights.sum())

    def _noise(self, rng: np.random.Generator, n: int) -> F32:
        s = self.spec
        structured = rng.standard_normal((n, self.basis.shape[0]), dtype=np.float32) @ self.basis
        iso = rng.standard_normal((n, DIM), dtype=np.float32) / np.float32(np.sqrt(DIM))
        noise: F32 = np.sqrt(s.structured) * structured + np.sqrt(1 - s.structured) * iso
        return noise

    def documents(self, block: int, n_docs: int) -> tuple[F32, npt.NDArray[np.int64]]:
        """(document centres, chunk counts) of one block of documents."""
        rng = np.random.default_rng((self.spec.seed, block, 0))
        topics = rng.choice(len(self.centres), size=n_docs, p=self.topic_p)
        docs = self.centres[topics] + self.spec.doc_spread * self._noise(rng, n_docs)
        docs /= np.linalg.norm(docs, axis=1, keepdims=True)
        counts = rng.integers(1, 2 * self.spec.chunks_per_doc, size=n_docs)
        return docs.astype(np.float32), counts.astype(np.int64)

    def chunks(self, block: int, n_docs: int) -> tuple[F32, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(unit vectors, document number within the block, chunk index) of one block."""
        docs, counts = self.documents(block, n_docs)
        rng = np.random.default_rng((self.spec.seed, block, 1))
        owner = np.repeat(np.arange(n_docs), counts)
        index = np.concatenate([np.arange(c) for c in counts.tolist()])
        vectors = docs[owner] + self.spec.chunk_spread * self._noise(rng, len(owner))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.astype(np.float32), owner, index

    def queries(self, n: int, blocks: int, n_docs: int) -> F32:
        """``n`` new chunks of documents from the first ``blocks`` blocks (never stored)."""
        rng = np.random.default_rng((self.spec.seed, 10**6))
        picks = rng.integers(blocks, size=n)
        out = np.empty((n, DIM), dtype=np.float32)
        for block in sorted(set(picks.tolist())):
            docs, _ = self.documents(block, n_docs)
            rows = np.flatnonzero(picks == block)
            chosen = docs[rng.integers(n_docs, size=len(rows))]
            v = chosen + self.spec.chunk_spread * self._noise(rng, len(rows))
            out[rows] = v / np.linalg.norm(v, axis=1, keepdims=True)
        return out


class ExactTopK:
    """Running exact top-k (cosine = inner product of unit vectors) of fixed queries."""

    def __init__(self, queries: F32, k: int) -> None:
        self.queries = queries
        self.k = k
        self.scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        self.ids = np.full((len(queries), k), -1, dtype=np.int64)

    def add(self, vectors: F32, first_id: int) -> None:
        sims = self.queries @ vectors.T
        k = min(self.k, sims.shape[1])
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        cand_scores = np.concatenate([self.scores, np.take_along_axis(sims, part, axis=1)], axis=1)
        cand_ids = np.concatenate([self.ids, part + first_id], axis=1)
        best = np.argsort(-cand_scores, axis=1, kind="stable")[:, : self.k]
        self.scores = np.take_along_axis(cand_scores, best, axis=1)
        self.ids = np.take_along_axis(cand_ids, best, axis=1)
