"""The executor's write tools: working blocks, the conversation queue, recall notes, structured
memory writes under their idempotency keys, archival ingest."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from vcm import validation
from vcm.errors import Conflict, ValidationError, VcmError, from_payload
from vcm.service.search import PrecomputedDocument
from vcm.tools import paging, results
from vcm.tools.calls import (
    Reply,
    ToolCall,
    batch_fields,
    mark_replayed,
)
from vcm.tools.pager import Pager

# How long a keyed write's claim stays the running call's: a retry within it is CONFLICT, one after
# it takes over (a structured-memory write takes milliseconds; the first call died).
PENDING_LEASE_S = 30.0
# seed 000's ingest_archival: a document the caller chunked and embedded
PRECOMPUTED = ("chunks", "embeddings", "dimension", "metric", "embedding_version", "model_id")


class WriteHandlers(Pager):
    """store_core, fetch_core, append_fifo, evict_fifo, write_recall, ingest_archival and the keyed
    structured-memory writes (a base of :class:`~vcm.tools.executor.ToolExecutor`)."""

    # --- working blocks ---------------------------------------------------------------------------
    def _store_core(self, call: ToolCall) -> Reply:
        a, agent = call.args, call.agent.agent_id
        block_id, key, rev = a["block_id"], a["idempotency_key"], a.get("_rev")
        if a.get("delete"):
            if rev is None:
                raise ValidationError("deleting a block needs its _rev (from fetch_core)", field="_rev")
            if "content" in a:
                raise ValidationError("delete takes no content; send either delete or content", field="content")
            res = self.service.delete_block(agent, block_id, rev, idempotency_key=key, actor=call.actor)
            return Reply(mark_replayed({"block_id": block_id, "deleted": True, "_rev": None}, res.replayed))
        content = a.get("content")
        if content is None:
            raise ValidationError("content is required to create or edit a block", field="content")
        justification = str(a.get("justification", "")).strip()
        if results.VCM_MARK in content and not justification:
            raise ValidationError(
                f"this content carries text vcm wrote into your context ({results.VCM_MARK} ...); say why it "
                "belongs in a working block with justification, or write it in your own words",
                field="justification",
            )
        role, pinned = a.get("role"), a.get("pinned")
        if "policy" in a:  # seed 000's name for pinning
            if pinned is not None:
                raise ValidationError("send policy or pinned, not both", field="policy")
            pinned = a["policy"] == "pinned"
        if rev is not None and (role is None or pinned is None):
            current = self.service.get_block(agent, block_id)  # an edit keeps what it does not change
            role = current.role if role is None else role
            pinned = current.pinned if pinned is None else pinned
        res = self.service.put_block(
            agent,
            block_id,
            content,
            role=role or "working",
            pinned=bool(pinned),
            expected_rev=rev,
            metadata={"justification": justification} if justification else None,
            idempotency_key=key,
            actor=call.actor,
            justification=justification or None,
        )
        body = {
            "block_id": res.block_id,
            "_rev": res.rev,
            "token_estimate": res.tokens,
            "tokens": res.tokens,
            "action": res.action,
        }
        return Reply(mark_replayed(body | batch_fields(res.batch), res.replayed))

    def _fetch_core(self, call: ToolCall) -> Reply:
        agent, block_id = call.agent.agent_id, call.args.get("block_id")
        budget = self._page_budget(agent)
        cursor = call.args.get("cursor")
        bound = paging.scope(agent, "core", block_id)
        if block_id is not None:
            blocks = [self.service.get_block(agent, validation.block_id(block_id))]
        else:
            after = self._position(cursor, bound).store_cursor if cursor else None
            blocks = [b for b in self.service.list_blocks(agent) if after is None or b.id > after]
        # Keyset paging by block id: blocks created meanwhile sort in or out, never repeat.
        afters = [paging.Position(b.id) for b in blocks[:-1]] + [None]
        body = self._page("core", [results.block_item(b) for b in blocks], afters, None, budget, bound, call)
        if block_id is not None and len(body.get("blocks", ())) == 1:
            # One block reads as seed 000's result: block_id, content, _rev, token_estimate.
            (block,) = body.pop("blocks")
            body = block | {"token_estimate": block["tokens"]} | body
            body.pop("next_cursor", None)
        return Reply(body)

    # --- conversation -------------------------------------------------------------------------------
    def _append_fifo(self, call: ToolCall) -> Reply:
        a = call.args
        if a["role"] == "tool":
            raise ValidationError(
                "role tool is reserved for tool results, which answer a tool call; use assistant or system",
                field="role",
            )
        if ("message" in a) == ("content" in a):
            where = "message" if "message" in a else "content"
            raise ValidationError("send the text as message or as content (one of them)", field=where)
        res = self.service.append(
            call.agent.agent_id,
            a["role"],
            a["message"] if "message" in a else a["content"],
            pinned=bool(a.get("pinned", False)),
            idempotency_key=a["idempotency_key"],
            actor=call.actor,
        )
        body = {"message_id": res.message_id, "token_estimate": res.tokens, "tokens": res.tokens, "action": res.action}
        if res.pressure_message_id:
            body["memory_pressure"] = True
        return Reply(mark_replayed(body | batch_fields(res.batch), res.replayed))

    def _evict_fifo(self, call: ToolCall) -> Reply:
        a, agent = call.args, call.agent.agent_id
        summarize = a.get("summarize", True)
        total, batch = self.service.evict(
            agent,
            a.get("count"),
            target_tokens=a.get("target_tokens"),
            summarize=summarize,
            idempotency_key=a["idempotency_key"],
            actor=call.actor,
        )
        gauges = self.service.gauges(agent)
        body: dict[str, Any] = {
            "evicted_count": 0 if batch is None else batch.count,
            # The summary as the context holds it now: an eviction's new summary replaces the
            # batch's placeholder once the cold path folded it in (summary_pending until then).
            "new_summary_tokens": gauges.summary,
            "after_occupancy": round(total / gauges.window, 4),
            "after_tokens": total,
        }
        if batch is None:
            return Reply(body | {"note": "nothing to evict: the context is within the target, or the queue holds "
                                 "only pinned messages"})  # fmt: skip
        pending = batch.id in self.service.pending_batches(agent)
        body |= {"batch_id": batch.id, "tokens_freed": batch.tokens, "summarized": bool(summarize)}
        return Reply(body | ({"summary_pending": True} if pending else {}))

    def _keyed(self, call: ToolCall, name: str, run: Callable[..., dict[str, Any]]) -> Reply:
        """A structured-memory write under its idempotency key: a retry answers as the first call
        did (its body is kept with the key) and changes nothing.

        The key is claimed before the write, marked pending with the time: a retry arriving while
        the first call still runs is CONFLICT (retry shortly) rather than a second write; one
        arriving after ``PENDING_LEASE_S`` takes over (the first died between its claim and its
        answer). A call refused with a coded error releases the key, so its corrected retry can
        use it."""
        a = call.args
        request = {k: v for k, v in a.items() if k not in ("idempotency_key", "request_heartbeat")}
        agent_id, key = call.agent.agent_id, a["idempotency_key"]
        now = self.service.core.clock()
        first, replayed = self.service.claim(agent_id, key, name, request, {"pending": True, "at": now})
        if replayed and "body" in first:
            return Reply(mark_replayed(dict(first["body"]), True))
        if replayed and now - float(first.get("at", 0.0)) < PENDING_LEASE_S:
            raise Conflict(
                "a call with this idempotency key is still running; retry it shortly for its answer",
                retry_after_s=PENDING_LEASE_S,
            )
        try:
            body = run(self.service, agent_id, a, call.actor)
        except VcmError:
            self.service.release(agent_id, key, name, request)
            raise
        self.service.settle(agent_id, key, name, request, {"body": body})
        return Reply(body)

    def _write_recall(self, call: ToolCall) -> Reply:
        a = call.args
        if ("entries" in a) == ("content" in a):
            raise ValidationError("send entries (several notes) or content (one note)", field="entries")
        if "entries" in a:
            if "role" in a:
                raise ValidationError("with entries, give each entry its role", field="role")
            notes = self.service.write_recall_entries(
                call.agent.agent_id, a["entries"], idempotency_key=a["idempotency_key"], actor=call.actor
            )
        else:
            notes = [
                self.service.write_recall(
                    call.agent.agent_id,
                    a["content"],
                    role=a.get("role", "assistant"),
                    idempotency_key=a["idempotency_key"],
                    actor=call.actor,
                )
            ]
        ids = [n.message_id for n in notes]
        body: dict[str, Any] = {"inserted_ids": ids, "total_tokens": sum(n.tokens for n in notes)}
        if "content" in a:  # the one note's fields, as before entries existed
            body |= {"message_id": ids[0], "tokens": notes[0].tokens}
        return Reply(body | {"stored_in": "recall"})

    # --- archival ingest ----------------------------------------------------------------------------
    def _ingest_archival(self, call: ToolCall) -> Reply:
        """Queues the document and returns its job; the document is searchable once the job is
        done. The same key and document replay the first job; another document under the key is
        IDEMPOTENCY_MISMATCH (both kept by the service, as for every entry point)."""
        a, agent = call.args, call.agent.agent_id
        precomputed = [k for k in PRECOMPUTED if k in a]
        if precomputed:
            return self._ingest_chunks(call, precomputed)
        if "text" not in a:
            raise ValidationError("send the document as text, or as chunks with their embeddings", field="text")
        job = self.service.ingest_archival(
            agent,
            a["text"],
            doc_id=a.get("doc_id"),
            source=a.get("source", ""),
            metadata=a.get("metadata"),
            actor=call.actor,
            idempotency_key=a["idempotency_key"],
        )
        # Compact for the model: the job's identity and progress, and the result's counts flattened
        # in when done.
        body: dict[str, Any] = {"job_id": job.job_id, "doc_id": job.doc_id, "status": job.status}
        if job.status == "done":
            body |= {k: v for k, v in (job.result or {}).items() if k not in body}
            body |= {"inserted": body.get("written", 0), "vector_index_used": self._index_used(body)}
        elif job.status == "failed":  # the job ran inline and failed: report it as this call's error
            raise from_payload(job.error or {"code": "INTERNAL_ERROR", "message": "ingestion failed"})
        else:
            body |= {"chunks_done": job.chunks_done, "chunks_total": job.chunks_total}
            body["note"] = "queued for the ingest workers; search_archival finds it once status is done"
            body |= {"inserted": 0, "vector_index_used": False}
        return Reply(body)

    def _ingest_chunks(self, call: ToolCall, given: list[str]) -> Reply:
        """Seed 000's form: the caller's chunks and embeddings, stored now."""
        a = call.args
        missing = [k for k in PRECOMPUTED if k not in a]
        if missing or "text" in a:
            where = missing[0] if missing else "text"
            raise ValidationError(
                f"chunks come with {', '.join(PRECOMPUTED)} (and no text); {where} is "
                + ("missing" if missing else "extra"),
                field=where,
            )
        doc = PrecomputedDocument(
            doc_id=a.get("doc_id") or "doc-" + hashlib.sha256("\x1f".join(a["chunks"]).encode()).hexdigest()[:16],
            chunks=a["chunks"],
            embeddings=a["embeddings"],
            dimension=a["dimension"],
            metric=a["metric"],
            embedding_version=a["embedding_version"],
            model_id=a["model_id"],
            idempotency_key=a["idempotency_key"],
            source=a.get("source", ""),
            metadata=a.get("metadata"),
        )
        return Reply(self.service.ingest_chunks(call.agent.agent_id, doc, actor=call.actor))

    def _index_used(self, body: dict[str, Any]) -> bool:
        return self.service.vector_index_used(str(body.get("embedding_version", "")))
