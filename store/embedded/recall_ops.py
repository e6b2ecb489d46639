"""Recall search of the embedded store: BM25 text recall, recall vectors and hybrid recall.

Ranking itself lives in :mod:`vcm.store.embedded.recall` (BM25 over tantivy plus the unindexed
tail) and :mod:`vcm.store.fusion` (fusing text and vector ranks); this module wires them to
cursors (:mod:`vcm.store.embedded.snapshots`) and reads the hits back from SQLite.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import numpy as np

from vcm.errors import ValidationError
from vcm.store import authors, diversity, fusion, search_checks, validation
from vcm.store.analysis import query_terms
from vcm.store.cursor import fingerprint, left_out, vector_digest
from vcm.store.embedded import rows
from vcm.store.embedded.base import EmbeddedBase, fence
from vcm.store.embedded.db import chunked
from vcm.store.embedded.messageindex import Found
from vcm.store.embedded.recall import time_filter
from vcm.store.types import Page, RecallHit, SearchStats, StoredMessage


class RecallOps(EmbeddedBase):
    """``search_recall``, ``search_recall_hybrid`` and the per-message recall vectors."""

    # How hybrid rankings spread across the conversation ([recall] diversity_*, set by
    # vcm.store.open_store; None: as fused).
    recall_diversity: diversity.Diversity | None = diversity.DEFAULT
    # What a hybrid ranking multiplies the other authors' messages by when the query names some
    # of the agent's authors ([recall] other_author_weight, set by vcm.store.open_store; 1.0: off).
    recall_author_weight: float = authors.OTHER_AUTHOR_WEIGHT

    def search_recall(
        self,
        agent_id: str,
        query: str,
        limit: int = 10,
        cursor: str | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
    ) -> Page[RecallHit]:
        return self._search_text(agent_id, query, limit, cursor, since, until, ())

    def _search_text(
        self,
        agent_id: str,
        query: str,
        limit: int,
        cursor: str | None,
        since: float | None,
        until: float | None,
        exclude: Collection[str],
    ) -> Page[RecallHit]:
        since, until = search_checks.recall_search(agent_id, query, limit, since, until)
        key = fingerprint("recall", agent_id, query, since, until, *left_out(exclude))
        terms = query_terms(query)
        skip = self._row_ids(agent_id, exclude)

        def rank(n: int, bound: int | None, seen: frozenset[int]) -> tuple[list[tuple[int, float]], int]:
            return self._recall.rank(agent_id, terms, n, since=since, until=until, bound=bound, exclude=seen | skip)

        part = self._snapshots.page("recall", agent_id, key, limit, cursor, rank)
        messages = self._hydrate_messages(agent_id, [i for i, _ in part.items])
        hits = [RecallHit(messages[i], s) for i, s in part.items if i in messages]
        return Page(hits, part.next_cursor)

    def _row_ids(self, agent_id: str, message_ids: Collection[str]) -> frozenset[int]:
        """The row ids of those of ``message_ids`` the agent has stored."""
        found: set[int] = set()
        for part in chunked(sorted(set(message_ids))):
            marks = ",".join("?" * len(part))
            found.update(
                int(r[0])
                for r in self._db.query(
                    "read excluded recall hits",
                    f"SELECT id FROM messages WHERE agent_id = ? AND message_id IN ({marks})",
                    [agent_id, *part],
                )
            )
        return frozenset(found)

    def put_message_vectors(
        self,
        agent_id: str,
        vectors: Sequence[tuple[str, Sequence[float]]],
        embedding_version: str,
        *,
        incarnation: str | None = None,
    ) -> int:
        validation.identifier("agent_id", agent_id)
        known = (
            self._db.query(
                "read message vector dimension",
                "SELECT dimension FROM message_vectors WHERE agent_id = ? AND embedding_version = ? LIMIT 1",
                (agent_id, embedding_version),
            )
            if isinstance(embedding_version, str)
            else []
        )
        checked, dim = fusion.unit_vectors(vectors, embedding_version, dimension=known[0][0] if known else None)
        if not checked:
            return 0
        with self._db.write("put message vectors") as conn:
            fence(conn, (agent_id,), incarnation)
            added = 0
            for mid, vec in checked:
                row = conn.execute(
                    "SELECT id FROM messages WHERE agent_id = ? AND message_id = ?", (agent_id, mid)
                ).fetchone()
                if row is None:
                    continue
                inserted = conn.execute(
                    "INSERT OR IGNORE INTO message_vectors (agent_id, message_id, embedding_version, dimension, "
                    "embedding) VALUES (?, ?, ?, ?, ?)",
                    (agent_id, mid, embedding_version, dim, vec.astype("<f4").tobytes()),
                ).rowcount
                if inserted:
                    added += 1
                    conn.execute(
                        "INSERT INTO message_vector_log (agent_id, embedding_version, row_id, op) VALUES (?, ?, ?, 1)",
                        (agent_id, embedding_version, row[0]),
                    )
            return added

    def message_vector_ids(self, agent_id: str, message_ids: Sequence[str], embedding_version: str) -> set[str]:
        validation.identifier("agent_id", agent_id)
        ids = list(dict.fromkeys(str(m) for m in message_ids))
        found: set[str] = set()
        for part in chunked(ids):
            found.update(
                str(r[0])
                for r in self._db.query(
                    "read message vector ids",
                    "SELECT message_id FROM message_vectors WHERE agent_id = ? AND embedding_version = ? "
                    f"AND message_id IN ({','.join('?' * len(part))})",
                    (agent_id, embedding_version, *part),
                )
            )
        return found

    def search_recall_hybrid(
        self,
        agent_id: str,
        query: str,
        vector: Sequence[float] | None,
        *,
        limit: int = 10,
        cursor: str | None = None,
        since: float | None = None,
        until: float | None = None,
        mode: str = "hybrid",
        embedding_version: str | None = None,
        exclude: Collection[str] = (),
    ) -> Page[RecallHit]:
        if fusion.recall_mode(mode) == "text":
            return self._search_text(agent_id, query, limit, cursor, since, until, exclude)
        since, until, q = fusion.vector_query(agent_id, query, vector, mode, limit, since, until)
        version = embedding_version or self._main_vector_version(agent_id)
        key = fingerprint(
            "recall-" + mode, agent_id, query, vector_digest(q), version, since, until, *left_out(exclude)
        )
        terms = query_terms(query)
        skip = self._row_ids(agent_id, exclude)
        lag: list[Found] = []  # what the vector half said about the index (the last ranking)
        named = self._named_authors(agent_id, query) if mode == "hybrid" else None

        def rank(n: int, bound: int | None, seen: frozenset[int]) -> tuple[list[tuple[int, float]], int]:
            excluded = seen | skip
            if mode == "vector":
                top = self._newest_message() if bound is None else bound
                ranked = self._vector_rank(agent_id, version, q, since, until, top, n + len(excluded), lag)
                return [h for h in ranked if h[0] not in excluded][:n], top
            # The agent's vectors decide how deep the lists go (fusion.hybrid_depth). Past the full-
            # depth threshold a later page is ranked from deeper lists than the first (its seen ids
            # count), so scores compare within a page, not across pages: no hit is lost or repeated,
            # but a later page may hold a hit a deeper first ranking would have put on page one.
            corpus = 0
            if version is not None and self._has_vectors(agent_id, version, q):
                corpus = self._message_vectors.size(agent_id, version, q.size)
            depth = fusion.hybrid_depth(
                n + len(excluded), self._max_results, corpus=corpus, factor=self.hybrid_depth_factor
            )
            text, newest = self._recall.rank(agent_id, terms, depth, since=since, until=until, bound=bound)
            top = newest if bound is None else min(newest, bound)
            vec = self._vector_rank(agent_id, version, q, since, until, top, depth, lag)
            candidates = {i for i, _ in text} | {i for i, _ in vec}
            # Positions of messages with a vector come from the agent's message index (what the
            # vector half searched: its members and tail). Any other text hit's vector, if it has
            # one, was not seen by this search - a partial one (the index still building), or a
            # vector written after its tail read - so its vector score is unknown, not 0: it is
            # scored as unembedded, and only its position is read from SQLite. (Asking SQLite
            # which of them have a vector cost a partial query at 1e6 messages a lookup per hit
            # in the vector table, a quarter of its time, to score them 0.)
            seqs = self._message_vectors.positions(agent_id, version, q.size, sorted(candidates)) if version else {}
            embedded = set(seqs) | {i for i, _ in vec}
            seqs.update(self._seqs(agent_id, candidates - set(seqs)))
            anchor = None
            if named:
                # Only the best n + excluded must be exact (spreading re-ranks a deeper head).
                spread = self.recall_diversity is not None and not self.recall_diversity.off
                anchor = authors.Anchor(
                    named,
                    lambda items: self._authors_of(agent_id, items),
                    self.recall_author_weight,
                    exact=None if spread else n + len(excluded),
                )
            fused = fusion.hybrid(
                text,
                vec,
                seqs,
                unembedded={i for i, _ in text} - embedded,
                diversity=self.recall_diversity,
                anchor=anchor,
            )
            return [h for h in fused if h[0] not in excluded][:n], top

        part = self._snapshots.page("recall-" + mode, agent_id, key, limit, cursor, rank)
        messages = self._hydrate_messages(agent_id, [i for i, _ in part.items])
        hits = [RecallHit(messages[i], s) for i, s in part.items if i in messages]
        found = lag[-1] if lag else None
        stats = SearchStats(part.offset, partial=found.partial, unindexed=found.unscanned) if found else None
        return Page(hits, part.next_cursor, stats)

    def message_authors(self, agent_id: str) -> list[str]:
        validation.identifier("agent_id", agent_id)
        found: list[str] = []
        with self._db.read("list message authors") as conn:
            # A skip scan of messages_agent_name: one seek per distinct name.
            while len(found) <= authors.MAX_AUTHORS:
                row = conn.execute(
                    "SELECT name FROM messages WHERE agent_id = ? AND name > ? ORDER BY name LIMIT 1",
                    (agent_id, found[-1] if found else ""),
                ).fetchone()
                if row is None:
                    break
                found.append(str(row[0]))
        return found

    def _named_authors(self, agent_id: str, query: str) -> frozenset[str] | None:
        """The agent's authors ``query`` names when a hybrid ranking is to be anchored on them."""
        return authors.named_in(query, lambda: self.message_authors(agent_id), self.recall_author_weight)

    def _authors_of(self, agent_id: str, ids: Iterable[int]) -> dict[int, str | None]:
        out: dict[int, str | None] = {}
        for part in chunked(sorted(ids)):
            marks = ",".join("?" * len(part))
            for row_id, name in self._db.query(
                "read recall hit authors",
                f"SELECT id, name FROM messages WHERE agent_id = ? AND id IN ({marks})",
                [agent_id, *part],
            ):
                out[int(row_id)] = None if name is None else str(name)
        return out

    def _newest_message(self) -> int:
        return int(self._db.query("newest message", "SELECT COALESCE(MAX(id), 0) FROM messages")[0][0])

    def _main_vector_version(self, agent_id: str) -> str | None:
        """The agent's version with the most message vectors (usually its only one: two index
        seeks, no count over the agent's vectors)."""
        versions: list[str] = []
        while len(versions) < 2:
            after = self._db.query(
                "list message vector versions",
                "SELECT embedding_version FROM message_vectors WHERE agent_id = ? AND embedding_version > ? "
                "ORDER BY embedding_version LIMIT 1",
                (agent_id, versions[-1] if versions else ""),
            )
            if not after:
                break
            versions.append(str(after[0][0]))
        if len(versions) < 2:
            return versions[0] if versions else None
        found = self._db.query(
            "pick message vector version",
            "SELECT embedding_version FROM message_vectors WHERE agent_id = ? GROUP BY embedding_version "
            "ORDER BY COUNT(*) DESC, embedding_version LIMIT 1",
            (agent_id,),
        )
        return str(found[0][0]) if found else None

    def _vector_rank(
        self,
        agent_id: str,
        version: str | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        since: float | None,
        until: float | None,
        top: int,
        n: int,
        lag: list[Found],
    ) -> list[tuple[int, float]]:
        """Cosine top-``n`` over the agent's message vectors of ``version`` (messages up to row
        ``top`` in the time window), from the agent's in-memory message index
        (:mod:`vcm.store.embedded.messageindex`: exact below the threshold, IVF above, plus the
        unindexed tail); appends what the index said to ``lag`` (partial: past the tail bound)."""
        if n <= 0 or version is None or not self._has_vectors(agent_id, version, query):
            return []
        window = None
        if since is not None or until is not None:
            time_sql, time_params = time_filter(since, until)
            found = self._db.query(
                "read the time window of a recall search",
                f"SELECT id FROM messages WHERE agent_id = ? AND id <= ?{time_sql}",
                [agent_id, top, *time_params],
            )
            window = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        result = self._message_vectors.search(agent_id, version, query, n, top=top, window=window)
        lag.append(result)
        if result.partial and result.hits:
            # Removes past the tail bound were not read: drop hits whose message is gone.
            alive = set(self._hydrate_ids(agent_id, [i for i, _ in result.hits]))
            return [h for h in result.hits if h[0] in alive]
        return result.hits

    def _hydrate_ids(self, agent_id: str, ids: Sequence[int]) -> list[int]:
        out: list[int] = []
        for part in chunked(list(ids)):
            marks = ",".join("?" * len(part))
            out.extend(
                int(r[0])
                for r in self._db.query(
                    "check vector hits",
                    f"SELECT id FROM messages WHERE agent_id = ? AND id IN ({marks})",
                    [agent_id, *part],
                )
            )
        return out

    def _has_vectors(self, agent_id: str, version: str | None, query: np.ndarray[Any, np.dtype[np.float32]]) -> bool:
        """Whether the agent has message vectors of ``version``; refused when they do not have
        the query's dimension."""
        if version is None:
            return False
        known = self._db.query(
            "read message vector dimension",
            "SELECT dimension FROM message_vectors WHERE agent_id = ? AND embedding_version = ? LIMIT 1",
            (agent_id, version),
        )
        if not known:
            return False
        if int(known[0][0]) != query.size:
            raise ValidationError(
                f"query vector has dimension {query.size}, message vectors of {version!r} have {known[0][0]}",
                field="vector",
            )
        return True

    def _seqs(self, agent_id: str, ids: Iterable[int]) -> dict[int, int]:
        """The conversation position (``seq``) of each of these messages of the agent."""
        seqs: dict[int, int] = {}
        for part in chunked(sorted(ids)):
            marks = ",".join("?" * len(part))
            # By primary key: ``+agent_id`` keeps SQLite off the covering (agent_id, seq) index,
            # which it otherwise scans whole (75 ms a query at 1e6 messages).
            for row_id, seq in self._db.query(
                "read recall hit positions",
                f"SELECT id, seq FROM messages WHERE id IN ({marks}) AND +agent_id = ?",
                [*part, agent_id],
            ):
                seqs[int(row_id)] = int(seq)
        return seqs

    def _hydrate_messages(self, agent_id: str, ids: Sequence[int]) -> dict[int, StoredMessage]:
        out: dict[int, StoredMessage] = {}
        for part in chunked(list(ids)):
            marks = ",".join("?" * len(part))
            for row in self._db.query(
                "read recall hits",
                f"SELECT {rows.MESSAGE_COLUMNS} FROM messages WHERE agent_id = ? AND id IN ({marks})",
                [agent_id, *part],
            ):
                out[row["id"]] = rows.message(row)
        return out
