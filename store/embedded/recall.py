"""BM25 ranking of an agent's messages: tantivy for what it has indexed, plus the tail.

Read-after-write: tantivy lags SQLite by design (the index is committed after the SQLite
transaction, off the caller's thread, and possibly by another process). Rather than make every
write wait for a ~20 ms tantivy commit (and for the one process allowed to write the index),
a search reads the index's high-water mark and the agent's messages above it in one SQLite
snapshot, asks tantivy only for documents at or below the mark, and scores the tail in Python
with the same BM25 (see :mod:`vcm.store.bm25`). The tail is what the indexer has not caught
up with yet, normally a few recent messages, so this costs one indexed SQLite range read.

Nor does a query reload the searcher: one loaded at a (generation, mark) pair serves queries
until the store's upkeep thread reloads it (:mod:`vcm.store.embedded.upkeep`); meanwhile the
tail starts at the searcher's mark, and hits are checked against SQLite, since the older
searcher may hold documents deleted since. Only a searcher never loaded with a mark, or one
``STALE_ROWS`` behind, is reloaded by the query itself.
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from collections.abc import Callable

from vcm.errors import StoreUnavailable
from vcm.store import bm25
from vcm.store.analysis import analyze
from vcm.store.embedded.db import Database, chunked, meta_int
from vcm.store.embedded.schema import (
    META_TEXT_DELETE_GEN,
    META_TEXT_DOCS,
    META_TEXT_GEN,
    META_TEXT_HWM,
    META_TEXT_TERMS,
)
from vcm.store.embedded.textindex import TextIndex

Ranked = list[tuple[int, float]]


class RecallRanker:
    def __init__(self, db: Database, index: TextIndex, on_stale: Callable[[], None] | None = None) -> None:
        self._db = db
        self._index = index
        self.on_stale = on_stale  # a query used an older searcher: reload it off the query path
        self._owners: dict[int, str] = {}  # row id -> its agent ("": deleted), see _owned
        # row id -> its analysed content, for the tail: a row's content never changes and its id
        # is never reused, and consecutive searches score the same unindexed rows until the
        # indexer catches up (11 rows a search in bench_context's replay, 0.25 ms of analysis).
        self._tail_terms: OrderedDict[int, list[str]] = OrderedDict()

    def rank(
        self,
        agent_id: str,
        terms: list[str],
        n: int,
        *,
        since: float | None,
        until: float | None,
        bound: int | None = None,
        exclude: frozenset[int] = frozenset(),
    ) -> tuple[Ranked, int]:
        """Up to ``n`` (messages.id, score), best first, ties broken by age, among ids up to
        ``bound`` and not in ``exclude``; with the newest message id of the snapshot read, which
        later pages use as their ``bound`` so they rank the same corpus."""
        time_sql, time_params = time_filter(since, until)
        with self._db.read("search recall") as conn:
            newest = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
            top = newest if bound is None else min(newest, bound)
            generation = meta_int(conn, META_TEXT_GEN)
            hwm = meta_int(conn, META_TEXT_HWM)
            hwm, stale = self._searchable_mark(generation, hwm)
            live_docs = meta_int(conn, META_TEXT_DOCS)
            live_terms = meta_int(conn, META_TEXT_TERMS)
            pending_deletes = conn.execute("SELECT COUNT(*) FROM text_index_deletes").fetchone()[0]
            deleted_at = meta_int(conn, META_TEXT_DELETE_GEN)
            tail = (
                conn.execute(
                    f"SELECT id, content FROM messages WHERE agent_id = ? AND id > ? AND id <= ?{time_sql} ORDER BY id",
                    [agent_id, hwm, top, *time_params],
                ).fetchall()
                if terms and top > hwm
                else []
            )
        if not terms or n <= 0:
            return [], newest
        try:
            if stale is None:
                # Only after reading the mark: the indexer commits tantivy before recording a mark.
                self._index.refresh(generation, hwm)
            # Documents deleted from SQLite but not yet from tantivy may occupy top slots, and a
            # searcher of an older generation may still hold ones deleted since it was loaded.
            # Checking every hit against SQLite is ~0.3 ms a query, so only then: the searcher in
            # use is at least the generation loaded() reports (a reload sets it after loading).
            if stale and deleted_at > (self._index.loaded()[0] or 0):
                pending_deletes = max(pending_deletes, 1)
            needed = n + pending_deletes + len(exclude)
            indexed = None
            if since is None and until is None:
                # With slack for deleted rows: a row's owner may be known from before its delete.
                indexed = self._dominant(agent_id, terms, needed, max_row_id=min(hwm, top))
            if indexed is None:
                indexed = self._index.search(
                    agent_id,
                    terms,
                    needed,
                    max_row_id=min(hwm, top),
                    since=since,
                    until=until,
                )
        except (OSError, ValueError) as exc:
            raise StoreUnavailable(
                f"the text index failed: {exc}; rebuild_text_index() rebuilds it from SQLite"
            ) from exc
        if exclude:
            indexed = [hit for hit in indexed if hit[0] not in exclude]
        if pending_deletes and indexed:
            indexed = self._existing(indexed)
        tail = [row for row in tail if row[0] not in exclude]
        ranked = indexed + self._score_tail(terms, tail, live_docs, live_terms)
        ranked.sort(key=lambda hit: (-hit[1], hit[0]))
        return ranked[:n], newest

    def _searchable_mark(self, generation: int, hwm: int) -> tuple[int, bool | None]:
        """The mark to rank with, and whether the loaded searcher is of an older generation.

        A searcher loaded at a mark serves the query without a reload (a reload after a merge
        took up to 78 ms): documents above its mark are scored from SQLite like the rest of the
        tail, and the upkeep thread is asked to reload. None: reload in this query (nothing was
        loaded with a mark yet, or the mark is ``STALE_ROWS`` behind: the tail would cost more).
        """
        loaded_generation, loaded_hwm = self._index.loaded()
        if loaded_generation == generation and loaded_hwm is not None:
            return min(loaded_hwm, hwm), False
        if loaded_hwm is None or abs(hwm - loaded_hwm) > STALE_ROWS:  # far behind, or a rebuild reset the mark
            return hwm, None
        if self.on_stale is not None:
            self.on_stale()
        return min(loaded_hwm, hwm), True

    def _dominant(self, agent_id: str, terms: list[str], needed: int, *, max_row_id: int) -> Ranked | None:
        """The agent's top ``needed`` through an unfiltered top-k over every agent (see
        :meth:`TextIndex.search_any_agent`), when the agent owns at least ``DOMINANT_SHARE`` of
        the index: over-fetched by its share, then filtered to the agent and the corpus bound.
        None when not applicable or when the filtered list came up short while more documents
        matched (the caller then runs the filtered search: same result, slower)."""
        if needed <= 0 or max_row_id <= 0:
            return []
        fetch = dominant_fetch(needed, self._index.agent_share(agent_id))
        if fetch is None:
            return None
        found = self._index.search_any_agent(terms, fetch)
        bounded = [hit for hit in found if hit[0] <= max_row_id]
        owned = self._owned(agent_id, [row_id for row_id, _ in bounded])
        hits = [hit for hit in bounded if hit[0] in owned]
        if len(hits) < needed and len(found) >= fetch:
            return None
        return hits[:needed]

    def _owned(self, agent_id: str, row_ids: list[int]) -> set[int]:
        """Those of ``row_ids`` that are the agent's. A row never changes agent and its id is
        never reused, so each owner read is kept (``OWNERS_KEPT`` rows; a row gone from SQLite
        as the empty string): consecutive searches of a conversation check mostly the same rows,
        the whole matching corpus at full fusion depth. A row deleted after its owner was kept is
        dropped by :meth:`_existing`, which runs while the index may still hold a deleted row."""
        owners = self._owners
        unknown = [row_id for row_id in row_ids if row_id not in owners]
        if len(owners) + len(unknown) > OWNERS_KEPT:
            owners.clear()  # rarely reached; simpler than an LRU on every search
        for part in chunked(unknown):
            marks = ",".join("?" * len(part))
            rows = self._db.query(
                "check recall hits' agent", f"SELECT id, agent_id FROM messages WHERE id IN ({marks})", part
            )
            found = {int(r[0]): str(r[1]) for r in rows}
            owners.update((row_id, found.get(row_id, "")) for row_id in part)
        return {row_id for row_id in row_ids if owners.get(row_id) == agent_id}

    def _score_tail(self, terms: list[str], tail: list[tuple[int, str]], live_docs: int, live_terms: int) -> Ranked:
        if not tail:
            return []
        analysed = [(row_id, self._terms(row_id, content)) for row_id, content in tail]
        wanted = set(terms)
        doc_freq = self._index.doc_freqs(terms)
        for _, doc_terms in analysed:
            for term in wanted.intersection(doc_terms):
                doc_freq[term] += 1
        num_docs = self._index.num_docs() + len(analysed)
        avg_len = live_terms / live_docs if live_docs else 0.0
        hits: Ranked = []
        for row_id, doc_terms in analysed:
            score = bm25.score(terms, doc_terms, doc_freq=doc_freq, num_docs=num_docs, avg_doc_len=avg_len)
            if score > 0:
                hits.append((row_id, score))
        return hits

    def _terms(self, row_id: int, content: str) -> list[str]:
        found = self._tail_terms.get(row_id)
        if found is None:
            found = self._tail_terms[row_id] = analyze(content)
            while len(self._tail_terms) > TAIL_TERMS_KEPT:  # request threads share it: one may pop first
                with contextlib.suppress(KeyError):
                    self._tail_terms.popitem(last=False)
        return found

    def _existing(self, ranked: Ranked) -> Ranked:
        alive: set[int] = set()
        for part in chunked([row_id for row_id, _ in ranked]):
            marks = ",".join("?" * len(part))
            rows = self._db.query("check recall hits", f"SELECT id FROM messages WHERE id IN ({marks})", part)
            alive.update(r[0] for r in rows)
        return [hit for hit in ranked if hit[0] in alive]


# Row owners _owned keeps (about 100 bytes each).
OWNERS_KEPT = 100_000
# Unindexed rows whose analysed content _score_tail keeps (the tail is bounded by STALE_ROWS).
TAIL_TERMS_KEPT = 4_096

# A searcher this many message rows behind SQLite's mark is reloaded by the query rather than
# served with the Python-scored tail (a reload is ~1 ms normally, up to ~80 ms after a merge).
STALE_ROWS = 2_000

# From this share of the text index on, an agent's BM25 top-k is an over-fetched top-k over every
# agent, filtered (block-max WAND prunes it; the filtered query scores every posting).
DOMINANT_SHARE = 0.25
# Over-fetch: the expected number of the agent's hits among the candidates is fetch x share.
DOMINANT_MARGIN = 1.2
DOMINANT_SLACK = 16


def dominant_fetch(needed: int, share: float) -> int | None:
    """How many unfiltered hits to fetch for ``needed`` of an agent owning ``share`` of the
    index, or None below ``DOMINANT_SHARE`` (pure)."""
    if share < DOMINANT_SHARE or needed <= 0:
        return None
    return math.ceil(needed * DOMINANT_MARGIN / min(share, 1.0)) + DOMINANT_SLACK


def time_filter(since: float | None, until: float | None, *, column: str = "created_at") -> tuple[str, list[float]]:
    """``since`` inclusive, ``until`` exclusive, as in the tantivy range query."""
    sql, params = "", []
    if since is not None:
        sql += f" AND {column} >= ?"
        params.append(since)
    if until is not None:
        sql += f" AND {column} < ?"
        params.append(until)
    return sql, params
