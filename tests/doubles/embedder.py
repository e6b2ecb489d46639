"""A deterministic stand-in for the embedding model: words hashed into a bag of ``dim`` buckets,
unit length, so texts sharing words point the same way, without loading torch (tests of the real
model live with the workers and tasks/ingest).

Three configurations, kept apart because tests were tuned on each:

- :data:`hash_embed`: 32 buckets, words are ``\\w+`` runs, an empty text is the first axis (the
  façade, the tools, the harness);
- :data:`split_embed`: 32 buckets, words split on whitespace (punctuation stays on the word), an
  empty text is the first axis (the HTTP API's tests);
- :data:`word_embed`: 64 buckets (blake2b), words split on whitespace, ``:`` and ``.``, an empty
  text stays zero (the cold-path tasks).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from vcm.tasks.recall.vectors import Turn
from vcm.tasks.summary.selection import Vectors


def _sha256(word: str) -> int:
    return int(hashlib.sha256(word.encode()).hexdigest(), 16)


def _blake2b_32(word: str) -> int:
    return int(hashlib.blake2b(word.encode(), digest_size=4).hexdigest(), 16)


DIGESTS = {"sha256": _sha256, "blake2b-32": _blake2b_32}


class HashEmbedder:
    """Each lower-cased word (a match of ``words``) adds one to bucket ``digest(word) % dim``; rows are
    scaled to unit length. An empty row becomes the first axis (``empty="first"``) or stays zero."""

    def __init__(
        self,
        dim: int,
        *,
        words: str = r"\w+",
        digest: Literal["sha256", "blake2b-32"] = "sha256",
        empty: Literal["first", "zero"] = "first",
    ) -> None:
        self.dim = dim
        self.words = re.compile(words)
        self.digest = DIGESTS[digest]
        self.empty = empty

    def __call__(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in self.words.findall(text.lower()):
                out[i, self.digest(word) % self.dim] += 1.0
            norm = float(np.linalg.norm(out[i]))
            if norm:
                out[i] /= norm
            elif self.empty == "first":
                out[i, 0] = 1.0
        return out


hash_embed = HashEmbedder(32)
split_embed = HashEmbedder(32, words=r"\S+")
word_embed = HashEmbedder(64, words=r"[^\s:.]+", digest="blake2b-32", empty="zero")


class WordVectorizer:
    """Message vectors from :data:`word_embed`, each message alone (no model)."""

    version = "word-hash:single:v1"
    context = 0
    after = 0

    def embed(self, history: Sequence[Turn], targets: Sequence[Turn]) -> list[Vectors | None]:
        rows = word_embed([t.text for t in targets])
        return [row if t.text.strip() else None for t, row in zip(targets, rows, strict=True)]
