"""Recall search of the ArangoDB store: BM25 text recall, recall vectors and hybrid recall.

The queries come from :mod:`vcm.store.arango.aql` (BM25 over ``messages_view`` plus a scan of
what the view may not hold yet; exact cosine over ``recall_emb``), fusion from
:mod:`vcm.store.fusion`; results are ranked once and paged from snapshots
(:mod:`vcm.store.arango.snapshots`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence

from vcm.errors import ValidationError
from vcm.store import authors, diversity, fusion, search_checks, validation
from vcm.store.arango import documents, names
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import messages as aql_messages
from vcm.store.arango.aql import recall_vectors as aql_recall_vectors
from vcm.store.arango.recall_vectors import RecallVectorOps
from vcm.store.arango.snapshots import Ranked
from vcm.store.cursor import fingerprint, left_out, vector_digest
from vcm.store.types import Page, RecallHit

# How long one process keeps an agent's list of message authors: listing costs a round trip per
# author, and an author new within this window is only anchored on after it (a ranking nudge,
# not a filter: nothing is hidden meanwhile).
AUTHORS_RECHECK_S = 30.0


class RecallOps(RecallVectorOps):
    """``search_recall``, ``search_recall_hybrid`` and the per-message recall vectors."""

    # How hybrid rankings spread across the conversation ([recall] diversity_*, set by
    # vcm.store.open_store; None: as fused).
    recall_diversity: diversity.Diversity | None = diversity.DEFAULT
    # What a hybrid ranking multiplies the other authors' messages by when the query names some
    # of the agent's authors ([recall] other_author_weight, set by vcm.store.open_store; 1.0: off).
    recall_author_weight: float = authors.OTHER_AUTHOR_WEIGHT
    # agent -> (when listed, its message authors); set by _init_recall_authors, under _authors_lock
    _authors_lock: threading.Lock
    _authors_cache: dict[str, tuple[float, list[str]]]

    def _init_recall_authors(self) -> None:
        self._authors_lock = threading.Lock()
        self._authors_cache = {}

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
        skip = _keys(agent_id, exclude)
        if cursor is not None:
            part = self._snapshots.next("recall", agent_id, key, cursor, limit)
        else:
            ranked = _without(self._rank_recall(agent_id, query, limit + 1 + len(skip), since, until), skip)
            if len(ranked) > limit:
                # More than a page: rank once, deep, and page from that snapshot.
                ranked = _without(self._rank_recall(agent_id, query, self._max_results, since, until), skip)
            part = self._snapshots.first("recall", agent_id, key, ranked, limit)
        return self._hits(agent_id, part.items, part.next_cursor)

    def _hits(self, agent_id: str, items: Ranked, next_cursor: str | None) -> Page[RecallHit]:
        ids = [f"{names.MESSAGES}/{k}" for k, _ in items]
        found = {d["_key"]: d for d in self._run(self._ro, aql_common.documents(ids, agent_id), "search_recall")}
        hits = [RecallHit(documents.message_from_doc(found[k]), s) for k, s in items if k in found]
        return Page(hits, next_cursor)

    def _rank_recall(self, agent_id: str, query: str, n: int, since: float | None, until: float | None) -> Ranked:
        q = aql_messages.recall_search(agent_id, query, fetch=n, since=since, until=until, lag_ms=self._lag_ms)
        return [(str(r["key"]), float(r["score"])) for r in self._run(self._ro, q, "search_recall")]

    def put_message_vectors(
        self,
        agent_id: str,
        vectors: Sequence[tuple[str, Sequence[float]]],
        embedding_version: str,
        *,
        incarnation: str | None = None,
    ) -> int:
        validation.identifier("agent_id", agent_id)
        checked, dim = fusion.unit_vectors(vectors, embedding_version)
        if not checked:
            return 0
        self.check_recall_dimension(dim)
        for known in self._run(self._ro, aql_recall_vectors.recall_vector_versions(agent_id), "put_message_vectors"):
            if known["version"] == embedding_version and int(known["dimension"]) != dim:
                raise ValidationError(
                    f"vectors of {embedding_version!r} have dimension {known['dimension']}, not {dim}",
                    field="vector",
                )
        items = [(documents.message_key(agent_id, mid), vec.tolist()) for mid, vec in checked]
        written = len(
            self._fenced_run(
                aql_recall_vectors.put_message_vectors(agent_id, items, embedding_version),
                (names.MESSAGES,),
                (agent_id,),
                incarnation,
                "put_message_vectors",
            )
        )
        return written

    def message_vector_ids(self, agent_id: str, message_ids: Sequence[str], embedding_version: str) -> set[str]:
        validation.identifier("agent_id", agent_id)
        keys = {documents.message_key(agent_id, str(m)): str(m) for m in message_ids}
        if not keys:
            return set()
        q = aql_recall_vectors.message_vector_keys(agent_id, list(keys), embedding_version)
        return {keys[str(k)] for k in self._run(self._ro, q, "message_vector_ids") if str(k) in keys}

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
        key = fingerprint(
            "recall-" + mode, agent_id, query, vector_digest(q), embedding_version, since, until, *left_out(exclude)
        )
        if cursor is not None:
            part = self._snapshots.next("recall-" + mode, agent_id, key, cursor, limit)
        else:
            # Ranked once, as deep as paging can go, so every page comes from one snapshot.
            version = embedding_version or self._main_vector_version(agent_id, q.size)
            depth = self._max_results
            vec = self._rank_vectors(agent_id, q, version, depth, since, until)
            if mode == "vector":
                ranked: Ranked = vec
            else:
                text = self._rank_recall(agent_id, query, depth, since, until)
                named = self._named_authors(agent_id, query)
                candidates = {k for k, _ in text} | {k for k, _ in vec}
                seq, embedded, author_of = self._positions(
                    agent_id, candidates, version, with_authors=named is not None
                )
                unembedded = {k for k, _ in text} - embedded
                # The positions query read every candidate's author: the whole ranking is exact.
                anchor = authors.Anchor(named, lambda _: author_of, self.recall_author_weight) if named else None
                ranked = fusion.hybrid(
                    text, vec, seq, unembedded=unembedded, diversity=self.recall_diversity, anchor=anchor
                )[:depth]
            ranked = _without(ranked, _keys(agent_id, exclude))
            part = self._snapshots.first("recall-" + mode, agent_id, key, ranked, limit)
        return self._hits(agent_id, part.items, part.next_cursor)

    def _positions(
        self, agent_id: str, keys: set[str], version: str | None, *, with_authors: bool = False
    ) -> tuple[dict[str, int], set[str], dict[str, str | None]]:
        """Each hit's ``seq``, which hits carry a recall vector of ``version``, and with
        ``with_authors``, each hit's author: one query."""
        if not keys:
            return {}, set(), {}
        query = aql_recall_vectors.recall_positions(agent_id, sorted(keys), version, authors=with_authors)
        rows = self._run(self._ro, query, "search_recall")
        seq = {str(r["key"]): int(r["seq"]) for r in rows}
        author_of: dict[str, str | None] = {}
        if with_authors:
            author_of = {str(r["key"]): None if r.get("author") is None else str(r["author"]) for r in rows}
        return seq, {str(r["key"]) for r in rows if r.get("embedded")}, author_of

    def message_authors(self, agent_id: str) -> list[str]:
        validation.identifier("agent_id", agent_id)
        now = time.monotonic()
        with self._authors_lock:
            cached = self._authors_cache.get(agent_id)
        if cached is not None and now - cached[0] < AUTHORS_RECHECK_S:
            return list(cached[1])
        found: list[str] = []
        while len(found) <= authors.MAX_AUTHORS:
            query = aql_messages.message_author_after(agent_id, found[-1] if found else "")
            rows = self._run(self._ro, query, "message_authors")
            if not rows or rows[0] is None:
                break
            found.append(str(rows[0]))
        with self._authors_lock:
            self._authors_cache[agent_id] = (now, found)
        return list(found)

    def _named_authors(self, agent_id: str, query: str) -> frozenset[str] | None:
        """The agent's authors ``query`` names when a hybrid ranking is to be anchored on them."""
        return authors.named_in(query, lambda: self.message_authors(agent_id), self.recall_author_weight)

    def _main_vector_version(self, agent_id: str, dimension: int) -> str | None:
        versions = self._recall_versions(agent_id)
        if versions and int(versions[0]["dimension"]) != dimension:
            raise ValidationError(
                f"query vector has dimension {dimension}, message vectors have {versions[0]['dimension']}",
                field="vector",
            )
        return str(versions[0]["version"]) if versions else None


def _keys(agent_id: str, message_ids: Collection[str]) -> frozenset[str]:
    """The document keys of the agent's ``message_ids`` (a search's ``exclude``)."""
    return frozenset(documents.message_key(agent_id, m) for m in message_ids)


def _without(ranked: Ranked, keys: frozenset[str]) -> Ranked:
    return [hit for hit in ranked if hit[0] not in keys] if keys else ranked
