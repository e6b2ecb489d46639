"""The memory service: one façade over the hot state, the store and the cold-path seams.

The HTTP API, the tool executor, the agent loop and the CLI all go through it; they do not
reach into the hot state or the store. It owns what every entry point must do the same way:

* **idempotency**: one record format, kept by the hot state (:meth:`HotState.claim` and the Lua
  mutations), one namespace per agent, checked and recorded atomically;
* **taint marking** of retrieved text (:mod:`vcm.poisoning`): :meth:`mark` and the marks on
  search results, and the refusal of tainted text into working blocks;
* **cursor secrets**: the key of the MACs on result cursors (:meth:`cursor_secret`).

Its collaborators are ports, wired by process entry points: a :class:`~vcm.dispatch.Dispatcher`
for cold-path work (spooling, evictions, archival ingestion jobs) and an ``embed`` function for
query vectors. Nothing here imports Celery or the embedding model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vcm import poisoning, validation
from vcm.context_builder import ContextBuilderOps
from vcm.dispatch import Dispatcher
from vcm.durable import Durability, agent_config
from vcm.entity_graph import EntityGraphOps
from vcm.errors import (
    IdempotencyMismatch,
    NotFound,
    PinLimitExceeded,
    StoreUnavailable,
    TaintedContent,
    TokenBudgetExceeded,
    Unauthorized,
    ValidationError,
    VcmError,
)
from vcm.facts.capture import capture
from vcm.hotpath.context import AssembledContext, assemble
from vcm.hotpath.jobs import IngestJob
from vcm.hotpath.state import HotState
from vcm.hotpath.tokens import TokenCounter
from vcm.hotpath.turns import Turn
from vcm.knowledge import KnowledgeOps
from vcm.lifecycle import LifecycleOps
from vcm.obs import audit, footprint, metrics
from vcm.replicas import ReplicaOps
from vcm.store import validation as store_validation
from vcm.store.port import MemoryStore
from vcm.store.types import ArchivalHit, MemoryEvent, Page, RecallHit, StoredMessage
from vcm.types import AgentInfo, AppendResult, BatchInfo, Block, BlockResult, Gauges, IngestRequest

R = TypeVar("R")
log = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Any]  # texts -> array of unit vectors (n, dim)


@dataclass(frozen=True)
class RecallResult:
    page: Page[RecallHit]
    mode: str
    # ``tainted`` / ``taint_reasons`` of each hit, in page order (see MemoryService.mark).
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


# Query vectors a service keeps (see MemoryService.vector_of).
QUERY_VECTORS = 64


class MemoryService(KnowledgeOps, EntityGraphOps, ContextBuilderOps, LifecycleOps, ReplicaOps):
    def __init__(
        self,
        hot: HotState,
        store: MemoryStore,
        dispatcher: Dispatcher,
        *,
        embed: Embed | None = None,
        recall_version: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hot = hot
        self.store = store
        self.dispatcher = dispatcher
        self.embed = embed
        # The version the workers embed messages under (model and context mode): recall compares
        # query vectors only with those. Without it the store picks the agent's most used version,
        # which after a model change belongs to the old model.
        self.recall_version = recall_version
        self.clock = clock
        self.settings = hot.settings
        self._taint = poisoning.Filter.of(self.settings.poisoning)
        self._cursor_secret: bytes | None = None
        # The store is the source of truth for agents; Redis is rebuilt from it (vcm.durable).
        self.durable = Durability(hot, store)
        # Vectors of recent query texts: one prompt build searches facts twice and recall once
        # with the same text, and a model call costs 15-70 ms where the lookup costs nothing.
        self._vectors: OrderedDict[tuple[int, str], list[float]] = OrderedDict()

    # --- agents -----------------------------------------------------------------------------
    def create_agent(
        self,
        agent_id: str,
        *,
        model: str | None = None,
        system_prompt: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        actor: str = "system",
    ) -> AgentInfo:
        self.rebuild(agent_id)  # an agent known to the store answers as it was, not anew
        info = self.hot.create_agent(agent_id, model=model, system_prompt=system_prompt, tools=tools)
        self.durable.agent_created(agent_id, agent_config(info.model, system_prompt, tools))
        self._event(
            agent_id,
            "agent_created",
            {"model": info.model, "window": info.window},
            actor,
            event_id=f"{agent_id}:created",
            change={"op": "agent_create", "window": info.window, "system_chars": len(system_prompt)},
        )
        return info

    def agent(self, agent_id: str) -> AgentInfo:
        return self._hot(agent_id, self.hot.agent, agent_id)

    def agents(self) -> list[str]:
        """Every agent the store knows, and any the hot state holds that predate their record."""
        return sorted({r.agent_id for r in self.store.list_agents()} | set(self.hot.agents()))

    def _hot(self, agent_id: str, call: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """A hot-state call for one agent; when the agent is missing from Redis (restart in
        embedded mode, a flushed or replaced Redis) but known to the store, its hot state is
        rebuilt and the call made again. UNAUTHORIZED counts as missing when the token is checked
        in the call itself: a flushed Redis lost the token's hash too."""
        try:
            return call(*args, **kwargs)
        except (NotFound, Unauthorized):
            if not self.rebuild(agent_id):
                raise
        return call(*args, **kwargs)

    def rebuild(self, agent_id: str) -> bool:
        """Rebuild the agent's hot state from the store if Redis lost it (vcm.durable); a batch
        the rebuilt FIFO needs (it was over the flush line) is handed to the cold path."""
        rebuilt = self.durable.rebuild(agent_id)
        if rebuilt is None:
            return False
        if rebuilt.pressure_message_id:
            self.durable.appended(agent_id, [rebuilt.pressure_message_id], 0)
        if rebuilt.batch is not None:
            self._batch_begun(agent_id, rebuilt.batch, rebuilt.total, False, "system")
            metrics.flush("rebuild")
        return True

    def rebuild_missing(self) -> list[str]:
        """Rebuild every stored agent whose hot state is missing (at start)."""
        return [agent_id for agent_id in self.durable.missing() if self.rebuild(agent_id)]

    # --- messages -----------------------------------------------------------------------------
    def append(
        self,
        agent_id: str,
        role: str,
        content: str,
        *,
        name: str | None = None,
        pinned: bool = False,
        metadata: Mapping[str, Any] | None = None,
        tool_call_id: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        idempotency_key: str | None = None,
        actor: str = "system",
        token_sha256: str | None = None,
    ) -> AppendResult:
        """Append one message. ``token_sha256``: the caller's agent token digest, checked in the
        append's own Lua call (see :meth:`HotState.append`).

        An assistant message's ``[MEMORY:type]`` / ``[STATE:key]`` tags (:mod:`vcm.facts.capture`)
        are kept as facts / state pointing at the message, and the message enters the context
        without them."""
        captured = capture(content) if role == "assistant" and isinstance(content, str) and "[" in content else None
        if captured is not None and captured.any:
            content = captured.stripped
            metadata = {
                **(dict(metadata) if isinstance(metadata, Mapping) else {}),
                "memory_tags": {"facts": len(captured.memories), "state": [k for k, _ in captured.states]},
            }
        with self._refusals_audited(agent_id, "append", actor, idempotency_key):
            res = self._hot(
                agent_id,
                self.hot.append,
                agent_id,
                role,
                content,
                name=name,
                pinned=pinned,
                metadata=metadata,
                tool_call_id=tool_call_id,
                tool_calls=tool_calls,
                idempotency_key=idempotency_key,
                actor=actor,
                token_sha256=token_sha256,
            )
        # Before the caller hears of it: the store holds the message (write-through) and the id
        # floor stays ahead of the sequence. A replay writes it too: its first attempt may have
        # died before doing so.
        ids = [res.message_id] + ([res.pressure_message_id] if res.pressure_message_id else [])
        self.durable.appended(agent_id, ids, res.seq, known=[res.message] if res.message else ())
        if res.replayed:
            # The first request may have died between its Lua call and its follow-ups. Hand its
            # batch over again with the flush row (both idempotent); a missed spool is the
            # sweeper's to catch (reconciliation), so a plain retry dispatches nothing.
            if res.batch is not None:
                self._batch_begun(agent_id, res.batch, res.total, res.target_unreachable, actor, idempotency_key)
            return res
        if captured is not None and captured.any:
            self.keep_captured(agent_id, captured, res.message_id, actor)
        # The append's audit row is written by the spool task with the message (vcm.tasks.spool),
        # so the hot path stays one Redis round trip.
        if res.gauges is not None:
            self._gauges_seen(agent_id, res.gauges)
        self.dispatcher.spool(agent_id, ids)
        if res.action == "warning":
            metrics.warning()
            self._event(
                agent_id,
                "memory_pressure",
                {"total": res.total, "message_id": res.pressure_message_id},
                actor,
                event_id=f"{agent_id}:pressure:{res.pressure_message_id}",
            )
        if res.batch is not None:
            self._batch_begun(agent_id, res.batch, res.total, res.target_unreachable, actor)
            metrics.flush("threshold")
        return res

    def evict(
        self, agent_id: str, count: int, *, idempotency_key: str | None = None, actor: str = "system"
    ) -> tuple[int, BatchInfo | None]:
        with self._refusals_audited(agent_id, "evict", actor, idempotency_key):
            total, batch = self._hot(agent_id, self.hot.evict_oldest, agent_id, count, idempotency_key=idempotency_key)
        if batch is not None:
            self._batch_begun(agent_id, batch, total, False, actor, idempotency_key)
            metrics.flush("request")
        return total, batch

    def _batch_begun(
        self,
        agent_id: str,
        batch: BatchInfo,
        total: int,
        unreachable: bool,
        actor: str,
        idempotency_key: str | None = None,
    ) -> None:
        self.dispatcher.evict(agent_id, batch.id)
        row = audit.flush_event(
            agent_id,
            batch.id,
            messages=batch.count,
            tokens=batch.tokens,
            total_after=total,
            actor=actor,
            created_at=self.clock(),
            idempotency_key=idempotency_key,
        )
        self._write_event(row)
        payload = {"batch_id": batch.id, "messages": batch.count, "tokens": batch.tokens, "total_after": total}
        if unreachable:
            # The unevictable parts (system, blocks, pinned, summary) alone exceed the target.
            self._event(agent_id, "target_unreachable", payload, actor, event_id=f"{agent_id}:unreachable:{batch.id}")

    def write_recall(
        self, agent_id: str, content: str, *, role: str = "assistant", idempotency_key: str, actor: str = "system"
    ) -> StoredMessage:
        """A note straight into recall memory, never into the context window.

        The key is claimed before anything is written (one atomic check-and-record in the hot
        state), so two concurrent notes under one key cannot both succeed: the second gets the
        first's note, or IDEMPOTENCY_MISMATCH when its text differs."""
        validation.role(role)
        content = validation.text(content, "content", self.settings.budget.max_content_chars)
        validation.idempotency_key(idempotency_key)
        info = self.agent(agent_id)
        # The id comes from the idempotency key, so the store's idempotent spool dedupes retries.
        message_id = "r" + hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()[:20]
        request = {"role": role, "content_sha256": hashlib.sha256(content.encode("utf-8")).hexdigest()}
        claimed, replayed = self.hot.claim(
            agent_id, idempotency_key, "write_recall", request, {"message_id": message_id}
        )
        message_id = str(claimed["message_id"])
        existing = self.store.get_messages(agent_id, [message_id])
        if existing:
            # The claim expires after idempotency_ttl_s; the note itself does not.
            if (existing[0].role, existing[0].content) != (role, content):
                raise IdempotencyMismatch("this idempotency key was already used for a different note")
            return existing[0]
        # First use, or a replay whose first attempt died before its write: write it (idempotent).
        _, seq = self.hot.reserve_message_id(agent_id)
        tokens = self.hot.counter(info.model).message(content)
        now = self.clock()
        ttl = self.settings.maintenance.recall_ttl_s  # notes are recall like any message: same retention
        msg = StoredMessage(
            agent_id,
            message_id,
            seq,
            role,
            content,
            tokens,
            now,
            metadata={"kind": "recall_note"},
            expires_at=now + ttl if ttl else None,
        )
        self.store.spool_messages([msg])
        self._event(
            agent_id,
            "recall_write",
            {"message_id": message_id, "tokens": tokens, **({"replayed": True} if replayed else {})},
            actor,
            event_id=f"{agent_id}:recall:{message_id}",
            idempotency_key=idempotency_key,
            change=footprint.recall_note(content, tokens, role=role),
        )
        return self.store.get_messages(agent_id, [message_id])[0]

    # --- working blocks --------------------------------------------------------------------
    def put_block(
        self,
        agent_id: str,
        block_id: str,
        content: str,
        *,
        role: str = "working",
        pinned: bool = False,
        expected_rev: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        actor: str = "system",
        justification: str | None = None,
    ) -> BlockResult:
        """Create or edit a working block. Content that reads like instructions to the model
        (:mod:`vcm.poisoning`) is refused with TAINTED_CONTENT unless a ``justification`` says
        why it belongs there, and with VALIDATION_ERROR when that justification is too thin to
        say anything (:func:`vcm.poisoning.justification_problem`); the justification is kept in
        the audit row.

        The check runs on the content itself at put time, whatever its source: retrieved text
        copied into a block is caught however it travelled, and no per-agent state can be
        bypassed or go stale.
        """
        reason = (justification or "").strip() if isinstance(justification, str) else ""
        if justification is not None and not isinstance(justification, str):
            raise ValidationError("justification must be a string", field="justification")
        verdict = self._taint.scan(content) if isinstance(content, str) else poisoning.CLEAN
        if verdict.tainted and not reason:
            raise TaintedContent(
                "this content looks like instructions to the model (possible memory poisoning: "
                f"{', '.join(verdict.reasons)}); it is not promoted into a working block without a "
                "justification saying why it belongs there",
                field="justification",
                reasons=list(verdict.reasons),
            )
        # Only where it lets tainted text in: elsewhere a justification is a note for the audit row.
        if verdict.tainted and (thin := poisoning.justification_problem(reason)):
            raise ValidationError(thin, field="justification", reasons=list(verdict.reasons))
        with self._refusals_audited(agent_id, "put_block", actor, idempotency_key):
            res = self._hot(
                agent_id,
                self.hot.put_block,
                agent_id,
                block_id,
                content,
                role=role,
                pinned=pinned,
                expected_rev=expected_rev,
                metadata=metadata,
                idempotency_key=idempotency_key,
            )
        # Replays too: the first attempt may have died before its copy reached the store.
        self.durable.block_written(agent_id, block_id)
        # Replays too: the first attempt may have died before publishing, and a follower given the
        # same change twice only reads the block once more.
        self._changed(agent_id, "block", block_id, res.rev)
        if not res.replayed:
            before = res.previous
            details: dict[str, Any] = {
                "block_id": block_id,
                "rev": res.rev,
                "tokens": res.tokens,
                "pinned": pinned,
                "previous_rev": expected_rev,
            }
            if verdict.tainted:
                details["tainted"] = list(verdict.reasons)
            if reason:
                details["justification"] = reason[:1000]
            self._event(
                agent_id,
                "core_write",
                details,
                actor,
                event_id=f"{agent_id}:core:{block_id}:{res.rev}",
                idempotency_key=idempotency_key,
                change=footprint.block(
                    before.content if before is not None else None,
                    content,
                    before_rev=before.rev if before is not None else None,
                    after_rev=res.rev,
                    tokens_before=before.tokens if before is not None else 0,
                    tokens_after=res.tokens,
                ),
            )
            if res.action == "warning":
                metrics.warning()
            if res.batch is not None:
                self._batch_begun(agent_id, res.batch, res.total, False, actor, idempotency_key)
                metrics.flush("threshold")
        elif res.batch is not None:  # a replay: the first request may have died before its follow-ups
            self._batch_begun(agent_id, res.batch, res.total, False, actor, idempotency_key)
        return res

    def delete_block(
        self,
        agent_id: str,
        block_id: str,
        expected_rev: str,
        *,
        idempotency_key: str | None = None,
        actor: str = "system",
    ) -> BlockResult:
        res = self._hot(
            agent_id, self.hot.delete_block, agent_id, block_id, expected_rev, idempotency_key=idempotency_key
        )
        if res.deleted:
            self.durable.block_deleted(agent_id, block_id)
        if res.deleted:  # replays too, as for put_block
            self._changed(agent_id, "block", block_id, None, "delete")
        if not res.replayed:
            before = res.previous
            self._event(
                agent_id,
                "core_delete",
                {"block_id": block_id, "previous_rev": expected_rev},
                actor,
                event_id=f"{agent_id}:core:{block_id}:del:{expected_rev}",
                idempotency_key=idempotency_key,
                change=footprint.block(
                    before.content if before is not None else "",
                    None,
                    before_rev=expected_rev,
                    after_rev=None,
                    tokens_before=before.tokens if before is not None else 0,
                    tokens_after=0,
                ),
            )
        return res

    def get_block(self, agent_id: str, block_id: str) -> Block:
        return self._hot(agent_id, self.hot.get_block, agent_id, block_id)

    def list_blocks(self, agent_id: str) -> list[Block]:
        return self._hot(agent_id, self.hot.list_blocks, agent_id)

    # --- context ------------------------------------------------------------------------------
    def context(self, agent_id: str, *, token_sha256: str | None = None) -> AssembledContext:
        """The assembled main context; ``token_sha256`` as in :meth:`append`, read in the snapshot's
        own transaction."""
        assembled = assemble(self._hot(agent_id, self.hot.snapshot, agent_id, token_sha256=token_sha256))
        self._gauges_seen(agent_id, assembled.gauges)
        return assembled

    # --- search -------------------------------------------------------------------------------
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
        self.agent(agent_id)
        query = validation.text(query, "query", 10_000)
        if mode not in ("text", "vector", "hybrid"):
            raise ValidationError("mode must be text, vector or hybrid", field="mode")
        fetch = limit
        if exclude:
            store_validation.limit("limit", limit)
            fetch = min(store_validation.MAX_LIMIT, limit + len(exclude))
        if mode != "text" and self.embed is not None and self.settings.recall.vectors:
            vector = self.vector_of(query)
            version = self.recall_version() if self.recall_version is not None else None
            page = self.store.search_recall_hybrid(
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
            page = self.store.search_recall(agent_id, query, fetch, cursor, since=since, until=until)
        if exclude:
            left_out = set(exclude)
            kept = [h for h in page.items if h.message.message_id not in left_out][:limit]
            page = Page(kept, None, page.stats)
        # Marks only for the hits returned: a scan per hit is most of a small search's cost.
        return RecallResult(page, mode, [self.mark(h.message.content) for h in page.items])

    def vector_of(self, text: str) -> list[float]:
        """The embedding of one text, from the last few asked for when it is among them."""
        assert self.embed is not None
        key = (id(self.embed), text)  # a swapped embedder never answers from the old one's vectors
        found = self._vectors.get(key)
        if found is None:
            found = [float(x) for x in self.embed([text])[0]]
            self._vectors[key] = found
            while len(self._vectors) > QUERY_VECTORS:
                self._vectors.popitem(last=False)
        return found

    def search_archival(
        self,
        agent_id: str,
        query: str,
        *,
        k: int = 10,
        filters: Mapping[str, Any] | None = None,
        cursor: str | None = None,
    ) -> ArchivalResult:
        self.agent(agent_id)
        query = validation.text(query, "query", 10_000)
        if self.embed is None:
            raise ValidationError("archival search needs an embedding model; none is configured", field="query")
        vector = self.vector_of(query)
        page = self.store.search_archival(agent_id, vector, k, filters=filters, cursor=cursor)
        return ArchivalResult(page, [self.mark(h.chunk.text) for h in page.items])

    def ingest_archival(
        self,
        agent_id: str,
        text: str,
        *,
        doc_id: str | None = None,
        source: str = "",
        metadata: Mapping[str, Any] | None = None,
        actor: str = "system",
        idempotency_key: str | None = None,
    ) -> IngestJob:
        """Queue a document for archival memory; returns its job at once (poll :meth:`ingest_job`).

        Idempotent twice over: the same document always maps to the same job (queued once; a
        failed job is queued again), and an idempotency key reused for a different document
        answers IDEMPOTENCY_MISMATCH without queueing anything."""
        self.agent(agent_id)
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
            self.hot.claim(agent_id, idempotency_key, "ingest_archival", request, {"job_id": job_id})
        job, opened = self.hot.jobs.open(agent_id, job_id, doc, self.clock())
        if not opened:
            return job
        try:
            self.dispatcher.ingest(
                IngestRequest(agent_id, job_id, doc, text, source, meta, actor=actor, idempotency_key=idempotency_key)
            )
        except VcmError as exc:
            self.hot.jobs.failed(agent_id, job_id, exc.to_dict(), self.clock())
            raise
        except Exception as exc:  # the document is nowhere else: the caller must hear of it
            self.hot.jobs.failed(agent_id, job_id, {"code": "STORE_UNAVAILABLE", "message": str(exc)}, self.clock())
            raise StoreUnavailable("could not queue the document for ingestion; retry shortly") from exc
        # An in-process dispatcher may have finished the job already.
        return self.hot.jobs.get(agent_id, job_id)

    def ingest_job(self, agent_id: str, job_id: str) -> IngestJob:
        """An ingestion job's state: queued, running (with chunk progress), done or failed."""
        self.agent(agent_id)
        if not isinstance(job_id, str) or not job_id.startswith("ing-") or len(job_id) > 64:
            raise ValidationError("not an ingestion job id", field="job_id")
        return self.hot.jobs.get(agent_id, job_id)

    def claim(
        self, agent_id: str, idempotency_key: str, op: str, request: Mapping[str, Any], result: Mapping[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """An entry point's own idempotent operation: the first result under the key, and whether
        this is a replay (the hot state's one record format; IDEMPOTENCY_MISMATCH on reuse)."""
        self.agent(agent_id)
        return self.hot.claim(agent_id, idempotency_key, op, request, result)

    # --- what entry points read without reaching into the tiers ---------------------------------
    def settle(
        self, agent_id: str, idempotency_key: str, op: str, request: Mapping[str, Any], result: Mapping[str, Any]
    ) -> None:
        """Record the final result of a claimed keyed operation (retries answer with it)."""
        self.hot.settle(agent_id, idempotency_key, op, request, result)

    def turn(self, agent_id: str) -> Turn:
        """Hold the agent's chat turn (one at a time across processes; see :mod:`vcm.hotpath.turns`):
        ``with service.turn(agent):`` or ``release()`` when the turn ends."""
        self.agent(agent_id)
        return self.hot.turns.acquire(agent_id)

    def mark(self, text: str) -> dict[str, Any]:
        """``tainted`` / ``taint_reasons`` for retrieved text that reads like instructions to the
        model: the model sees the mark next to the text, and :meth:`put_block` refuses such text
        without a justification."""
        return self._taint.scan(text).fields()

    def scan(self, text: str) -> poisoning.Verdict:
        return self._taint.scan(text)

    def cursor_secret(self) -> bytes:
        """The key of the MACs on result cursors, shared by every process of the deployment."""
        if self._cursor_secret is None:
            self._cursor_secret = self.hot.cursor_secret()
        return self._cursor_secret

    def counter(self, model: str | None = None) -> TokenCounter:
        """The token counter of a model (default: the settings' default model)."""
        return self.hot.counter(model or self.settings.default_model)

    def gauges(self, agent_id: str) -> Gauges:
        return self._hot(agent_id, self.hot.gauges, agent_id)

    def pending_batches(self, agent_id: str) -> list[int]:
        """The agent's eviction batches begun and not yet finished: its cold-path backlog."""
        return self._hot(agent_id, self.hot.pending_batches, agent_id)

    def fifo_ids(self, agent_id: str) -> list[str]:
        """The ids of the messages in the agent's FIFO, oldest first."""
        return [m.id for m in self._hot(agent_id, self.hot.snapshot, agent_id).fifo]

    def agent_stats(self, agent_id: str) -> dict[str, Any]:
        """One agent at a glance (seed 004's /stats): tokens by layer of its main context, what
        the store holds of it, evictions, facts, pending cold-path work and its last activity."""
        snap = self._hot(agent_id, self.hot.snapshot, agent_id)
        ctx = assemble(snap)
        layers = ctx.layer_tokens()
        counts = self.store.stats(agent_id)
        last = max((m.created_at for m in snap.fifo), default=None)
        return {
            "agent_id": agent_id,
            "model": self.agent(agent_id).model,
            "window": ctx.gauges.window,
            "tokens": ctx.gauges.total,
            "tokens_by_layer": layers,
            "fifo_messages": len(snap.fifo),
            "messages_stored": int(counts.get("messages", 0)),
            "archival_chunks": int(counts.get("archival_chunks", 0)),
            "evictions": int(counts.get("committed_batches", 0)),
            "pending_batches": len(self.hot.pending_batches(agent_id)),
            "facts": self.fact_stats(agent_id),
            "state_keys": len(self.list_state(agent_id)),
            "last_activity": last,
        }

    @property
    def redis(self) -> Any:
        """The hot state's Redis client, for components that keep hot state of their own under
        the same keys module (token auth, heartbeat chains, scrape-time metrics)."""
        return self.hot.redis

    def health(self) -> dict[str, Any]:
        """Whether the hot state answers, and the store's own health report."""
        try:
            redis_ok = bool(self.hot.redis.ping())
        except Exception:
            redis_ok = False
        try:
            store = self.store.health()
            store_ok, backend, details = store.ok, store.backend, dict(store.details)
        except Exception as exc:  # any failure means "not healthy"; the probe itself must not fail
            store_ok, backend, details = False, "unknown", {"error": type(exc).__name__}
        return {
            "ok": redis_ok and store_ok,
            "redis": redis_ok,
            "store": store_ok,
            "store_backend": backend,
            "store_details": details,
        }

    def stats(self, agent_id: str | None = None) -> dict[str, Any]:
        """The store's counts and index state (one agent's, or the deployment's)."""
        return dict(self.store.stats(agent_id))

    # --- events -------------------------------------------------------------------------------
    def events(
        self,
        agent_id: str | None,
        kinds: Sequence[str] | None = None,
        *,
        since: float | None = None,
        until: float | None = None,
        actor: str | None = None,
        idempotency_key: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[MemoryEvent]:
        return self.store.query_events(
            agent_id,
            kinds,
            since=since,
            until=until,
            actor=actor,
            idempotency_key=idempotency_key,
            limit=limit,
            cursor=cursor,
        )

    def record_event(
        self, agent_id: str, kind: str, payload: Mapping[str, Any], *, event_id: str, actor: str = "system"
    ) -> None:
        """An audit row for something that happened outside the service's own writes (a heartbeat
        chain ending). Idempotent by ``event_id``; a store failure is logged, never raised."""
        self._event(agent_id, kind, payload, actor, event_id=event_id)

    def _event(
        self,
        agent_id: str,
        kind: str,
        payload: Mapping[str, Any],
        actor: str,
        *,
        event_id: str,
        idempotency_key: str | None = None,
        change: footprint.Footprint | None = None,
    ) -> None:
        self._write_event(
            audit.event(
                agent_id,
                kind,
                change,
                actor=actor,
                event_id=event_id,
                idempotency_key=idempotency_key,
                created_at=self.clock(),
                details=payload,
            )
        )

    @contextmanager
    def _refusals_audited(self, agent_id: str, op: str, actor: str, idempotency_key: str | None) -> Iterator[None]:
        """A write the budget refused leaves an ``error`` row (seed 000: budget violations are
        logged to memory_events) with the code and the numbers, never the content; a retry under
        the same key adds no second row."""
        try:
            yield
        except (TokenBudgetExceeded, PinLimitExceeded) as exc:
            numbers = {k: v for k, v in exc.details.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            suffix = idempotency_key or uuid.uuid4().hex
            self._event(
                agent_id,
                "error",
                {"code": str(exc.code), "op": op, **numbers},
                actor,
                event_id=f"{agent_id}:error:{op}:{hashlib.sha256(suffix.encode()).hexdigest()[:24]}",
                idempotency_key=idempotency_key,
            )
            raise

    def _gauges_seen(self, agent_id: str, gauges: Gauges) -> None:
        m = self.settings.metrics
        metrics.context(agent_id, gauges, per_agent=m.per_agent, max_agents=m.max_agent_series)

    def _write_event(self, row: MemoryEvent) -> None:
        try:
            self.store.append_event(row)
        except Exception:  # the write it describes already happened; an audit gap must not fail it
            log.exception("could not record %s event for %s", row.kind, row.agent_id)
