"""FAISS indexes over archival embeddings: one per vector space (metric, dimension, version).

Mirrors ArangoDB's vector index: exact search until there are enough vectors to train, then
``IVF<nLists>,Flat`` searched with a per-query nProbe. Cosine normalises vectors and uses inner
product (the score is the cosine similarity); l2 reports the Euclidean distance. FAISS ids are
``archival.id`` (SQLite AUTOINCREMENT, never reused), so a hit is hydrated straight from SQLite.

The indexes are derived: SQLite holds every embedding. Each process keeps its own copy in memory
and catches up from SQLite above its high-water mark before it searches, so chunks ingested by
another process are found too. Trained indexes are persisted next to the database (written to a
temporary file and renamed, with the mark in the file's header) so a restart does not retrain;
exact indexes are cheap to rebuild and are not persisted.

Memory: an IVF-Flat index holds every vector (5e6 x 384-d float32 is 7.7 GB), so nothing else
may hold them all at once. Training reads only a sample (at most 256 per list, as FAISS k-means
would subsample anyway), vectors are then added in batches straight from SQLite, and index files
are streamed to and from disk instead of being serialised in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt

from vcm.errors import StoreUnavailable
from vcm.store.embedded import sizing
from vcm.store.embedded.db import Database, chunked

log = logging.getLogger(__name__)

FILE_FORMAT = 1
_READ_BATCH = 50_000
_TRAIN_SEED = 1234

Vectors = npt.NDArray[np.float32]


@dataclass(frozen=True, order=True)
class SpaceKey:
    metric: str
    dimension: int
    version: str

    def filename(self) -> str:
        digest = hashlib.sha256(self.version.encode()).hexdigest()[:16]
        return f"{self.metric}-{self.dimension}-{digest}.faiss"


def prepare(key: SpaceKey, vectors: Vectors) -> Vectors:
    """Contiguous float32 rows; unit length for cosine (inner product = cosine similarity)."""
    out = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, key.dimension).copy()
    if key.metric == "cosine":
        faiss.normalize_L2(out)
    return out


class VectorIndex:
    """The in-memory FAISS index of one space. Not thread-safe: callers hold a lock."""

    def __init__(self, key: SpaceKey, index: Any, *, n_lists: int | None, hwm: int) -> None:
        self.key = key
        self.index = index
        self.n_lists = n_lists  # None while exact
        self.hwm = hwm
        self.saved_ntotal = 0

    @property
    def kind(self) -> str:
        return "exact" if self.n_lists is None else "ivf"

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    @classmethod
    def exact(cls, key: SpaceKey) -> VectorIndex:
        flat = faiss.IndexFlatIP(key.dimension) if key.metric == "cosine" else faiss.IndexFlatL2(key.dimension)
        return cls(key, faiss.IndexIDMap2(flat), n_lists=None, hwm=0)

    @classmethod
    def trained(cls, key: SpaceKey, sample: Vectors, n_lists: int) -> VectorIndex:
        """An empty IVF index whose lists were trained on ``sample`` (prepared vectors)."""
        metric = faiss.METRIC_INNER_PRODUCT if key.metric == "cosine" else faiss.METRIC_L2
        index = faiss.index_factory(key.dimension, f"IVF{n_lists},Flat", metric)
        index.train(sample)
        return cls(key, index, n_lists=n_lists, hwm=0)

    def add(self, ids: npt.NDArray[np.int64], vectors: Vectors) -> None:
        if len(ids):
            self.index.add_with_ids(vectors, ids)
            self.hwm = max(self.hwm, int(ids.max()))

    def search(self, query: Vectors, k: int, n_probe: int | None) -> list[tuple[int, float]]:
        """Up to k (id, score) best first; fewer when the probed lists hold fewer vectors.

        ``n_probe`` None probes the index's default (:func:`sizing.default_n_probe`).
        """
        k = min(k, self.ntotal)
        if k <= 0:
            return []
        if self.n_lists is None:
            distances, labels = self.index.search(query, k)
        else:
            params = faiss.SearchParametersIVF()
            wanted = sizing.default_n_probe(self.n_lists) if n_probe is None else n_probe
            params.nprobe = min(wanted, self.n_lists)
            distances, labels = self.index.search(query, k, params=params)
        hits: list[tuple[int, float]] = []
        for dist, label in zip(distances[0].tolist(), labels[0].tolist(), strict=True):
            if label < 0:
                break
            score = dist if self.key.metric == "cosine" else float(np.sqrt(max(dist, 0.0)))
            hits.append((int(label), float(score)))
        return hits

    # --- persistence ------------------------------------------------------------------------
    def header(self) -> dict[str, Any]:
        return {
            "format": FILE_FORMAT,
            "metric": self.key.metric,
            "dimension": self.key.dimension,
            "version": self.key.version,
            "n_lists": self.n_lists,
            "hwm": self.hwm,
            "ntotal": self.ntotal,
        }

    def write(self, path: Path) -> None:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                fh.write(json.dumps(self.header()).encode() + b"\n")
                # Streamed: serialize_index would build a second in-memory copy of the index.
                # (faiss's bundled stub omits the callback IO classes.)
                faiss.write_index(self.index, faiss.PyCallbackIOWriter(fh.write))  # type: ignore[attr-defined]
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)  # atomic: readers see the old or the new file, never half
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self.saved_ntotal = self.ntotal

    @classmethod
    def read(cls, key: SpaceKey, path: Path) -> VectorIndex | None:
        """The persisted index, or None when it is missing, damaged or for another space."""
        try:
            with open(path, "rb") as fh:
                header = json.loads(fh.readline())
                index = faiss.read_index(faiss.PyCallbackIOReader(fh.read))  # type: ignore[attr-defined]
        except (OSError, ValueError, RuntimeError) as exc:
            if path.exists():
                log.warning("ignoring unreadable vector index %s: %s", path, exc)
            return None
        expected = {
            "format": FILE_FORMAT,
            "metric": key.metric,
            "dimension": key.dimension,
            "version": key.version,
        }
        if any(header.get(k) != v for k, v in expected.items()) or header.get("n_lists") is None:
            return None
        if int(index.ntotal) != header.get("ntotal") or index.d != key.dimension:
            return None
        loaded = cls(key, index, n_lists=int(header["n_lists"]), hwm=int(header["hwm"]))
        loaded.saved_ntotal = loaded.ntotal
        return loaded


class VectorIndexes:
    """All spaces' indexes of one store, loaded lazily and kept caught up with SQLite."""

    def __init__(
        self,
        directory: Path,
        db: Database,
        *,
        n_lists: int | None,
        train_threshold: int,
    ) -> None:
        self.directory = directory
        self._db = db
        self._fixed_lists = n_lists
        self._threshold = sizing.train_threshold(train_threshold, n_lists)
        self._indexes: dict[SpaceKey, VectorIndex] = {}
        self._lock = threading.RLock()

    @property
    def threshold(self) -> int:
        return self._threshold

    def search(self, key: SpaceKey, query: Vectors, k: int, n_probe: int | None) -> tuple[list[tuple[int, float]], int]:
        """(hits, vectors in the index) after catching up with SQLite."""
        with self._lock, _faiss_errors(key):
            index = self._current(key)
            return index.search(prepare(key, query), k, n_probe), index.ntotal

    def refresh(self, key: SpaceKey) -> VectorIndex:
        with self._lock, _faiss_errors(key):
            return self._current(key)

    def _current(self, key: SpaceKey) -> VectorIndex:
        if key not in self._indexes:
            self._indexes[key] = self._load(key)
        self._catch_up(key)
        return self._indexes[key]

    def _load(self, key: SpaceKey) -> VectorIndex:
        loaded = VectorIndex.read(key, self._path(key))
        return loaded if loaded is not None else VectorIndex.exact(key)

    def _catch_up(self, key: SpaceKey) -> None:
        """Bring ``self._indexes[key]`` level with SQLite, training or retraining when due.

        A retrain is decided before the backlog is added: adding millions of vectors to an
        index about to be replaced would hold two full copies at once. The old index is
        dropped before the new one is built for the same reason (searches wait on the lock).
        """
        index = self._indexes[key]
        if index.kind == "ivf":
            assert index.n_lists is not None
            backlog = self._count_above(key, index.hwm)
            if sizing.should_retrain(index.n_lists, index.ntotal + backlog, self._fixed_lists):
                self._replace_by_training(key)
                return
        while True:
            ids, vectors = self._rows(key, above=index.hwm, limit=_READ_BATCH)
            if not len(ids):
                break
            if index.kind == "exact" and index.ntotal + len(ids) >= self._threshold:
                self._replace_by_training(key)
                return
            index.add(ids, prepare(key, vectors))
        if index.kind == "ivf" and index.ntotal - index.saved_ntotal >= max(1000, index.saved_ntotal // 10):
            self._save(index)

    def _replace_by_training(self, key: SpaceKey) -> None:
        # Nothing else references the old index (callers hold the lock and only the key), so
        # popping it frees its memory before _train allocates the new one.
        del self._indexes[key]
        self._indexes[key] = self._train(key)

    def _count_above(self, key: SpaceKey, hwm: int) -> int:
        sql = "SELECT COUNT(*) FROM archival WHERE metric = ? AND dimension = ? AND embedding_version = ? AND id > ?"
        return int(self._db.query("count new archival rows", sql, (key.metric, key.dimension, key.version, hwm))[0][0])

    def _train(self, key: SpaceKey) -> VectorIndex:
        """Train on a sample of the space, then add every vector in batches (see module doc)."""
        started = time.monotonic()
        ids = self._ids(key)
        n_lists = self._fixed_lists or sizing.auto_n_lists(len(ids))
        size = sizing.training_sample_size(len(ids), n_lists)
        rng = np.random.default_rng(_TRAIN_SEED)
        sample_ids = ids if size >= len(ids) else np.sort(rng.choice(ids, size=size, replace=False))
        index = VectorIndex.trained(key, prepare(key, self._vectors_of(key, sample_ids)), n_lists)
        trained_s = time.monotonic() - started
        while True:
            batch_ids, vectors = self._rows(key, above=index.hwm, limit=_READ_BATCH)
            if not len(batch_ids):
                break
            index.add(batch_ids, prepare(key, vectors))
        log.info(
            "trained IVF%d for %s on %d of %d vectors in %.1fs, indexed all in %.1fs",
            n_lists,
            key,
            len(sample_ids),
            index.ntotal,
            trained_s,
            time.monotonic() - started,
        )
        self._save(index)
        return index

    def _ids(self, key: SpaceKey) -> npt.NDArray[np.int64]:
        sql = "SELECT id FROM archival WHERE metric = ? AND dimension = ? AND embedding_version = ? ORDER BY id"
        with self._db.read("read archival ids") as conn:
            return np.fromiter(
                (r[0] for r in conn.execute(sql, (key.metric, key.dimension, key.version))), dtype=np.int64
            )

    def _vectors_of(self, key: SpaceKey, ids: npt.NDArray[np.int64]) -> Vectors:
        """The embeddings of ``ids`` (ascending), in that order; all must exist (no deletes)."""
        out = np.empty((len(ids), key.dimension), dtype=np.float32)
        at = 0
        with self._db.read("read archival training sample") as conn:
            for part in chunked(ids.tolist()):
                marks = ",".join("?" * len(part))
                for row in conn.execute(f"SELECT embedding FROM archival WHERE id IN ({marks}) ORDER BY id", part):
                    out[at] = np.frombuffer(row[0], dtype="<f4")
                    at += 1
        return out[:at]

    def _save(self, index: VectorIndex) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            index.write(self._path(index.key))
        except OSError as exc:  # the index stays usable in memory; SQLite still has every row
            log.warning("could not persist vector index %s: %s", index.key, exc)

    def _rows(self, key: SpaceKey, *, above: int, limit: int) -> tuple[npt.NDArray[np.int64], Vectors]:
        sql = (
            "SELECT id, embedding FROM archival WHERE metric = ? AND dimension = ? "
            "AND embedding_version = ? AND id > ? ORDER BY id LIMIT ?"
        )
        rows = self._db.query("read archival embeddings", sql, (key.metric, key.dimension, key.version, above, limit))
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), key.dimension)
        return ids, vectors

    def _path(self, key: SpaceKey) -> Path:
        return self.directory / key.filename()

    def rebuild(self) -> None:
        """Forget every index (memory and disk); the next search rebuilds from SQLite."""
        with self._lock:
            self._indexes.clear()
            if self.directory.exists():
                for path in self.directory.glob("*.faiss"):
                    with contextlib.suppress(OSError):
                        path.unlink()

    def remove(self, ids: Sequence[int]) -> None:
        """Take deleted rows' vectors out of every space (loaded or on disk): searches would skip
        them anyway, but a deleted document must leave no index entry behind."""
        if not ids:
            return
        doomed = np.asarray(sorted(set(ids)), dtype=np.int64)
        spaces = self._db.query("list vector spaces", "SELECT metric, dimension, embedding_version FROM vector_spaces")
        with self._lock:
            for metric, dimension, version in spaces:
                key = SpaceKey(metric, int(dimension), version)
                if key not in self._indexes and not self._path(key).exists():
                    continue  # exact and never loaded here: built from SQLite, without them
                with _faiss_errors(key):
                    index = self._indexes.setdefault(key, self._load(key))
                    if index.index.remove_ids(doomed) and index.kind == "ivf":
                        self._save(index)

    def save_all(self) -> None:
        with self._lock:
            for index in self._indexes.values():
                if index.kind == "ivf" and index.ntotal != index.saved_ntotal:
                    self._save(index)

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {
                    "metric": key.metric,
                    "dimension": key.dimension,
                    "embedding_version": key.version,
                    "kind": index.kind,
                    "n_lists": index.n_lists,
                    "default_n_probe": None if index.n_lists is None else sizing.default_n_probe(index.n_lists),
                    "vectors": index.ntotal,
                    "hwm": index.hwm,
                }
                for key, index in sorted(self._indexes.items())
            ]


@contextlib.contextmanager
def _faiss_errors(key: SpaceKey) -> Iterator[None]:
    # FAISS reports failures (allocation, training) as RuntimeError; callers only know VcmError.
    try:
        yield
    except RuntimeError as exc:
        raise StoreUnavailable(
            f"vector index {key.metric}/{key.dimension}/{key.version} failed: {exc}; "
            "rebuild_vector_indexes() rebuilds it from SQLite"
        ) from exc
