"""The not-yet-indexed tail of a message space: what a query scans exactly beside the index.

A message space's index (:mod:`vcm.store.embedded.messageindex`) is changed only by the
store's maintenance (a background thread), never by a query. A query therefore sees the index as
of the ``message_vector_log`` seq it has applied, plus this tail: the log rows above that seq,
read by queries (incrementally: each query reads only the rows above the newest it has seen) and
scanned exactly. Removes in the tail hide those ids from the index's hits at once, so an expired
or forgotten message leaves recall with the query after its commit, not after the next upkeep.

The tail is bounded (``limit`` log rows, newest kept): a bulk load of a million vectors must not
turn the first query into a million-row read. Past the bound the oldest unindexed rows are not
scanned (``gap_until``: every row in ``(index seq, gap_until]`` is neither indexed nor read) and
the query says so (``partial``); maintenance closes the gap by indexing. Pure, apart from the
rows handed in; not thread-safe (the space's lock guards it).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]


@dataclass(frozen=True)
class LogRow:
    """One ``message_vector_log`` row as a tail holds it (``vector`` None for a remove, or for an
    add whose vector or message is gone by the time it was read)."""

    seq: int
    op: int
    row_id: int
    vector: bytes | None
    position: int | None  # messages.seq


class Tail:
    def __init__(self, dimension: int, limit: int) -> None:
        self.dimension = dimension
        self.limit = max(1, limit)
        self.seq = 0  # the newest log seq read
        self.gap_until = 0  # rows in (index seq, gap_until] were neither indexed nor read
        self._rows: list[LogRow] = []
        self._removes = 0
        self._view: tuple[Ids, Vectors, dict[int, int], frozenset[int]] | None = None  # derived, cached

    def __len__(self) -> int:
        return len(self._rows)

    def extend(self, rows: list[LogRow], *, skipped_below: int | None = None) -> None:
        """Append rows newer than :attr:`seq` (ascending). ``skipped_below``: the caller read only
        the newest rows and rows older than it (down to :attr:`seq`) exist unread: the tail
        restarts there and everything before is a gap."""
        if skipped_below is not None:
            self._rows = []
            self.gap_until = max(self.gap_until, skipped_below - 1)
        if not rows:
            return
        self._rows.extend(rows)
        self.seq = max(self.seq, rows[-1].seq)
        if len(self._rows) > self.limit:
            dropped = len(self._rows) - self.limit
            self.gap_until = max(self.gap_until, self._rows[dropped - 1].seq)
            del self._rows[:dropped]
        self._view = None

    def applied(self, index_seq: int) -> None:
        """The index now holds every row up to ``index_seq``: drop them from the tail."""
        keep = [r for r in self._rows if r.seq > index_seq]
        if len(keep) != len(self._rows):
            self._rows = keep
            self._view = None
        self.seq = max(self.seq, index_seq)
        if self.gap_until <= index_seq:
            self.gap_until = 0

    def partial(self, index_seq: int) -> bool:
        """Whether some unindexed rows are not in the tail (a query then misses them)."""
        return self.gap_until > index_seq

    def _current(self) -> tuple[Ids, Vectors, dict[int, int], frozenset[int]]:
        """(ids, unit vectors, positions) of the tail's live adds, and the ids it hides."""
        if self._view is None:
            adds: OrderedDict[int, LogRow] = OrderedDict()
            removed: set[int] = set()
            for row in self._rows:  # in log order: the last word on an id wins
                if row.op > 0:
                    removed.discard(row.row_id)
                    if row.vector is not None:
                        adds[row.row_id] = row
                else:
                    adds.pop(row.row_id, None)
                    removed.add(row.row_id)
            ids = np.fromiter(adds.keys(), dtype=np.int64, count=len(adds))
            matrix = np.frombuffer(b"".join(r.vector or b"" for r in adds.values()), dtype="<f4")
            matrix = np.ascontiguousarray(matrix.reshape(len(adds), self.dimension), dtype=np.float32)
            positions = {i: int(r.position) for i, r in adds.items() if r.position is not None}
            # Ids whose index entry must not be served: removed, or (re-)added, in the tail.
            hides = frozenset(removed) | frozenset(adds.keys())
            self._removes = len(removed)
            self._view = (ids, matrix, positions, hides)
        return self._view

    def added(self) -> int:
        return len(self._current()[0])

    def removes(self) -> int:
        """How many ids the tail removed (their index entries may take a query's top slots)."""
        self._current()
        return self._removes

    def hides(self) -> frozenset[int]:
        """Ids whose index entry must not be served: removed, or (re-)added, in the tail."""
        return self._current()[3]

    def positions(self) -> dict[int, int]:
        return self._current()[2]

    def search(self, query: Vectors, k: int, top: int, window: Ids | None) -> list[tuple[int, float]]:
        """Exact cosine top-``k`` of the tail's adds among ids <= ``top`` (and in ``window``),
        ties by id. The matrix is scored in place (a masked copy of 5 000 x 384 floats would
        cost more than the scan)."""
        ids, matrix, _, _ = self._current()
        if k <= 0 or not len(ids):
            return []
        scores = matrix @ query.reshape(-1)
        mask = ids <= top
        if window is not None:
            mask &= np.isin(ids, window)
        eligible = int(mask.sum())
        if eligible < len(ids):
            scores = np.where(mask, scores, -np.inf)
        order = np.lexsort((ids, -scores))[: min(k, eligible)]
        return [(int(ids[i]), float(scores[i])) for i in order]


def merge(
    indexed: list[tuple[int, float]], tail: list[tuple[int, float]], hidden: frozenset[int], k: int
) -> list[tuple[int, float]]:
    """The index's hits (minus ``hidden`` ids) and the tail's, best first, ties by id (pure)."""
    hits = [h for h in indexed if h[0] not in hidden] + tail
    hits.sort(key=lambda h: (-h[1], h[0]))
    return hits[:k]
