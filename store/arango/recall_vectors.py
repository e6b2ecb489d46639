"""The vector half of ArangoDB recall at scale: the recall vector index and the per-agent plan.

What the plan needs (the server version, the index's nLists/defaultNProbe, the agent's count of
vectors of the version, the collection size) is read here and cached per process; the decisions
are pure (:mod:`vcm.store.arango.recall_index`, :func:`vcm.store.arango.aql.recall_vectors.recall_vector_plan`).

* The server version comes from the guard's report (or ``version()`` once).
* The recall indexes of ``messages`` are listed again every ``RECALL_RECHECK_S``, or at once
  after a query could not use one (error 1554/1555).
* The agent's vector count (``recall_vector_versions``, a scan of the agent's messages) is cached
  for ``RECALL_RECHECK_S`` once it reaches ``RECALL_EXACT_BELOW``: only then does the plan use it,
  and a large agent's count moves slowly relative to itself. Smaller agents are counted per
  search (cheap), so read-after-write holds for them as before.
* The index is created by index maintenance (:meth:`RecallVectorOps.maintain_recall_indexes`, from
  the cold path's sweep: ``MemoryStore.maintain_indexes``), never by a query or a write, once the
  messages carrying vectors of that dimension reach the store's vector threshold, on 3.12.6+
  only (``sparse``), built ``inBackground`` as the schema's vector spec says. Until it exists
  (and is ready) a query ranks exactly (``APPROX_NEAR_COSINE`` only against an index listed
  ready). Counting the vectors is a collection scan, so it is repeated at most every
  ``RECALL_COUNT_RECHECK_S`` per process.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, cast

from vcm.errors import ValidationError, VcmError
from vcm.store.arango import names, recall_index
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import recall_vectors as aql_recall_vectors
from vcm.store.arango.base import ArangoBase, log
from vcm.store.arango.errors import (
    QUERY_VECTOR_INDEX_NOT_READY,
    QUERY_VECTOR_SEARCH_NOT_APPLIED,
    is_error,
    translated,
)
from vcm.store.arango.snapshots import Ranked

RECALL_RECHECK_S = 30.0
RECALL_COUNT_RECHECK_S = 300.0


class RecallVectorOps(ArangoBase):
    """Exact or approximate cosine top-n over one agent's message vectors."""

    # Set lazily (``_recall_state``); guarded by ``_recall_lock``.
    _recall_lock: threading.Lock
    _recall_server: tuple[int, int, int] | None
    _recall_indexes: dict[int, dict[str, Any]]  # by dimension
    _recall_indexes_at: float
    _recall_counts: dict[str, tuple[float, list[dict[str, Any]]]]  # agent -> (when, versions)
    _recall_counted_at: dict[int, float]  # dimension -> when its vectors were last counted

    def _init_recall_vectors(self) -> None:
        self._recall_lock = threading.Lock()
        self._recall_server = None
        self._recall_indexes = {}
        self._recall_indexes_at = float("-inf")
        self._recall_counts = {}
        self._recall_counted_at = {}

    # --- what the plan reads --------------------------------------------------------------------
    def _server_triple(self) -> tuple[int, int, int]:
        if self._recall_server is None:
            report = self.guard_report
            if report is not None:
                text = report.version
            else:
                with translated("read the server version"):
                    text = str(self._ro.version())
            self._recall_server = aql_recall_vectors.server_version(text)
        return self._recall_server

    def _recall_index_infos(self, *, refresh: bool = False) -> dict[int, dict[str, Any]]:
        now = time.monotonic()
        with self._recall_lock:
            if not refresh and now - self._recall_indexes_at < RECALL_RECHECK_S:
                return self._recall_indexes
        with translated("list recall vector indexes"):
            listed = cast(list[dict[str, Any]], self._ro.collection(names.MESSAGES).indexes())
        found: dict[int, dict[str, Any]] = {}
        for info in listed:
            dim = recall_index.index_dimension(info)
            state = info.get("training_state", info.get("trainingState"))
            if dim is not None and state in (None, "ready"):
                found[dim] = info
        with self._recall_lock:
            self._recall_indexes, self._recall_indexes_at = found, now
        return found

    def _recall_versions(self, agent_id: str) -> list[dict[str, Any]]:
        """``[{version, dimension, n}]`` of the agent, most vectors first (cached for large agents)."""
        now = time.monotonic()
        with self._recall_lock:
            cached = self._recall_counts.get(agent_id)
        if cached is not None and now - cached[0] < RECALL_RECHECK_S:
            return cached[1]
        rows = self._run(self._ro, aql_recall_vectors.recall_vector_versions(agent_id), "search_recall")
        with self._recall_lock:
            if rows and int(rows[0]["n"]) >= aql_recall_vectors.RECALL_EXACT_BELOW:
                self._recall_counts[agent_id] = (now, rows)
            else:
                self._recall_counts.pop(agent_id, None)
        return rows

    def _recall_plan(
        self, agent_id: str, version: str, dimension: int, wanted: int, *, windowed: bool
    ) -> tuple[aql_recall_vectors.RecallVectorPlan, int]:
        """The plan for the agent's top-``wanted`` and the agent's count of vectors of ``version``."""
        agent_vectors = next(
            (int(r["n"]) for r in self._recall_versions(agent_id) if r["version"] == version),
            0,
        )
        exact = aql_recall_vectors.RecallVectorPlan("exact", 0, 0)
        if windowed or agent_vectors < aql_recall_vectors.RECALL_EXACT_BELOW:
            return exact, agent_vectors
        info = self._recall_index_infos().get(dimension)
        if info is None:
            return exact, agent_vectors
        raw = info.get("params")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        n_lists = params.get("nLists") if isinstance(params.get("nLists"), int) else None
        default_probe = self._n_probe or int(params.get("defaultNProbe") or self._spec.default_n_probe(n_lists or 1))
        total = self._run(self._ro, aql_common.collection_count(names.MESSAGES), "search_recall")
        plan = recall_index.plan_for(
            server=self._server_triple(),
            agent_vectors=agent_vectors,
            total_vectors=int(total[0]) if total else agent_vectors,
            wanted=wanted,
            n_lists=n_lists,
            default_n_probe=default_probe,
            windowed=windowed,
        )
        return plan, agent_vectors

    # --- ranking --------------------------------------------------------------------------------
    def _rank_vectors(
        self, agent_id: str, q: Any, version: str | None, n: int, since: float | None, until: float | None
    ) -> Ranked:
        """Cosine top-``n`` of the agent's vectors of ``version``: through the recall vector
        index when the plan says so, exactly otherwise or when the index answer came up short
        (or the server could not use the index)."""
        if version is None:
            return []
        vector = [float(x) for x in q.tolist()]
        windowed = since is not None or until is not None
        plan, agent_vectors = self._recall_plan(agent_id, version, len(vector), n, windowed=windowed)
        if plan.form != "exact":
            query = recall_index.vector_query(plan, agent_id, vector, version=version, wanted=n)
            try:
                rows = self._run(self._ro, query, "search_recall")
            except VcmError as exc:
                # Only 1554/1555 (index gone, not ready, or not applicable) fall back: any other
                # failure of the index query is a real error, not a reason to scan exactly.
                cause = exc.__cause__ or exc
                if not is_error(cause, QUERY_VECTOR_SEARCH_NOT_APPLIED, QUERY_VECTOR_INDEX_NOT_READY):
                    raise
                log.warning("recall vector index not usable (%s); ranking exactly", exc.message)
                self._recall_index_infos(refresh=True)
            else:
                hits, complete = recall_index.read_hits(plan, rows, wanted=n, agent_vectors=agent_vectors)
                if complete:
                    return hits
        exact = aql_recall_vectors.recall_vector_exact(
            agent_id, vector, version=version, fetch=n, since=since, until=until
        )
        return [(str(r["key"]), float(r["score"])) for r in self._run(self._ro, exact, "search_recall")]

    # --- the index ------------------------------------------------------------------------------
    def check_recall_dimension(self, dimension: int) -> None:
        """Refuse recall vectors of a dimension other than an existing recall index's: the index
        covers the one attribute every message's vector is kept in."""
        indexed = sorted(self._recall_index_infos())
        if indexed and dimension not in indexed:
            raise ValidationError(
                f"messages.recall_emb is indexed for dimension {indexed[0]} "
                f"({recall_index.index_name(indexed[0])}); drop that index before storing "
                f"{dimension}-dimensional recall vectors",
                field="vector",
            )

    def ensure_recall_vector_index(self, dimension: int, *, force: bool = False) -> bool:
        """Create the recall vector index of ``dimension`` once enough messages carry such a
        vector (``force``: whatever their number). True when it exists (or was just created)."""
        if dimension in self._recall_index_infos():
            return True
        server = self._server_triple()
        if not recall_index.can_create(server):
            return False
        now = time.monotonic()
        with self._recall_lock:
            if not force and now - self._recall_counted_at.get(dimension, float("-inf")) < RECALL_COUNT_RECHECK_S:
                return False
            self._recall_counted_at[dimension] = now
        needed = max(self._spec.min_lists, 1) if force else max(self._vector_threshold, 1)
        total = self._run(self._ro, aql_common.collection_count(names.MESSAGES), "ensure_recall_vector_index")
        if total and int(total[0]) < needed:
            return False
        counted = self._run(self._ro, recall_index.count_recall_vectors(dimension), "ensure_recall_vector_index")
        n = int(counted[0]) if counted else 0
        if n < needed:
            return False
        definition = recall_index.index_definition(self._spec, dimension, n, server)
        try:
            with translated("create the recall vector index"):
                self._rw.collection(names.MESSAGES).add_index(definition)
        except VcmError as exc:
            if dimension not in self._recall_index_infos(refresh=True):  # a concurrent creator won
                log.warning("creating the recall vector index of dimension %d failed: %s", dimension, exc)
                raise
        return dimension in self._recall_index_infos(refresh=True)

    def maintain_recall_indexes(self) -> int:
        """Create the recall vector index of every dimension that is due (index maintenance:
        one scan for the dimensions, then :meth:`ensure_recall_vector_index` each, which is
        rate-limited). Returns how many were created."""
        if not self._auto_vector_index or not recall_index.can_create(self._server_triple()):
            return 0
        existing = self._recall_index_infos()
        created = 0
        rows = self._run(self._ro, aql_recall_vectors.recall_vector_dimensions(), "maintain_indexes")
        for row in rows:
            dim, n = int(row["dimension"]), int(row["n"])
            if dim in existing or n < max(self._vector_threshold, 1) or not 1 <= dim <= aql_common.MAX_DIMENSION:
                continue
            with contextlib.suppress(VcmError):  # logged by ensure_recall_vector_index; retried next time
                created += int(self.ensure_recall_vector_index(dim))
        return created
