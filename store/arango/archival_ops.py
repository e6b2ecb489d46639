"""Archival memory of the ArangoDB store: ingesting chunks, searching and reading them.

Search is exact until a space's vector index exists (:mod:`vcm.store.arango.vector_spaces`), then
``APPROX_NEAR_*`` with post-filters and a growing over-fetch (``ANN_GROWTH``), falling back to
exact search when the filters keep too few neighbours or the index cannot be used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from arango.exceptions import ArangoServerError

from vcm.errors import VcmError
from vcm.store import search_checks, validation
from vcm.store.arango import documents, keys, names
from vcm.store.arango.aql import archival as aql_archival
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql.common import AqlQuery
from vcm.store.arango.base import log
from vcm.store.arango.errors import (
    QUERY_VECTOR_INDEX_NOT_READY,
    QUERY_VECTOR_SEARCH_NOT_APPLIED,
    is_driver_failure,
    is_error,
    translate,
)
from vcm.store.arango.snapshots import Ranked
from vcm.store.arango.vector_spaces import VectorSpaceOps
from vcm.store.cursor import fingerprint, vector_digest
from vcm.store.filters import ArchivalFilter
from vcm.store.types import ArchivalChunk, ArchivalHit, Edge, Metric, NodeRef, Page, SearchStats, chunk_node

ANN_GROWTH = 4  # over-fetch factor per retry of a post-filtered ANN query


class ArchivalOps(VectorSpaceOps):
    """``ingest_archival`` (with spaces and ``derived_from`` edges), ``search_archival``,
    ``get_archival``."""

    def ingest_archival(self, chunks: Sequence[ArchivalChunk], *, incarnation: str | None = None) -> int:
        checked, dims = search_checks.chunk_batch(chunks)
        if not checked:
            return 0
        known: dict[tuple[str, str], int] = {(s.metric, s.embedding_version): s.dimension for s in self._spaces()}
        for (metric, version), dim in dims.items():
            search_checks.space_dimension(metric, version, dim, known.get((metric, version)))
        now = self._clock()
        docs = [documents.chunk_doc(c, vec.tolist(), now) for c, vec in checked]
        write = (names.ARCHIVAL, names.DERIVED_FROM, names.META, *(() if incarnation is None else (names.CORE,)))
        with self._transaction(write, "ingest_archival") as txn:
            self._fence(txn, (c.agent_id for c, _ in checked), incarnation, "ingest_archival")
            new_spaces = [
                _space_doc(metric, dim, version)
                for (metric, version), dim in dims.items()
                if (metric, version) not in known
            ]
            if new_spaces:
                self._run(txn, aql_common.insert_ignore(names.META, new_spaces), "ingest_archival")
                stored: dict[tuple[str, str], int] = {
                    (s.metric, s.embedding_version): s.dimension for s in self._spaces(txn)
                }
                for (metric, version), dim in dims.items():  # a concurrent first writer wins
                    search_checks.space_dimension(metric, version, dim, stored.get((metric, version)))
            inserted = {
                r for r in self._run(txn, aql_common.insert_ignore(names.ARCHIVAL, docs), "ingest_archival") if r
            }
            new_chunks = [c for (c, _), d in zip(checked, docs, strict=True) if d["_key"] in inserted]
            self._link_chunks(txn, new_chunks, now)
            self._fault("ingest_archival.before_commit")
        if self._auto_vector_index:
            for metric, dim in sorted({(m, d) for (m, _version), d in dims.items()}):
                with contextlib.suppress(VcmError):  # the index is an optimisation; never fail ingest
                    self.ensure_vector_index(cast(Metric, metric), dim)
        return len(inserted)

    def _link_chunks(self, txn: Any, new_chunks: Sequence[ArchivalChunk], now: float) -> None:
        """``derived_from`` edges between each new chunk and its existing neighbours, later ->
        earlier, whichever of the two arrived first (as the embedded adapter links them)."""
        if not new_chunks:
            return
        candidates: list[tuple[str, NodeRef, NodeRef, str]] = []  # (neighbour id, later, earlier, agent)
        for c in new_chunks:
            me = chunk_node(c.agent_id, c.doc_id, c.chunk_index, c.embedding_version)
            for index in (c.chunk_index - 1, c.chunk_index + 1):
                if index < 0:
                    continue
                other = chunk_node(c.agent_id, c.doc_id, index, c.embedding_version)
                later, earlier = (me, other) if c.chunk_index > index else (other, me)
                candidates.append((keys.vertex_id(other), later, earlier, c.agent_id))
        ids = sorted({vertex for vertex, _, _, _ in candidates})
        existing = {d["_id"] for d in self._run(txn, aql_common.documents(ids), "ingest_archival")}
        edges = {
            keys.edge_key("derived_from", later, earlier): documents.edge_doc(
                Edge("derived_from", later, earlier, agent, now), now
            )
            for vertex, later, earlier, agent in candidates
            if vertex in existing
        }
        if not edges:
            return
        self._run(txn, aql_common.insert_ignore(names.DERIVED_FROM, list(edges.values())), "ingest_archival")

    def search_archival(
        self,
        agent_id: str,
        vector: Sequence[float],
        k: int = 10,
        *,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
        n_probe: int | None = None,
        metric: str = "cosine",
        embedding_version: str | None = None,
    ) -> Page[ArchivalHit]:
        args = search_checks.archival_search(
            agent_id,
            vector,
            k,
            filters=filters,
            n_probe=n_probe,
            metric_name=metric,
            embedding_version=embedding_version,
            parse=aql_common.parse_filters,
        )
        space_metric = cast(Metric, metric)
        probe = self._n_probe if args.n_probe is None else args.n_probe
        parsed = args.filters
        query: list[float] = args.vector.tolist()
        if not self._matching_spaces(space_metric, embedding_version, len(query)):
            return Page([], None)
        key = fingerprint(
            "archival",
            agent_id,
            vector_digest(query),
            metric,
            embedding_version,
            probe,
            parsed.canonical(),
        )
        if cursor is not None:
            part = self._snapshots.next("archival", agent_id, key, cursor, k)
        else:
            ranked = self._rank_archival(agent_id, query, space_metric, k + 1, parsed, probe, embedding_version)
            if len(ranked) > k:
                ranked = self._rank_archival(
                    agent_id, query, space_metric, self._max_results, parsed, probe, embedding_version
                )
            part = self._snapshots.first("archival", agent_id, key, ranked, k)
        ids = [f"{names.ARCHIVAL}/{key_}" for key_, _ in part.items]
        found = {d["_key"]: d for d in self._run(self._ro, aql_common.documents(ids, agent_id), "search_archival")}
        hits = [ArchivalHit(documents.chunk_from_doc(found[k_]), s) for k_, s in part.items if k_ in found]
        # The post-filters run inside AQL, so only the page depth is known here.
        return Page(hits, part.next_cursor, SearchStats(part.offset))

    def _rank_archival(
        self,
        agent_id: str,
        query: list[float],
        metric: Metric,
        wanted: int,
        filters: ArchivalFilter,
        n_probe: int | None,
        embedding_version: str | None,
    ) -> Ranked:
        dim = len(query)
        now = self._clock()
        state = self._space_state(metric, dim)
        if state.state == "ivf":
            probe = n_probe or (self._spec.default_n_probe(state.n_lists) if state.n_lists else None) or 8
            fetch = max(wanted * ANN_GROWTH, 64)
            try:
                while True:
                    q = aql_archival.archival_ann(
                        agent_id,
                        query,
                        metric=metric,
                        dimension=dim,
                        fetch=fetch,
                        wanted=wanted,
                        n_probe=probe,
                        filters=filters,
                        embedding_version=embedding_version,
                        now=now,
                    )
                    rows = self._run_vector(q)
                    row: dict[str, Any] = rows[0] if rows else {"candidates": 0, "hits": []}
                    hits = [(str(h["key"]), float(h["score"])) for h in row["hits"]]
                    exhausted = int(row["candidates"]) < fetch  # the probed lists gave all they had
                    if len(hits) >= wanted or exhausted:
                        return hits
                    if fetch >= self._ann_max_fetch:
                        break  # filters keep too few of the global neighbours: go exact
                    fetch = min(fetch * ANN_GROWTH, self._ann_max_fetch)
            except _VectorIndexUnusable as exc:
                log.warning("vector index of %s/%d not usable (%s); using exact search", metric, dim, exc)
                self._forget_space_state(metric, dim)
        q = aql_archival.archival_exact(
            agent_id,
            query,
            metric=metric,
            dimension=dim,
            wanted=wanted,
            filters=filters,
            embedding_version=embedding_version,
            now=now,
        )
        return [(str(r["key"]), float(r["score"])) for r in self._run(self._ro, q, "search_archival")]

    def _run_vector(self, query: AqlQuery) -> list[Any]:
        try:
            cursor = self._ro.aql.execute(query.text, bind_vars=query.bind_vars)
            return list(cast(Iterable[Any], cursor))
        except ArangoServerError as exc:
            if is_error(exc, QUERY_VECTOR_SEARCH_NOT_APPLIED, QUERY_VECTOR_INDEX_NOT_READY):
                raise _VectorIndexUnusable(str(exc)) from exc
            raise translate(exc, "search_archival") from exc
        except Exception as exc:
            if is_driver_failure(exc):
                raise translate(exc, "search_archival") from exc
            raise

    def get_archival(self, agent_id: str, doc_id: str) -> list[ArchivalChunk]:
        validation.identifier("agent_id", agent_id)
        validation.identifier("doc_id", doc_id)
        rows = self._run(self._ro, aql_archival.archival_document(agent_id, doc_id), "get_archival")
        chunks = [documents.chunk_from_doc(d) for d in rows]
        return sorted(chunks, key=lambda c: (c.chunk_index, c.embedding_version))


# --- helpers --------------------------------------------------------------------------------------
class _VectorIndexUnusable(Exception):
    """APPROX_NEAR could not use the index (1554: not applied, 1555: not trained yet)."""


def _space_doc(metric: str, dimension: int, version: str) -> dict[str, Any]:
    return {
        "_key": keys.doc_key("space", metric, version),
        "kind": "vector_space",
        "metric": metric,
        "dimension": dimension,
        "embedding_version": version,
    }
