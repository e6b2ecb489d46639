"""Recall and archival memory through the façade: hybrid recall search, archival search, and
archival ingestion jobs (queued to the cold path, polled here). Retrieved text carries its taint
marks (:meth:`~vcm.service.core.Core.mark`)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vcm import validation
from vcm.durable import is_notice
from vcm.errors import PolicyRefused, StoreUnavailable, ValidationError, VcmError
from vcm.hotpath.jobs import IngestJob
from vcm.obs import footprint, metrics
from vcm.service.core import Core
from vcm.store import authors
from vcm.store.audit_names import Actor, EventKind, audit_id
from vcm.store.types import ArchivalChunk, ArchivalHit, Page, RecallHit
from vcm.types import IngestRequest


@dataclass(frozen=True)
class RecallResult:
    page: Page[RecallHit]
    mode: str
    # ``tainted`` / ``taint_reasons`` of each hit, in page order (see Core.mark).
    marks: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ArchivalResult:
    page: Page[ArchivalHit]
    marks: list[dict[str, Any]] = field(default_factory=list)


def ingest_job_id(agent_id: str, doc_id: str, text: str, source: str, metadata: Mapping[str, Any]) -> str:
    """The same document (content, id, source, metadata) always maps to the same job."""
    canonical = json.dumps(
        [agent_id, doc_id, hashlib.sha256(text.encode("utf-8")).hexdigest(), source, dict(metadata)],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
        default=str,
    )
    return "ing-" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:24]


SPACES_TTL_S = 10.0


def _vector(name: str, value: Any) -> list[float]:
    """A caller's embedding: a non-empty list of finite numbers (its dimension the store checks)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not 0 < len(value) <= 8192:
        raise ValidationError(f"{name} must be a list of 1 to 8192 numbers", field=name)
    out = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
            raise ValidationError(f"{name} must hold finite numbers only", field=name)
        out.append(float(x))
    return out


@dataclass(frozen=True)
class PrecomputedDocument:
    """A document the caller chunked and embedded (seed 000's ``ingest_archival`` arguments)."""

    doc_id: str
    chunks: Sequence[str]
    embeddings: Sequence[Sequence[float]]
    dimension: int
    metric: str
    embedding_version: str
    model_id: str
    idempotency_key: str
    source: str = ""
    metadata: Mapping[str, Any] | None = None

    @property
    def mode(self) -> str:
        """The chunking the version names (``<model_id>:<mode>:<suffix>``)."""
        return self.embedding_version.rsplit(":", 2)[-2] if self.embedding_version.count(":") >= 2 else ""


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, separators=(",", ":")).encode("utf-8")).hexdigest()


def _mismatch(name: str, given: Any, store: Any) -> ValidationError:
    return ValidationError(
        f"{name} {given} does not match the store's archival space ({store})", field=name, given=given, store=store
    )


def doc_id_for(text: str) -> str:
    return "doc-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Search:
    """search_recall, search_archival, ingest_archival, ingest_job."""

    def __init__(self, core: Core) -> None:
        self.core = core
        # The store's vector spaces, read through its health report at most every SPACES_TTL_S
        # (a caller's query_vector is checked against them on every search).
        self._spaces_read: tuple[float, list[dict[str, Any]]] | None = None

    def search_recall(
        self,
        agent_id: str,
        query: str,
        *,
        limit: int = 10,
        cursor: str | None = None,
        since: float | None = None,
        until: float | None = None,
        mode: str = "hybrid",
        exclude: Collection[str] = (),
        vector_text: str | None = None,
    ) -> RecallResult:
        """Hybrid (BM25 + message vectors) by default; text when this process has no embedder or
        messages get no vectors (``[recall] vectors`` off). The result says which mode ran.

        ``exclude``: message ids left out of the ranking (the prompt builder's FIFO: the store
        neither ranks nor reads them); such a page has no next cursor. ``vector_text``: the
        query's :meth:`vector_text` when the caller has just worked it out (the prompt builder,
        which embedded it ahead): a store read less."""
        self.core.agent(agent_id)
        query = validation.text(query, "query", 10_000)
        if mode not in ("text", "vector", "hybrid"):
            raise ValidationError("mode must be text, vector or hybrid", field="mode")
        vector: list[float] | None = None
        version: str | None = None
        if mode != "text" and self.core.embed is not None and self.core.settings.recall.vectors:
            vector = self.core.vector_of(vector_text if vector_text is not None else self.vector_text(agent_id, query))
            version = self.core.recall_version() if self.core.recall_version is not None else None
        else:
            mode = "text"
        page = self.core.store.search_recall_hybrid(
            agent_id,
            query,
            vector,
            limit=limit,
            cursor=cursor,
            since=since,
            until=until,
            mode=mode,
            embedding_version=version,
            exclude=tuple(exclude),
        )
        if exclude:
            page = Page(page.items, None, page.stats)
        if any(is_notice(h.message) for h in page.items):
            # vcm's own memory-pressure notices are in the recall log, not in the conversation: a
            # model asked to save its memory "now" by a search result would do so for nothing.
            page = Page([h for h in page.items if not is_notice(h.message)], page.next_cursor, page.stats)
        # Marks only for the hits returned: a scan per hit is most of a small search's cost.
        return RecallResult(page, mode, [self.core.mark(h.message.content) for h in page.items])

    def vector_text(self, agent_id: str, query: str) -> str:
        """What a recall query's vector is embedded from: the query without the names of the
        agent's message authors it mentions (``[recall] query_vector_without_authors``; see
        :mod:`vcm.store.authors`), the query itself otherwise."""
        if not self.core.settings.recall.query_vector_without_authors:
            return query
        known = self.core.store.message_authors(agent_id)
        if len(known) > authors.MAX_AUTHORS:
            return query
        return authors.without_names(query, authors.mentioned(query, known))

    def search_archival(
        self,
        agent_id: str,
        query: str | None,
        *,
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
        vector: Sequence[float] | None = None,
        n_probe: int | None = None,
    ) -> ArchivalResult:
        """Vector top-k by a text ``query`` (embedded here) or a caller's ``vector`` (the store
        refuses one of a dimension it holds no index for); ``n_probe`` index cells searched, at
        most ``[ingest] max_n_probe`` (None: the index's default)."""
        self.core.agent(agent_id)
        if (query is None) == (vector is None):
            raise ValidationError("send query or query_vector, not both and not neither", field="query_vector")
        if n_probe is not None:
            bound = self.core.settings.ingest.max_n_probe
            if not isinstance(n_probe, int) or isinstance(n_probe, bool) or not 1 <= n_probe <= bound:
                raise ValidationError(f"nProbe must be an integer from 1 to {bound} ([ingest] max_n_probe)",
                                      field="nProbe")  # fmt: skip
        if vector is not None:
            vector = _vector("query_vector", vector)
            # Both adapters answer alike: an embedding of no dimension the store holds is refused
            # (the ArangoDB adapter alone would answer an empty page).
            held = self._dimensions()
            if held and len(vector) not in held:
                held = self._dimensions(fresh=True)  # a space created since the last read
                if held and len(vector) not in held:
                    raise _mismatch("dimension", len(vector), " or ".join(str(d) for d in sorted(held)))
        else:
            query = validation.text(query, "query", 10_000)
            if self.core.embed is None:
                raise ValidationError("archival search needs an embedding model; none is configured", field="query")
            vector = self.core.vector_of(self.vector_text(agent_id, query))
        page = self.core.store.search_archival(agent_id, vector, k, filters=filters, cursor=cursor, n_probe=n_probe)
        metrics.archival_n_probe(n_probe)
        return ArchivalResult(page, [self.core.mark(h.chunk.text) for h in page.items])

    def ingest_archival(
        self,
        agent_id: str,
        text: str,
        *,
        doc_id: str | None = None,
        source: str = "",
        metadata: Mapping[str, Any] | None = None,
        actor: str = Actor.SYSTEM,
        idempotency_key: str | None = None,
    ) -> IngestJob:
        """Queue a document for archival memory; returns its job at once (poll :meth:`ingest_job`).

        Idempotent twice over: the same document always maps to the same job (queued once; a
        failed job is queued again), and an idempotency key reused for a different document
        answers IDEMPOTENCY_MISMATCH without queueing anything."""
        self.core.agent(agent_id)
        text = validation.text(text, "text", 5_000_000)
        meta = validation.metadata(metadata)
        if not isinstance(source, str) or len(source) > 1000:
            raise ValidationError("source must be a string of at most 1000 characters", field="source")
        doc = validation.doc_id(doc_id) if doc_id is not None else doc_id_for(text)
        job_id = ingest_job_id(agent_id, doc, text, source, meta)
        if idempotency_key is not None:
            request = {
                "doc_id": doc_id,
                "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
                "source": source,
                "metadata": meta,
            }
            self.core.claim(agent_id, idempotency_key, "ingest_archival", request, {"job_id": job_id})
        job, opened = self.core.hot.jobs.open(agent_id, job_id, doc, self.core.clock())
        if not opened:
            return job
        try:
            self.core.dispatcher.ingest(
                IngestRequest(
                    agent_id,
                    job_id,
                    doc,
                    text,
                    source,
                    meta,
                    actor=actor,
                    idempotency_key=idempotency_key,
                    incarnation=self.core.hot.incarnation(agent_id),
                )
            )
        except VcmError as exc:
            self.core.hot.jobs.failed(agent_id, job_id, exc.to_dict(), self.core.clock())
            raise
        except Exception as exc:  # the document is nowhere else: the caller must hear of it
            self.core.hot.jobs.failed(
                agent_id, job_id, {"code": "STORE_UNAVAILABLE", "message": str(exc)}, self.core.clock()
            )
            raise StoreUnavailable("could not queue the document for ingestion; retry shortly") from exc
        # An in-process dispatcher may have finished the job already.
        return self.core.hot.jobs.get(agent_id, job_id)

    def ingest_chunks(self, agent_id: str, doc: PrecomputedDocument, *, actor: str = Actor.SYSTEM) -> dict[str, Any]:
        """Store a document the caller chunked and embedded (seed 000's ``ingest_archival``),
        at once, under its idempotency key. The embeddings must be of the store's archival space:
        ``dimension``, ``metric`` and the model of ``embedding_version`` match what the store
        holds (and this process's embedder), a mismatch a VALIDATION_ERROR naming both; and
        late-chunked, as the ``late`` of the version says (``naive`` is refused unless
        ``[ingest] allow_naive``, like a naive ingestion of text)."""
        self.core.agent(agent_id)
        doc_id = validation.doc_id(doc.doc_id)
        meta = validation.metadata(doc.metadata)
        self._check_space(agent_id, doc)
        chunks_sha256 = _digest(doc.chunks)
        request = {
            "doc_id": doc_id,
            "chunks_sha256": chunks_sha256,
            "embeddings_sha256": _digest(doc.embeddings),
            "space": [doc.dimension, doc.metric, doc.embedding_version, doc.model_id],
            "source": doc.source,
            "metadata": meta,
        }
        first, replayed = self.core.claim(agent_id, doc.idempotency_key, "ingest_archival", request, {"pending": True})
        if replayed and "inserted" in first:
            return first
        now, offset, rows = self.core.clock(), 0, []
        for i, (text, vector) in enumerate(zip(doc.chunks, doc.embeddings, strict=True)):
            rows.append(
                ArchivalChunk(
                    agent_id=agent_id,
                    doc_id=doc_id,
                    chunk_index=i,
                    text=text,
                    embedding=vector,
                    metric=doc.metric,  # type: ignore[arg-type]  # checked by _check_space
                    embedding_version=doc.embedding_version,
                    model_id=doc.model_id,
                    char_start=offset,
                    char_end=offset + len(text),
                    source=doc.source,
                    metadata={**meta, "vcm": {"mode": doc.mode, "chunked_by": "caller"}},
                    created_at=now,
                )
            )
            offset += len(text)
        inserted = self.core.store.ingest_archival(rows)
        result = {
            "doc_id": doc_id,
            "inserted": inserted,
            "chunks": len(rows),
            "embedding_version": doc.embedding_version,
            "vector_index_used": self.vector_index_used(doc.embedding_version, doc.metric),
        }
        self.core.settle(agent_id, doc.idempotency_key, "ingest_archival", request, result)
        self.core.event(
            agent_id,
            EventKind.ARCHIVAL_INGEST,
            {"doc_id": doc_id, "source": doc.source, **result},
            actor,
            event_id=audit_id(agent_id, "ingest", doc_id, chunks_sha256[:16]),
            idempotency_key=doc.idempotency_key,
            change=footprint.ingest("".join(doc.chunks), {"chunks": len(rows), "written": inserted}),
        )
        return result

    def vector_index_used(self, embedding_version: str, metric: str = "cosine") -> bool:
        """Whether searches of this archival space go through a trained vector index (IVF) rather
        than exact search (too few vectors yet)."""
        space = self._space(metric, embedding_version)
        return bool(space is not None and space.get("kind") == "ivf")

    def _spaces(self, *, fresh: bool = False) -> list[dict[str, Any]]:
        now = self.core.clock()
        if fresh or self._spaces_read is None or now - self._spaces_read[0] > SPACES_TTL_S:
            spaces = self.core.store.health().details.get("vector_spaces") or []
            self._spaces_read = (now, [dict(s) for s in spaces if isinstance(s, Mapping)])
        return self._spaces_read[1]

    def _dimensions(self, *, fresh: bool = False) -> set[int]:
        return {int(s.get("dimension") or 0) for s in self._spaces(fresh=fresh) if s.get("metric") == "cosine"}

    def _space(self, metric: str, version: str) -> dict[str, Any] | None:
        return next(
            (s for s in self._spaces(fresh=True) if (s.get("metric"), s.get("embedding_version")) == (metric, version)),
            None,
        )

    def _check_space(self, agent_id: str, doc: PrecomputedDocument) -> None:
        if len(doc.chunks) != len(doc.embeddings) or not doc.chunks:
            raise ValidationError(
                f"chunks ({len(doc.chunks)}) and embeddings ({len(doc.embeddings)}) must pair up one to one",
                field="embeddings",
            )
        for i, vector in enumerate(doc.embeddings):
            if len(_vector(f"embeddings.{i}", vector)) != doc.dimension:
                raise _mismatch("dimension", f"embeddings.{i} has {len(vector)} numbers", doc.dimension)
        if doc.metric not in ("cosine", "l2"):
            raise ValidationError("metric must be cosine or l2", field="metric")
        parts = doc.embedding_version.split(":")
        if len(parts) < 3 or ":".join(parts[:-2]) != doc.model_id:
            raise _mismatch("embedding_version", doc.embedding_version, f"{doc.model_id}:late:<suffix>")
        if doc.mode != "late" and not self.core.settings.ingest.allow_naive:
            metrics.compliance_violation("late_chunking", "blocked")
            self.core.event(
                agent_id,
                EventKind.COMPLIANCE_VIOLATION,
                {
                    "rule": "late_chunking",
                    "mode": doc.mode,
                    "doc_id": doc.doc_id,
                    "source": doc.source,
                    "blocked": True,
                },
                Actor.SYSTEM,
                event_id=audit_id(agent_id, "compliance", doc.doc_id, doc.embedding_version),
            )
            raise PolicyRefused(
                f"embedding_version {doc.embedding_version!r} is not late-chunked; naive chunking is refused "
                "([ingest] allow_naive)",
                field="embedding_version",
            )
        if self.core.embed is not None:  # this process's model: its dimension is the store's
            mine = len(self.core.vector_of("dimension"))
            if mine != doc.dimension:
                raise _mismatch("dimension", doc.dimension, mine)
        spaces = self._spaces(fresh=True)
        models = {str(s.get("embedding_version", "")).rsplit(":", 2)[0] for s in spaces}
        models.discard("")
        if models and doc.model_id not in models:
            raise _mismatch("model_id", doc.model_id, " or ".join(sorted(models)))
        for space in spaces:
            if space.get("embedding_version") == doc.embedding_version:
                if space.get("metric") != doc.metric:
                    raise _mismatch("metric", doc.metric, space.get("metric"))
                if int(space.get("dimension") or 0) != doc.dimension:
                    raise _mismatch("dimension", doc.dimension, space.get("dimension"))

    def ingest_job(self, agent_id: str, job_id: str) -> IngestJob:
        """An ingestion job's state: queued, running (with chunk progress), done, failed or cancelled."""
        self.core.agent(agent_id)
        if not isinstance(job_id, str) or not job_id.startswith("ing-") or len(job_id) > 64:
            raise ValidationError("not an ingestion job id", field="job_id")
        return self.core.hot.jobs.get(agent_id, job_id)
