"""Vectors of a summary's drift texts, embedded once: per job (:class:`JobVectors`) and across
the jobs of one process (:class:`RecentVectors`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from vcm.tasks.summary.request import Embed
from vcm.tasks.summary.selection import Vectors

# About four 128k jobs' drift texts (~96 each), or forty agents' at smaller windows: 1.5 MB of
# MiniLM vectors.
RECENT_TEXTS = 4096


class RecentVectors:
    """The last :data:`RECENT_TEXTS` drift texts' vectors of this process, by embedder and text.
    A job's drift sample holds clauses the agent's previous job embedded too (the previous
    summary's, carried over): 331 of 972 texts at an 8k window, 217 of 693 at 2k (bench_evict,
    one process). So it pays where one process runs an agent's evictions: embedded mode, or a
    worker that happened to take both. Thread-safe: embedded mode runs jobs on threads."""

    def __init__(self, size: int = RECENT_TEXTS) -> None:
        # Keyed by the embedder's id, which the entry keeps alive (so no other object takes the
        # id while it is there), since an embedder need not be hashable.
        self._rows: OrderedDict[tuple[int, str], tuple[Embed, Vectors]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, embed: Embed, text: str) -> Vectors | None:
        key = (id(embed), text)
        with self._lock:
            entry = self._rows.get(key)
            if entry is None or entry[0] is not embed:
                return None
            self._rows.move_to_end(key)
            return entry[1]

    def put(self, embed: Embed, text: str, row: Vectors) -> None:
        key = (id(embed), text)
        with self._lock:
            self._rows[key] = (embed, row)
            self._rows.move_to_end(key)
            while len(self._rows) > self._size:
                self._rows.popitem(last=False)


class JobVectors:
    """Embeds each distinct text once per job (a drift retry re-reads the same sentences), taking
    those ``recent`` holds from it (the key holds the embedder itself: a swapped model is never
    answered from the old one's vectors)."""

    def __init__(self, embed: Embed, recent: RecentVectors | None = None) -> None:
        self._embed = embed
        self._recent = recent
        self._rows: dict[str, Vectors] = {}

    def __call__(self, texts: Sequence[str]) -> Vectors:
        missing = [t for t in dict.fromkeys(texts) if t not in self._rows]
        if self._recent is not None:
            for text in missing:
                row = self._recent.get(self._embed, text)
                if row is not None:
                    self._rows[text] = row
            missing = [t for t in missing if t not in self._rows]
        if missing:
            for text, row in zip(missing, self._embed(missing), strict=True):
                self._rows[text] = row
                if self._recent is not None:
                    self._recent.put(self._embed, text, row)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._rows[t] for t in texts]).astype(np.float32)
