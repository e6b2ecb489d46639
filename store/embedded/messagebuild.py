"""Building and updating a message space's index (:mod:`vcm.store.embedded.messageindex`),
for its maintenance only: a query never calls these."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt

from vcm.store.embedded import sizing
from vcm.store.embedded.db import Database, chunked
from vcm.store.embedded.messagemembers import ExactIndex, Members
from vcm.store.embedded.messagetail import LogRow
from vcm.store.embedded.vectorindex import SpaceKey, VectorIndex

log = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]
Ids = npt.NDArray[np.int64]
_READ_BATCH = 50_000
_TRAIN_SEED = 1234


def build(
    db: Database, key: SpaceKey, threshold: int, closing: threading.Event
) -> tuple[ExactIndex | VectorIndex, Members, int]:
    """A new index of the space from ``message_vectors``: exact or trained IVF by its size,
    with the log mark of the same snapshot. Touches no shared state."""
    started = time.monotonic()
    agent_id, version = json.loads(key.version)
    join = (
        "FROM message_vectors v JOIN messages m ON m.agent_id = v.agent_id AND m.message_id = v.message_id "
        "WHERE v.agent_id = ? AND v.embedding_version = ? AND v.dimension = ?"
    )
    params = (agent_id, version, key.dimension)
    with db.read("build a message vector index") as conn:
        seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM message_vector_log").fetchone()[0])
        ids = np.fromiter((r[0] for r in conn.execute(f"SELECT m.id {join}", params)), dtype=np.int64)
        index: ExactIndex | VectorIndex
        if len(ids) < threshold:
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
            if closing.is_set():
                break
            batch_ids = np.fromiter((r[0] for r in batch), dtype=np.int64, count=len(batch))
            matrix = np.frombuffer(b"".join(r[1] for r in batch), dtype="<f4").reshape(len(batch), key.dimension)
            add(index, batch_ids, np.ascontiguousarray(matrix, dtype=np.float32))
            members.add(batch_ids, np.fromiter((r[2] for r in batch), dtype=np.int64, count=len(batch)))
    if isinstance(index, VectorIndex):
        index.hwm = seq
        log.info(
            "built IVF%s over %d message vectors of %s in %.1fs (off the query path)",
            index.n_lists,
            index.ntotal,
            key.version,
            time.monotonic() - started,
        )
    return index, members, seq


def log_row(r: Any) -> LogRow:
    return LogRow(int(r[0]), int(r[1]), int(r[2]), r[3], None if r[4] is None else int(r[4]))


@dataclass
class Batch:
    """Log rows ready to apply: the adds' vectors (assigned to IVF lists beforehand, outside the
    space's lock: that is the costly part) and the removes."""

    ids: Ids
    vectors: Vectors
    positions: Ids
    assign: Ids | None
    removes: Ids
    count: int

    @classmethod
    def of(cls, rows: list[LogRow], dimension: int, index: ExactIndex | VectorIndex) -> Batch:
        adds = [r for r in rows if r.op > 0 and r.vector is not None and r.position is not None]
        ids = np.array([r.row_id for r in adds], dtype=np.int64)
        vectors = np.frombuffer(b"".join(r.vector or b"" for r in adds), dtype="<f4").reshape(len(adds), dimension)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        assign = None
        if isinstance(index, VectorIndex) and len(ids):
            with single_threaded():  # see single_threaded: a few thousand rows at most
                _, labels = faiss.downcast_index(index.index.quantizer).search(vectors, 1)
            assign = np.ascontiguousarray(labels[:, 0], dtype=np.int64)
        removes = np.array([r.row_id for r in rows if r.op < 0], dtype=np.int64)
        positions = np.array([r.position for r in adds], dtype=np.int64)
        return cls(ids, vectors, positions, assign, removes, len(adds) + len(removes))

    def apply(self, index: ExactIndex | VectorIndex | None, members: Members) -> None:
        assert index is not None
        if len(self.ids):
            if isinstance(index, VectorIndex) and self.assign is not None:
                index.index.add_core(
                    len(self.ids),
                    faiss.swig_ptr(self.vectors),
                    faiss.swig_ptr(self.ids),
                    faiss.swig_ptr(self.assign),
                )
            else:
                add(index, self.ids, self.vectors)
            members.add(self.ids, self.positions)
        if len(self.removes):
            remove(index, self.removes)
            members.remove(self.removes)


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


def add(index: ExactIndex | VectorIndex, ids: Ids, vectors: Vectors) -> None:
    if isinstance(index, ExactIndex):
        index.add(ids, vectors)
    elif len(ids):
        index.index.add_with_ids(vectors, ids)


def remove(index: ExactIndex | VectorIndex, ids: Ids) -> None:
    if isinstance(index, ExactIndex):
        index.remove(ids)
    else:
        index.index.remove_ids(faiss.IDSelectorBatch(len(ids), faiss.swig_ptr(ids)))
