"""Per-agent indexes over message (recall) vectors: exact below a threshold, FAISS IVF above.

One *message space* per (agent, embedding_version), like an archival vector space
(:mod:`vcm.store.embedded.vectorindex`) but keyed by the agent, so a query scans one agent's
vectors only. Ids are ``messages.id`` (AUTOINCREMENT, never reused), so the ``id <= bound``
corpus of a paged search is an ``IDSelectorRange`` and a hit is hydrated straight from SQLite.

* **Exact** while the space holds fewer than ``threshold`` vectors (the store's
  ``train_threshold``, 10 000 by default): a float32 matrix in id order
  (:class:`~vcm.store.embedded.messagemembers.ExactIndex`).
* **IVF** (``IVF<nLists>,Flat``, inner product on unit vectors) from the threshold on, sized by
  :mod:`vcm.store.embedded.sizing` (nLists = sqrt(N), nProbe = max(16, nLists/64), retrained
  when the ideal nLists doubles). Memory: 4·d + 8 bytes per message (1.5 GB for 1e6 at 384-d).

**No index work in a query.** Every insert into and delete from ``message_vectors`` appends to
``message_vector_log`` in the same transaction. A query never builds, trains, catches up or
saves: it searches the index as of the log ``seq`` the index has applied, plus the tail of log
rows above it (:mod:`vcm.store.embedded.messagetail`: read incrementally, scanned exactly,
bounded by ``tail_limit`` rows; its removes hide their ids at once). Past the bound the result
says it is ``partial``. Everything else is :meth:`MessageVectorIndexes.maintain`, run by the
store's upkeep thread (:mod:`vcm.store.embedded.upkeep`): load a persisted index, build or
(re)train one when the space crosses the threshold or its ideal nLists doubles, catch up with
the log, and persist at 10 % churn.

**Concurrency.** Maintenance is the only writer of a space's index, one pass at a time (the
space's ``upkeep`` lock). It reads SQLite, trains and assigns new vectors to IVF lists without
the space's ``lock``; it takes the lock only to apply a batch (an append to the lists, or
``remove_ids``) and advance the seq, or to swap in a rebuilt index, and it trims the tail in the
same critical section. A query holds the lock while it reads the tail and searches, so it sees
either (old index, its tail) or (new index, its shorter tail): every vector exactly once.
Persisting writes the index without the lock (searches only read it, and its one writer is busy
writing) to a side file, renamed into place under the lock unless the space was dropped.
A retrain builds the new index beside the old one (2× the memory while it builds).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt

from vcm.store.embedded import sizing
from vcm.store.embedded.db import Database
from vcm.store.embedded.messagebuild import Batch, build, log_row
from vcm.store.embedded.messagemembers import ExactIndex, Members
from vcm.store.embedded.messagetail import LogRow, Tail, merge
from vcm.store.embedded.vectorindex import SpaceKey, VectorIndex, _faiss_errors

log = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]
_READ_BATCH = 50_000
_APPLY_BATCH = 5_000  # vectors per critical section of a catch-up (assigned to lists beforehand)
_SWAP_BACKLOG = 2_000  # a rebuilt index is swapped in once at most this many log rows are left
DEFAULT_TAIL_LIMIT = 5_000
_LOG_ROWS = (
    "SELECT l.seq, l.op, l.row_id, v.embedding, m.seq FROM message_vector_log l "
    "LEFT JOIN messages m ON m.id = l.row_id "
    "LEFT JOIN message_vectors v ON v.agent_id = l.agent_id AND v.message_id = m.message_id "
    "AND v.embedding_version = l.embedding_version "
    "WHERE l.agent_id = ? AND l.embedding_version = ? AND l.seq > ? "
)


def space_key(agent_id: str, version: str, dimension: int) -> SpaceKey:
    """The message space of an agent's vectors of one embedding version (cosine)."""
    return SpaceKey("cosine", dimension, json.dumps([agent_id, version]))


@dataclass(frozen=True)
class Found:
    """A vector search's hits, and whether unindexed vectors past the tail bound were left out
    (``unscanned``: an upper bound on those log rows)."""

    hits: list[tuple[int, float]]
    partial: bool = False
    unscanned: int = 0


@dataclass
class _Space:
    tail: Tail
    lock: threading.Lock = field(default_factory=threading.Lock)  # searches and index swaps
    upkeep: threading.Lock = field(default_factory=threading.Lock)  # one maintenance pass at a time
    index: ExactIndex | VectorIndex | None = None
    members: Members = field(default_factory=Members)
    seq: int = 0  # highest message_vector_log seq applied to the index
    changed: int = 0  # vectors added or removed since the IVF index was last persisted
    loaded: bool = False  # a persisted index was looked for
    dropped: bool = False  # forgotten: maintenance must not write its files back
    # Positions known before the index is there (the persisted members, read before the index
    # file), so a partial query places its candidates from memory, not from SQLite. Not from a
    # build's first read: at 1e6 messages that read outlasted the first 100 queries it was to
    # serve and competed with them (p50 31.6 -> 34.8 ms, p99 175 -> 290 ms).
    placed: Members | None = None


class MessageVectorIndexes:
    """Every message space of one store, loaded lazily; kept in step by :meth:`maintain`."""

    def __init__(
        self,
        directory: Path,
        db: Database,
        *,
        threshold: int,
        n_probe: int | None,
        tail_limit: int = DEFAULT_TAIL_LIMIT,
        on_lag: Callable[[], None] | None = None,
    ) -> None:
        self.directory = directory
        self._db = db
        self._threshold = max(threshold, sizing.MIN_POINTS_PER_CENTROID * sizing.MIN_LISTS)
        self._n_probe = n_probe
        self._tail_limit = tail_limit
        self.on_lag = on_lag  # called when a query found unindexed rows (wakes the upkeep thread)
        self._spaces: dict[SpaceKey, _Space] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()

    @property
    def threshold(self) -> int:
        return self._threshold

    # --- the query path: index as applied + the tail, never a build --------------------------
    def search(
        self,
        agent_id: str,
        version: str,
        query: Vectors,
        k: int,
        *,
        top: int,
        window: Ids | None = None,
    ) -> Found:
        """Up to k (messages.id, cosine) best first among ids <= ``top`` (and in ``window``)."""
        key = space_key(agent_id, version, int(query.shape[-1]))
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        space = self._space(key)
        with space.lock, _faiss_errors(key):
            self._read_tail(key, space)
            partial = space.tail.partial(space.seq)
            found = Found([], partial, space.tail.gap_until - space.seq if partial else 0)
            if k <= 0 or (window is not None and not len(window)):
                return found
            index, hidden = space.index, space.tail.hides()
            indexed: list[tuple[int, float]] = []
            if index is not None and index.ntotal:
                want = k + space.tail.removes()
                if isinstance(index, ExactIndex):
                    indexed = index.search(q, want, top, window)
                else:
                    indexed = self._search_ivf(index, q, want, top, window)
            hits = merge(indexed, space.tail.search(q, k, top, window), hidden, k)
            return Found(hits, found.partial, found.unscanned)

    def size(self, agent_id: str, version: str, dimension: int) -> int:
        """How many vectors a search sees (indexed plus the tail; past the bound, an estimate
        that counts every unscanned log row as an add)."""
        key = space_key(agent_id, version, dimension)
        space = self._space(key)
        with space.lock, _faiss_errors(key):
            self._read_tail(key, space)
            indexed = space.index.ntotal if space.index is not None else 0
            gap = space.tail.gap_until - space.seq if space.tail.partial(space.seq) else 0
            return max(0, indexed + space.tail.added() - space.tail.removes() + gap)

    def positions(self, agent_id: str, version: str, dimension: int, ids: Sequence[int]) -> dict[int, int]:
        """``{messages.id: seq}`` for those of ``ids`` with a vector in the space, as the last
        search saw it (the index's members, then the tail's adds and removes)."""
        space = self._space(space_key(agent_id, version, dimension))
        with space.lock:
            if space.index is not None:
                out = space.members.positions(ids)
            else:
                out = space.placed.positions(ids) if space.placed is not None else {}
            hidden, tail = space.tail.hides(), space.tail.positions()
            for i in ids:
                if i in tail:
                    out[i] = tail[i]
                elif i in hidden:
                    out.pop(i, None)
            return out

    def _read_tail(self, key: SpaceKey, space: _Space) -> None:
        """Read the log rows above the tail's newest (the newest ``tail_limit`` of them)."""
        agent_id, version = json.loads(key.version)
        tail = space.tail
        rows = self._db.query(
            "read unindexed message vectors",
            _LOG_ROWS + "ORDER BY l.seq DESC LIMIT ?",
            (agent_id, version, tail.seq, tail.limit),
        )
        skipped_below = None
        if len(rows) == tail.limit:
            older = self._db.query(
                "look for older unindexed message vectors",
                "SELECT 1 FROM message_vector_log WHERE agent_id = ? AND embedding_version = ? "
                "AND seq > ? AND seq < ? LIMIT 1",
                (agent_id, version, tail.seq, int(rows[-1][0])),
            )
            skipped_below = int(rows[-1][0]) if older else None
        tail.extend([log_row(r) for r in reversed(rows)], skipped_below=skipped_below)
        if (rows or space.index is None or tail.partial(space.seq)) and self.on_lag is not None:
            self.on_lag()

    def _search_ivf(
        self, index: VectorIndex, q: Vectors, k: int, top: int, window: Ids | None
    ) -> list[tuple[int, float]]:
        assert index.n_lists is not None
        probe = sizing.default_n_probe(index.n_lists) if self._n_probe is None else self._n_probe
        params = faiss.SearchParametersIVF()
        if window is None:
            selector: Any = faiss.IDSelectorRange(0, top + 1)
        else:
            window = np.ascontiguousarray(window[window <= top], dtype=np.int64)
            if not len(window):
                return []
            selector = faiss.IDSelectorBatch(len(window), faiss.swig_ptr(window))
            probe = math.ceil(probe * index.ntotal / len(window))
        params.sel = selector
        params.nprobe = max(1, min(probe, index.n_lists))
        distances, labels = index.index.search(q, min(k, index.ntotal), params=params)
        hits = [
            (int(label), float(dist))
            for dist, label in zip(distances[0].tolist(), labels[0].tolist(), strict=True)
            if label >= 0
        ]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits

    def _space(self, key: SpaceKey) -> _Space:
        with self._lock:
            space = self._spaces.get(key)
            if space is None:
                space = self._spaces[key] = _Space(Tail(key.dimension, self._tail_limit))
            return space

    # --- maintenance (the upkeep thread, or flush) ---------------------------------------------
    def loaded_keys(self) -> list[SpaceKey]:
        with self._lock:
            return sorted(self._spaces)

    def maintain(self, key: SpaceKey) -> bool:
        """One pass over a space: load its persisted index, (re)build it when due, catch it up
        with the log and persist it at 10 % churn. False when there was nothing to do."""
        space = self._space(key)
        with space.upkeep, _faiss_errors(key):
            if space.dropped or self._closing.is_set():
                return False
            worked = False
            if not space.loaded:
                worked = self._load(key, space)
            with space.lock:
                index, seq = space.index, space.seq
            backlog = self._count_above(key, seq)
            size = (index.ntotal if index is not None else 0) + backlog
            if (
                (index is None and backlog)
                or (isinstance(index, ExactIndex) and size >= self._threshold)
                or (
                    isinstance(index, VectorIndex)
                    and index.n_lists is not None
                    and sizing.should_retrain(index.n_lists, size, None)
                )
            ):
                self._rebuild(key, space)
                return True
            if backlog:
                self._catch_up(key, space)
                worked = True
            with space.lock:
                index, changed = space.index, space.changed
            if isinstance(index, VectorIndex) and changed >= max(1000, index.saved_ntotal // 10):
                self._save(key, space)
                worked = True
            return worked

    def flush(self, agent_id: str | None = None) -> None:
        """Bring every message space (of ``agent_id``, or all in SQLite) level with the log now."""
        where, params = ("WHERE agent_id = ?", (agent_id,)) if agent_id is not None else ("", ())
        found = self._db.query(
            "list message vector spaces",
            f"SELECT DISTINCT agent_id, embedding_version, dimension FROM message_vectors {where}",
            params,
        )
        keys = {space_key(str(a), str(v), int(d)) for a, v, d in found}
        keys.update(k for k in self.loaded_keys() if agent_id is None or json.loads(k.version)[0] == agent_id)
        for key in sorted(keys):
            for _ in range(100):  # bounded under a writer that never stops
                if not self.maintain(key):
                    break

    def close(self) -> None:
        """Stop maintenance passes (a build in progress gives up at its next step)."""
        self._closing.set()

    def _count_above(self, key: SpaceKey, seq: int) -> int:
        agent_id, version = json.loads(key.version)
        return int(
            self._db.query(
                "count unindexed message vectors",
                "SELECT COUNT(*) FROM message_vector_log WHERE agent_id = ? AND embedding_version = ? AND seq > ?",
                (agent_id, version, seq),
            )[0][0]
        )

    def _load(self, key: SpaceKey, space: _Space) -> bool:
        # The members first (megabytes, read in well under a second): positions do not change,
        # so they place candidates while the index itself is read (seconds at 1e6 vectors).
        early = self._read_members(key, None)
        if early is not None:
            self._place(space, early[0])
        loaded = VectorIndex.read(key, self._path(key))
        members = early[0] if early is not None and loaded is not None and early[1] == loaded.hwm else None
        with space.lock:
            space.loaded = True
            if loaded is None or members is None or space.index is not None:
                return False
            space.index, space.members, space.seq, space.changed = loaded, members, loaded.hwm, 0
            space.placed = None
            space.tail.applied(loaded.hwm)
        return True

    @staticmethod
    def _place(space: _Space, members: Members) -> None:
        with space.lock:
            if space.index is None and not space.dropped:
                space.placed = members

    def _read_log(self, key: SpaceKey, above: int, limit: int) -> list[LogRow]:
        agent_id, version = json.loads(key.version)
        rows = self._db.query(
            "read message vector changes", _LOG_ROWS + "ORDER BY l.seq LIMIT ?", (agent_id, version, above, limit)
        )
        return [log_row(r) for r in rows]

    def _catch_up(self, key: SpaceKey, space: _Space) -> None:
        """Apply the log above the space's seq to its index, a batch per critical section."""
        while not self._closing.is_set():
            with space.lock:
                index, seq = space.index, space.seq
            assert index is not None
            rows = self._read_log(key, seq, _APPLY_BATCH)
            if not rows:
                return
            batch = Batch.of(rows, key.dimension, index)
            with space.lock:
                batch.apply(space.index, space.members)
                space.changed += batch.count
                space.seq = rows[-1].seq
                space.tail.applied(space.seq)

    def _rebuild(self, key: SpaceKey, space: _Space) -> None:
        """Build a new index beside the serving one, catch it up, then swap it in."""
        index, members, seq = build(self._db, key, self._threshold, self._closing)
        while not self._closing.is_set():
            rows = self._read_log(key, seq, _APPLY_BATCH)
            if len(rows) < _SWAP_BACKLOG:
                break
            Batch.of(rows, key.dimension, index).apply(index, members)
            seq = rows[-1].seq
        if self._closing.is_set():
            return
        with space.lock:
            if space.dropped:
                return
            while rows := self._read_log(key, seq, _READ_BATCH):  # the last few, under the lock
                Batch.of(rows, key.dimension, index).apply(index, members)
                seq = rows[-1].seq
            space.index, space.members, space.seq, space.changed = index, members, seq, 0
            space.placed = None
            space.tail.applied(seq)
        if isinstance(index, VectorIndex):
            self._save(key, space)

    def _save(self, key: SpaceKey, space: _Space) -> None:
        """Persist the space's IVF index and members: written beside the files without the lock
        (searches only read the index; maintenance, its one writer, is here), renamed into place
        under it unless the space was dropped meanwhile."""
        with space.lock:
            index = space.index
            if not isinstance(index, VectorIndex) or space.dropped:
                return
            len(space.members)  # merged: the arrays are replaced, never changed in place, from here on
            ids, seqs, hwm = space.members.ids, space.members.seqs, space.seq
            index.hwm = hwm
            changed = space.changed
        path = self._path(key)
        members_path = path.with_suffix(".members.npz")
        pending = path.with_name(path.name + ".pending")
        pending_members = members_path.with_name(members_path.stem + ".pending.npz")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            np.savez(pending_members, ids=ids, seqs=seqs, hwm=np.int64(hwm))
            index.write(pending)
            with space.lock:
                if space.dropped or space.index is not index:
                    raise FileNotFoundError("the space was dropped or rebuilt while it was written")
                os.replace(pending_members, members_path)
                os.replace(pending, path)
                space.changed -= changed
        except OSError as exc:  # the index stays usable in memory; SQLite still has every row
            for doomed in (pending, pending_members):
                doomed.unlink(missing_ok=True)
            if not isinstance(exc, FileNotFoundError):
                log.warning("could not persist message vector index %s: %s", key, exc)

    def _read_members(self, key: SpaceKey, hwm: int | None) -> tuple[Members, int] | None:
        """The persisted ids and positions of a persisted index and its log mark (None when
        missing, or not of the mark ``hwm`` when one is given)."""
        try:
            with np.load(self._path(key).with_suffix(".members.npz")) as data:
                mark = int(data["hwm"])
                if hwm is not None and mark != hwm:
                    return None
                members = Members()
                members.ids, members.seqs = data["ids"].astype(np.int64), data["seqs"].astype(np.int64)
                return members, mark
        except (OSError, ValueError, KeyError):
            return None

    def _path(self, key: SpaceKey) -> Path:
        return self.directory / key.filename()

    # --- upkeep -----------------------------------------------------------------------------
    def forget(self, keys: Sequence[SpaceKey]) -> None:
        """Drop these spaces (a deleted agent's) from memory and disk."""
        with self._lock:
            for key in keys:
                space = self._spaces.pop(key, None)
                if space is not None:
                    with space.lock:
                        space.dropped = True
                path = self._path(key)
                for doomed in (path, path.with_suffix(".members.npz")):
                    doomed.unlink(missing_ok=True)

    def rebuild(self) -> None:
        """Forget every message index (memory and disk); maintenance rebuilds them from SQLite."""
        with self._lock:
            for space in self._spaces.values():
                with space.lock:
                    space.dropped = True
            self._spaces.clear()
            if self.directory.exists():
                for pattern in ("*.faiss", "*.npz", "*.pending"):
                    for path in self.directory.glob(pattern):
                        path.unlink(missing_ok=True)

    def save_all(self) -> None:
        """Persist changed IVF indexes (at close); a space under maintenance is left as it is."""
        with self._lock:
            spaces = list(self._spaces.items())
        for key, space in spaces:
            if not space.upkeep.acquire(blocking=False):
                continue
            try:
                if isinstance(space.index, VectorIndex) and space.changed:
                    self._save(key, space)
            finally:
                space.upkeep.release()

    def describe(self, agent_id: str) -> list[dict[str, Any]]:
        """The loaded message spaces of an agent."""
        with self._lock:
            items = sorted(self._spaces.items(), key=lambda item: item[0])
        out = []
        for key, space in items:
            owner, version = json.loads(key.version)
            index = space.index
            if owner != agent_id or index is None:
                continue
            out.append(
                {
                    "embedding_version": version,
                    "dimension": key.dimension,
                    "kind": index.kind,
                    "n_lists": index.n_lists,
                    "vectors": index.ntotal,
                    "log_seq": space.seq,
                    "tail_rows": len(space.tail),
                    "partial": space.tail.partial(space.seq),
                }
            )
        return out
