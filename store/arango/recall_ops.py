"""Recall search of the ArangoDB store: BM25 text recall, recall vectors and hybrid recall.

The queries come from :mod:`vcm.store.arango.aql` (BM25 over ``messages_view`` plus a scan of
what the view may not hold yet; exact cosine over ``recall_emb``), fusion from
:mod:`vcm.store.fusion`; results are ranked once and paged from snapshots
(:mod:`vcm.store.arango.snapshots`).
"""

from __future__ import annotations

from collections.abc import Sequence

from vcm.errors import ValidationError
from vcm.store import diversity, fusion, search_checks, validation
from vcm.store.arango import documents, names
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import messages as aql_messages
from vcm.store.arango.aql import recall_vectors as aql_recall_vectors
from vcm.store.arango.recall_vectors import RecallVectorOps
from vcm.store.arango.snapshots import Ranked
from vcm.store.cursor import fingerprint, vector_digest
from vcm.store.types import Page, RecallHit


class RecallOps(RecallVectorOps):
    """``search_recall``, ``search_recall_hybrid`` and the per-message recall vectors."""

    # How hybrid rankings spread across the conversation ([recall] diversity_*, set by
    # vcm.store.open_store; None: as fused).
    recall_diversity: diversity.Diversity | None = diversity.DEFAULT

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
        since, until = search_checks.recall_search(agent_id, query, limit, since, until)
        key = fingerprint("recall", agent_id, query, since, until)
        if cursor is not None:
            part = self._snapshots.next("recall", agent_id, key, cursor, limit)
        else:
            ranked = self._rank_recall(agent_id, query, limit + 1, since, until)
            if len(ranked) > limit:
                # More than a page: rank once, deep, and page from that snapshot.
                ranked = self._rank_recall(agent_id, query, self._max_results, since, until)
            part = self._snapshots.first("recall", agent_id, key, ranked, limit)
        ids = [f"{names.MESSAGES}/{k}" for k, _ in part.items]
        found = {d["_key"]: d for d in self._run(self._ro, aql_common.documents(ids, agent_id), "search_recall")}
        hits = [RecallHit(documents.message_from_doc(found[k]), s) for k, s in part.items if k in found]
        return Page(hits, part.next_cursor)

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
    ) -> Page[RecallHit]:
        if fusion.recall_mode(mode) == "text":
            return self.search_recall(agent_id, query, limit, cursor, since=since, until=until)
        since, until, q = fusion.vector_query(agent_id, query, vector, mode, limit, since, until)
        key = fingerprint("recall-" + mode, agent_id, query, vector_digest(q), embedding_version, since, until)
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
                seq, embedded = self._positions(agent_id, {k for k, _ in text} | {k for k, _ in vec}, version)
                unembedded = {k for k, _ in text} - embedded
                ranked = fusion.hybrid(text, vec, seq, unembedded=unembedded, diversity=self.recall_diversity)[:depth]
            part = self._snapshots.first("recall-" + mode, agent_id, key, ranked, limit)
        ids = [f"{names.MESSAGES}/{k}" for k, _ in part.items]
        found = {d["_key"]: d for d in self._run(self._ro, aql_common.documents(ids, agent_id), "search_recall")}
        hits = [RecallHit(documents.message_from_doc(found[k]), s) for k, s in part.items if k in found]
        return Page(hits, part.next_cursor)

    def _positions(self, agent_id: str, keys: set[str], version: str | None) -> tuple[dict[str, int], set[str]]:
        """Each hit's ``seq``, and which hits carry a recall vector of ``version``: one query."""
        if not keys:
            return {}, set()
        rows = self._run(
            self._ro, aql_recall_vectors.recall_positions(agent_id, sorted(keys), version), "search_recall"
        )
        seq = {str(r["key"]): int(r["seq"]) for r in rows}
        return seq, {str(r["key"]) for r in rows if r.get("embedded")}

    def _main_vector_version(self, agent_id: str, dimension: int) -> str | None:
        versions = self._recall_versions(agent_id)
        if versions and int(versions[0]["dimension"]) != dimension:
            raise ValidationError(
                f"query vector has dimension {dimension}, message vectors have {versions[0]['dimension']}",
                field="vector",
            )
        return str(versions[0]["version"]) if versions else None
