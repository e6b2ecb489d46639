"""BM25 ranking of an agent's messages: tantivy for what it has indexed, plus the tail.

Read-after-write: tantivy lags SQLite by design (the index is committed after the SQLite
transaction, off the caller's thread, and possibly by another process). Rather than make every
write wait for a ~20 ms tantivy commit (and for the one process allowed to write the index),
a search reads the index's high-water mark and the agent's messages above it in one SQLite
snapshot, asks tantivy only for documents at or below the mark, and scores the tail in Python
with the same BM25 (see :mod:`vcm.store.embedded.bm25`). The tail is what the indexer has not caught
up with yet, normally a few recent messages, so this costs one indexed SQLite range read.
"""

from __future__ import annotations

from vcm.errors import StoreUnavailable
from vcm.store.embedded import bm25
from vcm.store.embedded.db import Database, chunked, meta_int
from vcm.store.embedded.schema import META_TEXT_DOCS, META_TEXT_GEN, META_TEXT_HWM, META_TEXT_TERMS
from vcm.store.embedded.textindex import TextIndex, analyze

Ranked = list[tuple[int, float]]


class RecallRanker:
    def __init__(self, db: Database, index: TextIndex) -> None:
        self._db = db
        self._index = index

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
            live_docs = meta_int(conn, META_TEXT_DOCS)
            live_terms = meta_int(conn, META_TEXT_TERMS)
            pending_deletes = conn.execute("SELECT COUNT(*) FROM text_index_deletes").fetchone()[0]
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
        # Only after reading the mark: the indexer commits tantivy before recording a mark.
        try:
            self._index.refresh(generation)
            # Documents deleted from SQLite but not yet from tantivy may occupy top slots.
            indexed = self._index.search(
                agent_id,
                terms,
                n + pending_deletes + len(exclude),
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

    def _score_tail(self, terms: list[str], tail: list[tuple[int, str]], live_docs: int, live_terms: int) -> Ranked:
        if not tail:
            return []
        analysed = [(row_id, analyze(content)) for row_id, content in tail]
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

    def _existing(self, ranked: Ranked) -> Ranked:
        alive: set[int] = set()
        for part in chunked([row_id for row_id, _ in ranked]):
            marks = ",".join("?" * len(part))
            rows = self._db.query("check recall hits", f"SELECT id FROM messages WHERE id IN ({marks})", part)
            alive.update(r[0] for r in rows)
        return [hit for hit in ranked if hit[0] in alive]


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
