"""Archival memory of the embedded store: ingesting chunks, searching and reading them.

Vector search over the FAISS spaces and the filters are :mod:`vcm.store.embedded.archival`
(``ArchivalRanker``); this module writes the chunks (with their vector spaces and the
``derived_from`` edges between neighbouring chunks) and pages search results through cursors.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vcm.store import search_checks, validation
from vcm.store.cursor import fingerprint, vector_digest
from vcm.store.embedded import rows
from vcm.store.embedded.archival import FilterTally
from vcm.store.embedded.base import EmbeddedBase, fence
from vcm.store.embedded.vectorindex import SpaceKey
from vcm.store.types import ArchivalChunk, ArchivalHit, Page, SearchStats, chunk_node


class ArchivalOps(EmbeddedBase):
    """``ingest_archival``, ``search_archival`` and ``get_archival``."""

    def ingest_archival(self, chunks: Sequence[ArchivalChunk], *, incarnation: str | None = None) -> int:
        checked, dims = search_checks.chunk_batch(chunks)
        if not checked:
            return 0
        now = self._clock()
        with self._db.write("ingest archival chunks") as conn:
            fence(conn, (c.agent_id for c, _ in checked), incarnation)
            for (metric, version), dim in dims.items():
                known = conn.execute(
                    "SELECT dimension FROM vector_spaces WHERE metric = ? AND embedding_version = ?",
                    (metric, version),
                ).fetchone()
                search_checks.space_dimension(metric, version, dim, None if known is None else known[0])
                conn.execute(
                    "INSERT OR IGNORE INTO vector_spaces (metric, dimension, embedding_version) VALUES (?, ?, ?)",
                    (metric, dim, version),
                )
            added = 0
            for c, vec in checked:
                inserted = conn.execute(
                    "INSERT INTO archival (agent_id, doc_id, chunk_index, embedding_version, "
                    "metric, dimension, embedding, text, model_id, char_start, char_end, source, "
                    "metadata, created_at, valid_until) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT DO NOTHING RETURNING id",
                    (
                        c.agent_id,
                        c.doc_id,
                        c.chunk_index,
                        c.embedding_version,
                        c.metric,
                        len(vec),
                        vec.astype("<f4").tobytes(),
                        c.text,
                        c.model_id,
                        c.char_start,
                        c.char_end,
                        c.source,
                        rows.dumps(dict(c.metadata)),
                        c.created_at or now,
                        c.valid_until,
                    ),
                ).fetchone()
                if inserted is not None:
                    added += 1
                    _link_chunk(conn, c, now)
            self._fault("ingest_archival.before_commit")
        return added

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
        )
        probe = self._n_probe if args.n_probe is None else args.n_probe
        parsed = args.filters
        query = args.vector.astype(np.float32)  # what FAISS searches with, and what the cursor hashes
        spaces = self._spaces(metric, embedding_version, query.shape[0])
        key = fingerprint(
            "archival",
            agent_id,
            vector_digest(query),
            metric,
            embedding_version,
            probe,
            parsed.canonical(),
        )
        q = query.reshape(1, -1)

        tally = FilterTally()

        def rank(n: int, bound: int | None, exclude: frozenset[int]) -> tuple[list[tuple[int, float]], int]:
            return self._archival.rank(agent_id, spaces, q, n, parsed, probe, bound=bound, exclude=exclude, tally=tally)

        part = self._snapshots.page("archival", agent_id, key, k, cursor, rank)
        chunks = self._archival.hydrate(agent_id, [i for i, _ in part.items])
        hits = [ArchivalHit(chunks[i], s) for i, s in part.items if i in chunks]
        return Page(hits, part.next_cursor, SearchStats(part.offset, tally.judged, tally.dropped))

    def _spaces(self, metric: str, version: str | None, dimension: int) -> list[SpaceKey]:
        sql = "SELECT metric, dimension, embedding_version FROM vector_spaces WHERE metric = ?"
        params: list[Any] = [metric]
        if version is not None:
            sql += " AND embedding_version = ?"
            params.append(version)
        known = [SpaceKey(r[0], r[1], r[2]) for r in self._db.query("read vector spaces", sql, params)]
        return search_checks.matching_spaces(known, dimension, metric, version)

    def get_archival(self, agent_id: str, doc_id: str) -> list[ArchivalChunk]:
        validation.identifier("agent_id", agent_id)
        validation.identifier("doc_id", doc_id)
        found = self._db.query(
            "read a document's chunks",
            f"SELECT {rows.ARCHIVAL_COLUMNS} FROM archival WHERE agent_id = ? AND doc_id = ? "
            "ORDER BY chunk_index, embedding_version",
            (agent_id, doc_id),
        )
        return [rows.chunk(r) for r in found]


# --- helpers (run inside an open write transaction) -------------------------------------------
def _link_chunk(conn: sqlite3.Connection, c: ArchivalChunk, now: float) -> None:
    """``derived_from`` edges between this chunk and its neighbours, whichever came first."""
    neighbours = conn.execute(
        "SELECT chunk_index FROM archival WHERE agent_id = ? AND doc_id = ? "
        "AND embedding_version = ? AND chunk_index IN (?, ?)",
        (c.agent_id, c.doc_id, c.embedding_version, c.chunk_index - 1, c.chunk_index + 1),
    ).fetchall()
    for (index,) in neighbours:
        later, earlier = max(index, c.chunk_index), min(index, c.chunk_index)
        src = chunk_node(c.agent_id, c.doc_id, later, c.embedding_version)
        dst = chunk_node(c.agent_id, c.doc_id, earlier, c.embedding_version)
        conn.execute(
            "INSERT OR IGNORE INTO edges (kind, src_coll, src_key, dst_coll, dst_key, agent_id, "
            "created_at, attributes) VALUES ('derived_from', ?, ?, ?, ?, ?, ?, '{}')",
            (src.collection, src.key, dst.collection, dst.key, c.agent_id, now),
        )
