"""Vector spaces of the ArangoDB store and the state of their vector indexes.

A space is (metric, dimension, embedding version), recorded in ``vcm_meta``. Whether a
(metric, dimension) pair has a trained vector index is cached per process and looked at again
every ``VECTOR_RECHECK_S`` while it has none; ``ensure_vector_index`` creates the index once the
space holds enough vectors. Archival search and health both read this state, so it has its own
mixin that both derive from.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, cast

from vcm.errors import VcmError
from vcm.store import search_checks
from vcm.store.arango import names
from vcm.store.arango.aql import archival as aql_archival
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.base import ArangoBase, log
from vcm.store.arango.errors import translated
from vcm.store.arango.schema import VectorState, create_vector_index, index_n_lists, vector_index_info, vector_state
from vcm.store.types import Metric

VECTOR_RECHECK_S = 30.0  # how often an "exact" space looks again for its index / threshold


@dataclass
class _SpaceState:
    """What this process last saw of one (metric, dimension) pair's vector index."""

    state: VectorState
    n_lists: int | None
    checked_at: float
    error: str | None = None
    counted_at: float = float("-inf")


@dataclass(frozen=True)
class _Space:
    """One vector space as recorded in ``vcm_meta``."""

    metric: Metric
    dimension: int
    embedding_version: str


class VectorSpaceOps(ArangoBase):
    """Known spaces, the cached index state per (metric, dimension), and index creation."""

    # Set by ArangoStore.__init__; the lock guards the cache, shared by the store's threads.
    _spaces_lock: threading.Lock
    _space_states: dict[tuple[str, int], _SpaceState]  # by (metric, dimension)

    def _spaces(self, db: Any = None) -> list[_Space]:
        rows = self._run(db if db is not None else self._ro, aql_archival.vector_spaces(), "read vector spaces")
        return [_Space(cast(Metric, r["metric"]), int(r["dimension"]), str(r["embedding_version"])) for r in rows]

    def _matching_spaces(self, metric: Metric, version: str | None, dimension: int) -> list[_Space]:
        known = [
            s for s in self._spaces() if s.metric == metric and (version is None or s.embedding_version == version)
        ]
        return search_checks.matching_spaces(known, dimension, metric, version)

    def _has_any_vector_index(self) -> bool:
        with translated("list indexes"):
            indexes = self._rw.collection(self._spec.collection).indexes()
        return any(i.get("type") == "vector" for i in cast(list[dict[str, Any]], indexes))

    def _space_state(self, metric: Metric, dimension: int) -> _SpaceState:
        with self._spaces_lock:
            cached = self._space_states.get((metric, dimension))
        now = time.monotonic()
        if cached is not None and (cached.state == "ivf" or now - cached.checked_at < VECTOR_RECHECK_S):
            return cached
        info = vector_index_info(self._ro, self._spec, metric, dimension)
        state = _SpaceState(vector_state(info), index_n_lists(info), now)
        if cached is not None:
            state.counted_at, state.error = cached.counted_at, cached.error
        with self._spaces_lock:
            self._space_states[(metric, dimension)] = state
        return state

    def _forget_space_state(self, metric: Metric, dimension: int) -> None:
        with self._spaces_lock:
            self._space_states[(metric, dimension)] = _SpaceState("exact", None, time.monotonic())

    def vector_index_state(self, metric: Metric, dimension: int) -> VectorState:
        """``"exact"`` until the space's vector index exists and is trained, then ``"ivf"``."""
        return self._space_state(metric, dimension).state

    def ensure_vector_index(self, metric: Metric, dimension: int, *, force: bool = False) -> VectorState:
        """Create the space's vector index once it holds enough vectors (``force``: now).

        DDL, so it runs outside any transaction; training happens on the documents present
        (reference §1.3). A concurrent creator's index is reused (same name). Counting the
        space's vectors scans the collection, so below the threshold it is repeated at most
        every ``VECTOR_RECHECK_S`` per process, and skipped while the whole collection is
        smaller than the threshold (a constant-time count).
        """
        state = self._space_state(metric, dimension)
        if state.state == "ivf":
            return "ivf"
        needed = max(self._spec.min_lists, 1) if force else max(self._vector_threshold, 1)
        now = time.monotonic()
        if not force and now - state.counted_at < VECTOR_RECHECK_S:
            return "exact"
        state.counted_at = now
        total = self._run(self._ro, aql_common.collection_count(names.ARCHIVAL), "ensure_vector_index")
        if total and int(total[0]) < needed:
            return "exact"
        rows = self._run(self._ro, aql_archival.count_vectors(metric, dimension), "ensure_vector_index")
        n = int(rows[0]) if rows else 0
        if n < needed:
            return "exact"
        info = vector_index_info(self._rw, self._spec, metric, dimension)
        if info is None:
            try:
                create_vector_index(self._rw, self._spec, metric, dimension, n)
            except VcmError as exc:
                if vector_index_info(self._rw, self._spec, metric, dimension) is None:
                    log.warning("creating the vector index of %s/%d failed: %s", metric, dimension, exc)
                    state.error = exc.message
                    raise
            info = vector_index_info(self._rw, self._spec, metric, dimension)
        fresh = _SpaceState(vector_state(info), index_n_lists(info), time.monotonic(), counted_at=now)
        with self._spaces_lock:
            self._space_states[(metric, dimension)] = fresh
        return fresh.state
