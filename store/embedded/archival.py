"""Vector top-k over archival chunks with metadata post-filters.

The vector index knows nothing but ids and vectors; the agent, ``doc_id``, metadata and
freshness conditions are checked on the candidates it returns, which are hydrated from SQLite.
To still return k survivors the search over-fetches (k·4, k·16, ... candidates) until k survive
or the index has nothing more to give (all vectors, or all vectors in the probed IVF lists).
This is the semantics of ArangoDB's ``APPROX_NEAR`` with the filters in an outer subquery, so
both adapters return the same kind of answer; with IVF, a filter that keeps few chunks can
return fewer than k when the probed lists hold fewer matches, exactly as there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from vcm.store.embedded import rows, sizing
from vcm.store.embedded.db import Database, chunked
from vcm.store.embedded.vectorindex import SpaceKey, VectorIndexes, Vectors
from vcm.store.filters import ArchivalFilter
from vcm.store.types import ArchivalChunk

Ranked = list[tuple[int, float]]

# Hits are fetched by primary key. ``+agent_id`` keeps SQLite off the (agent_id, doc_id, ...)
# unique index, which it would otherwise pick and then scan every chunk of the agent per query
# (milliseconds at 1e4 chunks, seconds at 1e6).
_BY_ID = "FROM archival WHERE id IN ({marks}) AND +agent_id = ?"
# Columns needed to evaluate a filter: no embedding, which is the bulk of a row.
_FILTER_COLUMNS = (
    "id, agent_id, doc_id, chunk_index, embedding_version, metric, text, model_id, char_start, "
    "char_end, source, metadata, created_at, valid_until"
)


@dataclass
class FilterTally:
    """Candidates the post-filters judged during one search, and how many they dropped (metrics).
    Only this agent's chunks of the page's corpus count: other agents' vectors share the index,
    and their drop says nothing about the filters."""

    judged: int = 0
    dropped: int = 0


@dataclass(frozen=True)
class _Keep:
    """What a candidate must satisfy besides being near."""

    agent_id: str
    filters: ArchivalFilter
    now: float
    bound: int
    exclude: frozenset[int]
    tally: FilterTally


class ArchivalRanker:
    def __init__(self, db: Database, vectors: VectorIndexes, clock: Callable[[], float]) -> None:
        self._db = db
        self._vectors = vectors
        self._clock = clock

    def rank(
        self,
        agent_id: str,
        spaces: Sequence[SpaceKey],
        query: Vectors,
        wanted: int,
        filters: ArchivalFilter,
        n_probe: int | None,
        *,
        bound: int | None = None,
        exclude: frozenset[int] = frozenset(),
        tally: FilterTally | None = None,
    ) -> tuple[Ranked, int]:
        """Best ``wanted`` (archival.id, score) among ids up to ``bound`` and not in
        ``exclude``; with the newest chunk id, the ``bound`` for later pages."""
        newest = self._db.query("read archival bound", "SELECT COALESCE(MAX(id), 0) FROM archival")[0][0]
        keep = _Keep(
            agent_id, filters, self._clock(), newest if bound is None else bound, exclude, tally or FilterTally()
        )
        ranked: Ranked = []
        for key in spaces:
            ranked += self._rank_space(key, query, wanted, n_probe, keep)
        higher_is_better = all(key.metric == "cosine" for key in spaces)
        ranked.sort(key=lambda h: (-h[1] if higher_is_better else h[1], h[0]))
        return ranked[:wanted], int(newest)

    def _rank_space(self, key: SpaceKey, query: Vectors, wanted: int, n_probe: int | None, keep: _Keep) -> Ranked:
        verdict: dict[int, bool] = {}
        survivors: Ranked = []
        total = self._vectors.refresh(key).ntotal
        for size in sizing.overfetch_sizes(wanted, total):
            hits, total = self._vectors.search(key, query, size, n_probe)
            self._judge([i for i, _ in hits if i not in verdict], keep, verdict)
            survivors = [hit for hit in hits if verdict[hit[0]]]
            if len(survivors) >= wanted or len(hits) < size:
                break
        return survivors[:wanted]

    def _judge(self, ids: list[int], keep: _Keep, verdict: dict[int, bool]) -> None:
        for i in ids:
            verdict[i] = False  # deleted, another agent's, or outside this page's corpus
        candidates = [i for i in ids if i <= keep.bound and i not in keep.exclude]
        for part in chunked(candidates):
            marks = ",".join("?" * len(part))
            found = self._db.query(
                "filter archival hits",
                f"SELECT {_FILTER_COLUMNS} {_BY_ID.format(marks=marks)}",
                [*part, keep.agent_id],
            )
            for row in found:
                kept = keep.filters.matches(rows.chunk(row, with_embedding=False), keep.now)
                verdict[row["id"]] = kept
                keep.tally.judged += 1
                keep.tally.dropped += not kept

    def hydrate(self, agent_id: str, ids: Sequence[int]) -> dict[int, ArchivalChunk]:
        out: dict[int, ArchivalChunk] = {}
        for part in chunked(list(ids)):
            marks = ",".join("?" * len(part))
            found = self._db.query(
                "read archival hits",
                f"SELECT {rows.ARCHIVAL_COLUMNS} {_BY_ID.format(marks=marks)}",
                [*part, agent_id],
            )
            out.update((row["id"], rows.chunk(row)) for row in found)
        return out
