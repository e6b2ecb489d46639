"""Per-agent indexes over message (recall) vectors: exact below a threshold, FAISS IVF above.

One *message space* per (agent, embedding_version), like an archival vector space
(:mod:`vcm.store.embedded.vectorindex`) but keyed by the agent, so a query scans one agent's
vectors only. Ids are ``messages.id`` (AUTOINCREMENT, never reused), so the ``id <= bound``
corpus of a paged search is an ``IDSelectorRange`` and a hit is hydrated straight from SQLite.

* **Exact** while the space holds fewer than ``threshold`` vectors (the store's
  ``train_threshold``, 10 000 by default: 1-2 ms per query): a float32 matrix in id order,
  ranked by :func:`vcm.store.fusion.cosine_top`, so results are those of a full scan (ties by
  age).
* **IVF** (``IVF<nLists>,Flat``, inner product on unit vectors) once it reaches the threshold,
  sized by :mod:`vcm.store.embedded.sizing` as the archival spaces are (nLists = sqrt(N),
  nProbe = max(16, nLists/64), retrained when the ideal nLists doubles). Memory is the vectors
  themselves plus the ids: 4·d + 8 bytes per message (1 544 B at 384-d, 1.5 GB for 1e6).
  It stays IVF if expiry later shrinks it below the threshold.

Keeping in step: every insert into and delete from ``message_vectors`` also appends to
``message_vector_log`` in the same transaction. An index remembers the highest log ``seq`` it
has applied and, before each search, applies the log rows above it (adds read their vector
through the join; removes call ``remove_ids``), so vectors put or expired by another process
are seen at once and no vector is re-read from SQLite per query. A space is built from SQLite
(``message_vectors``) on first use, with the log's high-water mark read in the same snapshot;
trained IVF indexes are persisted under ``<db>.faiss/messages/`` (the mark in the header) so a
restart does not retrain, and ``rebuild()`` drops them all.

A time window (``since``/``until``) is an ``IDSelectorBatch`` of the window's message ids; on an
IVF index nProbe grows by the inverse of the window's share of the space (capped at nLists), so
a narrow window is searched exhaustively (exactly) rather than through a few lists that hold
none of it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt

from vcm.store import fusion
from vcm.store.embedded import sizing
from vcm.store.embedded.db import Database, chunked
from vcm.store.embedded.vectorindex import SpaceKey, VectorIndex, _faiss_errors

log = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]
_READ_BATCH = 50_000
_TRAIN_SEED = 1234


def space_key(agent_id: str, version: str, dimension: int) -> SpaceKey:
    """The message space of an agent's vectors of one embedding version (cosine)."""
    return SpaceKey("cosine", dimension, json.dumps([agent_id, version]))


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


@dataclass
class _Space:
    lock: threading.Lock = field(default_factory=threading.Lock)
    index: ExactIndex | VectorIndex | None = None
    members: Members = field(default_factory=Members)
    seq: int = 0  # highest message_vector_log seq applied
    changed: int = 0  # vectors added or removed since the IVF index was last persisted


class MessageVectorIndexes:
    """Every message space of one store, loaded lazily and kept caught up with SQLite."""

    def __init__(self, directory: Path, db: Database, *, threshold: int, n_probe: int | None) -> None:
        self.directory = directory
        self._db = db
        self._threshold = max(threshold, sizing.MIN_POINTS_PER_CENTROID * sizing.MIN_LISTS)
        self._n_probe = n_probe
        self._spaces: dict[SpaceKey, _Space] = {}
        self._lock = threading.Lock()

    @property
    def threshold(self) -> int:
        return self._threshold

    def search(
        self,
        agent_id: str,
        version: str,
        query: Vectors,
        k: int,
        *,
        top: int,
        window: Ids | None = None,
    ) -> list[tuple[int, float]]:
        """Up to k (messages.id, cosine) best first among ids <= ``top`` (and in ``window``)."""
        key = space_key(agent_id, version, int(query.shape[-1]))
        q = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        space = self._space(key)
        with space.lock, _faiss_errors(key):
            index = self._current(key, space)
            if k <= 0 or index.ntotal == 0 or (window is not None and not len(window)):
                return []
            if isinstance(index, ExactIndex):
                return index.search(q, k, top, window)
            return self._search_ivf(index, q, k, top, window)

    def size(self, agent_id: str, version: str, dimension: int) -> int:
        """How many vectors the space holds (loaded and caught up first, as a search would)."""
        key = space_key(agent_id, version, dimension)
        space = self._space(key)
        with space.lock, _faiss_errors(key):
            return self._current(key, space).ntotal

    def positions(self, agent_id: str, version: str, dimension: int, ids: Sequence[int]) -> dict[int, int]:
        """``{messages.id: seq}`` for those of ``ids`` with a vector in the space, as of its last
        catch-up (the search just before, in hybrid recall)."""
        space = self._space(space_key(agent_id, version, dimension))
        with space.lock:
            return space.members.positions(ids) if space.index is not None else {}

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
                space = self._spaces[key] = _Space()
            return space

    # --- keeping in step ------------------------------------------------------------------
    def _current(self, key: SpaceKey, space: _Space) -> ExactIndex | VectorIndex:
        if space.index is None:
            loaded = VectorIndex.read(key, self._path(key))
            members = None if loaded is None else self._read_members(key, loaded.hwm)
            if loaded is not None and members is not None:
                space.index, space.members, space.seq = loaded, members, loaded.hwm
            else:
                self._build(key, space)
        self._catch_up(key, space)
        assert space.index is not None
        index = space.index
        if isinstance(index, ExactIndex) and index.ntotal >= self._threshold:
            self._build(key, space)
        elif isinstance(index, VectorIndex) and index.n_lists is not None:
            if sizing.should_retrain(index.n_lists, index.ntotal, None):
                self._build(key, space)
            elif space.changed >= max(1000, index.saved_ntotal // 10):
                self._save(index, space)
        assert space.index is not None
        return space.index

    def _catch_up(self, key: SpaceKey, space: _Space) -> None:
        agent_id, version = json.loads(key.version)
        assert space.index is not None
        while True:
            rows = self._db.query(
                "read message vector changes",
                "SELECT l.seq, l.op, l.row_id, v.embedding, m.seq FROM message_vector_log l "
                "LEFT JOIN messages m ON m.id = l.row_id "
                "LEFT JOIN message_vectors v ON v.agent_id = l.agent_id AND v.message_id = m.message_id "
                "AND v.embedding_version = l.embedding_version "
                "WHERE l.agent_id = ? AND l.embedding_version = ? AND l.seq > ? ORDER BY l.seq LIMIT ?",
                (agent_id, version, space.seq, _READ_BATCH),
            )
            if not rows:
                return
            adds = [(int(r[2]), r[3], int(r[4])) for r in rows if r[1] > 0 and r[3] is not None]
            removes = np.array([int(r[2]) for r in rows if r[1] < 0], dtype=np.int64)
            with single_threaded():  # a few new rows per search: see single_threaded
                if adds:
                    ids = np.array([a[0] for a in adds], dtype=np.int64)
                    vectors = np.frombuffer(b"".join(a[1] for a in adds), dtype="<f4")
                    _add(space.index, ids, np.ascontiguousarray(vectors.reshape(len(adds), key.dimension)))
                    space.members.add(ids, np.array([a[2] for a in adds], dtype=np.int64))
                if len(removes):
                    _remove(space.index, removes)
                    space.members.remove(removes)
            space.changed += len(adds) + len(removes)
            space.seq = int(rows[-1][0])
            if isinstance(space.index, VectorIndex):
                space.index.hwm = space.seq

    def _build(self, key: SpaceKey, space: _Space) -> None:
        """(Re)build the space from ``message_vectors``: exact or trained IVF by its size."""
        started = time.monotonic()
        agent_id, version = json.loads(key.version)
        space.index, space.members = None, Members()  # free the old index before building the new one
        join = (
            "FROM message_vectors v JOIN messages m ON m.agent_id = v.agent_id AND m.message_id = v.message_id "
            "WHERE v.agent_id = ? AND v.embedding_version = ? AND v.dimension = ?"
        )
        params = (agent_id, version, key.dimension)
        with self._db.read("build a message vector index") as conn:
            seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM message_vector_log").fetchone()[0])
            ids = np.fromiter((r[0] for r in conn.execute(f"SELECT m.id {join}", params)), dtype=np.int64)
            index: ExactIndex | VectorIndex
            if len(ids) < self._threshold:
                index = ExactIndex(key.dimension)
            else:
                n_lists = sizing.auto_n_lists(len(ids))
                size = sizing.training_sample_size(len(ids), n_lists)
                rng = np.random.default_rng(_TRAIN_SEED)
                sample = ids if size >= len(ids) else rng.choice(ids, size=size, replace=False)
                vectors = np.empty((len(sample), key.dimension), dtype=np.float32)
                at = 0
                by_id = (  # messages first: a lookup per sampled id, not a scan per chunk
                    "SELECT v.embedding FROM messages m CROSS JOIN message_vectors v ON v.agent_id = m.agent_id "
                    "AND v.message_id = m.message_id AND v.embedding_version = ? AND v.dimension = ? "
                    "WHERE m.agent_id = ? AND m.id IN ({})"
                )
                for part in chunked(np.sort(sample).tolist()):
                    marks = ",".join("?" * len(part))
                    for row in conn.execute(by_id.format(marks), (version, key.dimension, agent_id, *part)):
                        vectors[at] = np.frombuffer(row[0], dtype="<f4")
                        at += 1
                index = VectorIndex.trained(key, vectors[:at], n_lists)
                del vectors
            members = Members()
            cursor = conn.execute(f"SELECT m.id, v.embedding, m.seq {join}", params)
            while batch := cursor.fetchmany(_READ_BATCH):
                batch_ids = np.fromiter((r[0] for r in batch), dtype=np.int64, count=len(batch))
                matrix = np.frombuffer(b"".join(r[1] for r in batch), dtype="<f4").reshape(len(batch), key.dimension)
                _add(index, batch_ids, np.ascontiguousarray(matrix, dtype=np.float32))
                members.add(batch_ids, np.fromiter((r[2] for r in batch), dtype=np.int64, count=len(batch)))
        space.index, space.members, space.seq, space.changed = index, members, seq, 0
        if isinstance(index, VectorIndex):
            index.hwm = seq
            log.info(
                "built IVF%s over %d message vectors of %s in %.1fs",
                index.n_lists,
                index.ntotal,
                key.version,
                time.monotonic() - started,
            )
            self._save(index, space)

    def _save(self, index: VectorIndex, space: _Space) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            members = space.members
            len(members)  # merged
            path = self._path(index.key).with_suffix(".members.npz")
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
            np.savez(tmp, ids=members.ids, seqs=members.seqs, hwm=np.int64(index.hwm))
            os.replace(tmp, path)
            index.write(self._path(index.key))
            space.changed = 0
        except OSError as exc:  # the index stays usable in memory; SQLite still has every row
            log.warning("could not persist message vector index %s: %s", index.key, exc)

    def _read_members(self, key: SpaceKey, hwm: int) -> Members | None:
        """The persisted ids and positions of a persisted index (None unless of the same mark)."""
        try:
            with np.load(self._path(key).with_suffix(".members.npz")) as data:
                if int(data["hwm"]) != hwm:
                    return None
                members = Members()
                members.ids, members.seqs = data["ids"].astype(np.int64), data["seqs"].astype(np.int64)
                return members
        except (OSError, ValueError, KeyError):
            return None

    def _path(self, key: SpaceKey) -> Path:
        return self.directory / key.filename()

    # --- upkeep -----------------------------------------------------------------------------
    def forget(self, keys: Sequence[SpaceKey]) -> None:
        """Drop these spaces (a deleted agent's) from memory and disk."""
        with self._lock:
            for key in keys:
                self._spaces.pop(key, None)
                path = self._path(key)
                for doomed in (path, path.with_suffix(".members.npz")):
                    doomed.unlink(missing_ok=True)

    def rebuild(self) -> None:
        """Forget every message index (memory and disk); the next search rebuilds from SQLite."""
        with self._lock:
            self._spaces.clear()
            if self.directory.exists():
                for pattern in ("*.faiss", "*.npz"):
                    for path in self.directory.glob(pattern):
                        path.unlink(missing_ok=True)

    def save_all(self) -> None:
        with self._lock:
            spaces = list(self._spaces.values())
        for space in spaces:
            with space.lock:
                if isinstance(space.index, VectorIndex) and space.changed:
                    self._save(space.index, space)

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
                }
            )
        return out


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """FAISS calls in this block use one OpenMP thread (this thread's setting only: OpenMP keeps
    it per thread). The few vectors a search catches up on are far too little work to share, and
    a parallel region waits for every thread of its team: on a busy 2-core machine that wait is
    what the call costs (adding 40 vectors to IVF1000 over 1e6: p50 7 ms, max 47 ms with two
    threads; 1.0 ms, max 1.2 ms with one)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def _add(index: ExactIndex | VectorIndex, ids: Ids, vectors: Vectors) -> None:
    if isinstance(index, ExactIndex):
        index.add(ids, vectors)
    elif len(ids):
        index.index.add_with_ids(vectors, ids)


def _remove(index: ExactIndex | VectorIndex, ids: Ids) -> None:
    if isinstance(index, ExactIndex):
        index.remove(ids)
    else:
        index.index.remove_ids(faiss.IDSelectorBatch(len(ids), faiss.swig_ptr(ids)))
