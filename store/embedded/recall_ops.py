"""Recall search of the embedded store: BM25 text recall, recall vectors and hybrid recall.

Ranking itself lives in :mod:`vcm.store.embedded.recall` (BM25 over tantivy plus the unindexed
tail) and :mod:`vcm.store.fusion` (fusing text and vector ranks); this module wires them to
cursors (:mod:`vcm.store.embedded.snapshots`) and reads the hits back from SQLite.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from vcm.errors import ValidationError
from vcm.store import fusion, validation
from vcm.store.cursor import fingerprint, vector_digest
from vcm.store.embedded import rows
from vcm.store.embedded.base import EmbeddedBase
from vcm.store.embedded.db import chunked
from vcm.store.embedded.recall import time_filter
from vcm.store.embedded.textindex import query_terms
from vcm.store.types import Page, RecallHit, StoredMessage


class RecallOps(EmbeddedBase):
    """``search_recall``, ``search_recall_hybrid`` and the per-message recall vectors."""

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
        since, until = validation.recall_search(agent_id, query, limit, since, until)
        key = fingerprint("recall", agent_id, query, since, until)
        terms = query_terms(query)

        def rank(n: int, bound: int | None, exclude: frozenset[int]) -> tuple[list[tuple[int, float]], int]:
            return self._recall.rank(agent_id, terms, n, since=since, until=until, bound=bound, exclude=exclude)

        part = self._snapshots.page("recall", agent_id, key, limit, cursor, rank)
        messages = self._hydrate_messages(agent_id, [i for i, _ in part.items])
        hits = [RecallHit(messages[i], s) for i, s in part.items if i in messages]
        return Page(hits, part.next_cursor)

    def put_message_vectors(
        self, agent_id: str, vectors: Sequence[tuple[str, Sequence[float]]], embedding_version: str
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
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO message_vectors (agent_id, message_id, embedding_version, dimension, "
                "embedding) SELECT ?, ?, ?, ?, ? WHERE EXISTS "
                "(SELECT 1 FROM messages WHERE agent_id = ? AND message_id = ?)",
                [
                    (agent_id, mid, embedding_version, dim, vec.astype("<f4").tobytes(), agent_id, mid)
                    for mid, vec in checked
                ],
            )
            return conn.total_changes - before

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
    ) -> Page[RecallHit]:
        if fusion.recall_mode(mode) == "text":
            return self.search_recall(agent_id, query, limit, cursor, since=since, until=until)
        since, until, q = fusion.vector_query(agent_id, query, vector, mode, limit, since, until)
        version = embedding_version or self._main_vector_version(agent_id)
        key = fingerprint("recall-" + mode, agent_id, query, vector_digest(q), version, since, until)
        terms = query_terms(query)
        depth = self._max_results

        def rank(n: int, bound: int | None, exclude: frozenset[int]) -> tuple[list[tuple[int, float]], int]:
            if mode == "vector":
                top = self._newest_message() if bound is None else bound
                ranked = self._vector_rank(agent_id, version, q, since, until, top, n + len(exclude))
                return [h for h in ranked if h[0] not in exclude][:n], top
            text, newest = self._recall.rank(agent_id, terms, depth, since=since, until=until, bound=bound)
            top = newest if bound is None else min(newest, bound)
            vec = self._vector_rank(agent_id, version, q, since, until, top, depth)
            seqs, embedded = self._positions(agent_id, {i for i, _ in text} | {i for i, _ in vec}, version)
            fused = fusion.hybrid(text, vec, seqs, unembedded={i for i, _ in text} - embedded)
            return [h for h in fused if h[0] not in exclude][:n], top

        part = self._snapshots.page("recall-" + mode, agent_id, key, limit, cursor, rank)
        messages = self._hydrate_messages(agent_id, [i for i, _ in part.items])
        hits = [RecallHit(messages[i], s) for i, s in part.items if i in messages]
        return Page(hits, part.next_cursor)

    def _newest_message(self) -> int:
        return int(self._db.query("newest message", "SELECT COALESCE(MAX(id), 0) FROM messages")[0][0])

    def _main_vector_version(self, agent_id: str) -> str | None:
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
    ) -> list[tuple[int, float]]:
        """Exact cosine over the agent's message vectors of ``version`` (messages up to row ``top``
        in the time window); a per-agent recall corpus is small enough that exact search is the
        right index (the archival spaces are where IVF pays)."""
        if version is None or n <= 0:
            return []
        time_sql, time_params = time_filter(since, until, column="m.created_at")
        found = self._db.query(
            "read message vectors",
            "SELECT m.id, v.dimension, v.embedding FROM message_vectors v JOIN messages m "
            "ON m.agent_id = v.agent_id AND m.message_id = v.message_id "
            f"WHERE v.agent_id = ? AND v.embedding_version = ? AND m.id <= ?{time_sql} ORDER BY m.id",
            [agent_id, version, top, *time_params],
        )
        if not found:
            return []
        if int(found[0][1]) != query.size:
            raise ValidationError(
                f"query vector has dimension {query.size}, message vectors of {version!r} have {found[0][1]}",
                field="vector",
            )
        matrix = np.frombuffer(b"".join(r[2] for r in found), dtype="<f4").reshape(len(found), -1)
        return fusion.cosine_top(query, [int(r[0]) for r in found], matrix.astype(np.float32), n)

    def _positions(self, agent_id: str, ids: Iterable[int], version: str | None) -> tuple[dict[int, int], set[int]]:
        """The conversation position (``seq``) of each of these messages of the agent, and which
        of them carry a vector of ``version`` (hybrid scores a missing one by the text score)."""
        seqs: dict[int, int] = {}
        embedded: set[int] = set()
        for part in chunked(sorted(ids)):
            marks = ",".join("?" * len(part))
            for row_id, seq, has_vector in self._db.query(
                "read recall hit positions",
                "SELECT m.id, m.seq, v.message_id IS NOT NULL FROM messages m LEFT JOIN message_vectors v "
                "ON v.agent_id = m.agent_id AND v.message_id = m.message_id AND v.embedding_version = ? "
                f"WHERE m.agent_id = ? AND m.id IN ({marks})",
                [version, agent_id, *part],
            ):
                seqs[int(row_id)] = int(seq)
                if has_vector:
                    embedded.add(int(row_id))
        return seqs, embedded

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
