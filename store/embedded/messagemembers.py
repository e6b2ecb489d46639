"""The in-memory parts of a message space (:mod:`vcm.store.embedded.messageindex`): the exact
tier's matrix and the members' conversation positions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from vcm.store import fusion

Vectors = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]


class ExactIndex:
    """Unit vectors in ascending id order; exact cosine search (ties by id)."""

    kind = "exact"
    n_lists: int | None = None

    def __init__(self, dimension: int) -> None:
        self.ids: Ids = np.empty(0, dtype=np.int64)
        self.matrix: Vectors = np.empty((0, dimension), dtype=np.float32)

    @property
    def ntotal(self) -> int:
        return len(self.ids)

    def add(self, ids: Ids, vectors: Vectors) -> None:
        if not len(ids):
            return
        all_ids = np.concatenate([self.ids, ids])
        matrix = np.concatenate([self.matrix, vectors])
        if (len(self.ids) and ids.min() <= self.ids[-1]) or np.any(np.diff(ids) < 0):
            order = np.argsort(all_ids, kind="stable")
            all_ids, matrix = all_ids[order], matrix[order]
        self.ids, self.matrix = all_ids, np.ascontiguousarray(matrix)

    def remove(self, ids: Ids) -> None:
        keep = ~np.isin(self.ids, ids)
        if not keep.all():
            self.ids, self.matrix = self.ids[keep], self.matrix[keep]

    def search(self, query: Vectors, k: int, top: int, window: Ids | None) -> list[tuple[int, float]]:
        mask = self.ids <= top
        if window is not None:
            mask &= np.isin(self.ids, window)
        if mask.all():
            return fusion.cosine_top(query[0], self.ids.tolist(), self.matrix, k)
        return fusion.cosine_top(query[0], self.ids[mask].tolist(), self.matrix[mask], k)


class Members:
    """The ids in a space and each one's conversation position (``messages.seq``), so hybrid
    recall needs no SQLite read to place its candidates: sorted arrays, plus a small dict of
    recent changes merged into them once it grows (8 + 8 bytes per message)."""

    _MERGE_AT = 4096

    def __init__(self) -> None:
        self.ids: Ids = np.empty(0, dtype=np.int64)
        self.seqs: Ids = np.empty(0, dtype=np.int64)
        self._added: dict[int, int] = {}
        self._removed: set[int] = set()

    def __len__(self) -> int:
        self._merge()
        return len(self.ids)

    def add(self, ids: Ids, seqs: Ids) -> None:
        # An id removed and added again stays in _removed too, so the merge drops its old entry.
        self._added.update(zip(ids.tolist(), seqs.tolist(), strict=True))
        if len(self._added) >= self._MERGE_AT:
            self._merge()

    def remove(self, ids: Ids) -> None:
        for i in ids.tolist():
            self._added.pop(i, None)
        self._removed.update(ids.tolist())
        if len(self._removed) >= self._MERGE_AT:
            self._merge()

    def _merge(self) -> None:
        if not self._added and not self._removed:
            return
        ids, seqs = self.ids, self.seqs
        if self._removed:
            keep = ~np.isin(ids, np.fromiter(self._removed, dtype=np.int64))
            ids, seqs = ids[keep], seqs[keep]
        if self._added:
            new_ids = np.fromiter(self._added.keys(), dtype=np.int64, count=len(self._added))
            new_seqs = np.fromiter(self._added.values(), dtype=np.int64, count=len(self._added))
            order = np.argsort(new_ids, kind="stable")
            new_ids, new_seqs = new_ids[order], new_seqs[order]
            if len(ids) and new_ids[0] <= ids[-1]:
                # An id below the newest member: vectors committed out of id order (two cold
                # workers, a backfill or re-embedding of older messages): merge by sorting all.
                ids, seqs = np.concatenate([ids, new_ids]), np.concatenate([seqs, new_seqs])
                order = np.argsort(ids, kind="stable")
                ids, seqs = ids[order], seqs[order]
            else:
                # New messages: appending keeps the order (no sort of a million ids per merge).
                ids, seqs = np.concatenate([ids, new_ids]), np.concatenate([seqs, new_seqs])
        self.ids, self.seqs = ids, seqs
        self._added, self._removed = {}, set()

    def positions(self, ids: Sequence[int]) -> dict[int, int]:
        """``{id: seq}`` for those of ``ids`` in the space."""
        out: dict[int, int] = {}
        if len(self.ids):
            wanted = np.asarray(ids, dtype=np.int64)
            at = np.minimum(np.searchsorted(self.ids, wanted), len(self.ids) - 1)
            hit = self.ids[at] == wanted
            out.update(zip(wanted[hit].tolist(), self.seqs[at[hit]].tolist(), strict=True))
        for i in ids:
            if i in self._added:
                out[i] = self._added[i]
            elif i in self._removed:
                out.pop(i, None)
        return out
