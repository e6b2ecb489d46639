"""Recall and archival memory through the façade: hybrid recall search, archival search, and
archival ingestion jobs (queued to the cold path, polled here). Retrieved text carries its taint
marks (:meth:`~vcm.service.core.Core.mark`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from vcm import validation
from vcm.errors import StoreUnavailable, ValidationError, VcmError
from vcm.hotpath.jobs import IngestJob
from vcm.service.core import Core
from vcm.store import validation as store_validation
from vcm.store.audit_names import Actor
from vcm.store.types import ArchivalHit, Page, RecallHit
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


def doc_id_for(text: str) -> str:
    return "doc-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Search:
    """search_recall, search_archival, ingest_archival, ingest_job."""

    def __init__(self, core: Core) -> None:
        self.core = core

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
    ) -> RecallResult:
        """Hybrid (BM25 + message vectors) by default; text when this process has no embedder or
        messages get no vectors (``[recall] vectors`` off). The result says which mode ran.

        ``exclude``: message ids left out of this page (the prompt builder's FIFO); the store is
        asked for that many more (at most the store's limit of 1 000 in all), and such a page has
        no next cursor."""
        self.core.agent(agent_id)
        query = validation.text(query, "query", 10_000)
        if mode not in ("text", "vector", "hybrid"):
            raise ValidationError("mode must be text, vector or hybrid", field="mode")
        fetch = limit
        if exclude:
            store_validation.limit("limit", limit)
            fetch = min(store_validation.MAX_LIMIT, limit + len(exclude))
        if mode != "text" and self.core.embed is not None and self.core.settings.recall.vectors:
            vector = self.core.vector_of(query)
            version = self.core.recall_version() if self.core.recall_version is not None else None
            page = self.core.store.search_recall_hybrid(
                agent_id,
                query,
                vector,
                limit=fetch,
                cursor=cursor,
                since=since,
                until=until,
                mode=mode,
                embedding_version=version,
            )
        else:
            mode = "text"
            page = self.core.store.search_recall(agent_id, query, fetch, cursor, since=since, until=until)
        if exclude:
            left_out = set(exclude)
            kept = [h for h in page.items if h.message.message_id not in left_out][:limit]
            page = Page(kept, None, page.stats)
        # Marks only for the hits returned: a scan per hit is most of a small search's cost.
        return RecallResult(page, mode, [self.core.mark(h.message.content) for h in page.items])

    def search_archival(
        self,
        agent_id: str,
        query: str,
        *,
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
    ) -> ArchivalResult:
        self.core.agent(agent_id)
        query = validation.text(query, "query", 10_000)
        if self.core.embed is None:
            raise ValidationError("archival search needs an embedding model; none is configured", field="query")
        vector = self.core.vector_of(query)
        page = self.core.store.search_archival(agent_id, vector, k, filters=filters, cursor=cursor)
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

    def ingest_job(self, agent_id: str, job_id: str) -> IngestJob:
        """An ingestion job's state: queued, running (with chunk progress), done, failed or cancelled."""
        self.core.agent(agent_id)
        if not isinstance(job_id, str) or not job_id.startswith("ing-") or len(job_id) > 64:
            raise ValidationError("not an ingestion job id", field="job_id")
        return self.core.hot.jobs.get(agent_id, job_id)
