"""The executor's write tools: working blocks, the conversation queue, recall notes, structured
memory writes under their idempotency keys, archival ingest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vcm import validation
from vcm.errors import ValidationError, from_payload
from vcm.tools import paging, results
from vcm.tools.calls import (
    Reply,
    ToolCall,
    batch_fields,
    mark_replayed,
)
from vcm.tools.pager import Pager


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
        body = {"block_id": res.block_id, "_rev": res.rev, "tokens": res.tokens, "action": res.action}
        return Reply(mark_replayed(body | batch_fields(res.batch), res.replayed))

    def _fetch_core(self, call: ToolCall) -> Reply:
        agent, block_id = call.agent.agent_id, call.args.get("block_id")
        budget = self._page_budget(agent)
        cursor = call.args.get("cursor")
        if isinstance(budget, dict):
            return Reply(budget | {"next_cursor": cursor})
        bound = paging.scope(agent, "core", block_id)
        if block_id is not None:
            blocks = [self.service.get_block(agent, validation.block_id(block_id))]
        else:
            after = self._position(cursor, bound).store_cursor if cursor else None
            blocks = [b for b in self.service.list_blocks(agent) if after is None or b.id > after]
        # Keyset paging by block id: blocks created meanwhile sort in or out, never repeat.
        afters = [paging.Position(b.id) for b in blocks[:-1]] + [None]
        return Reply(self._page("core", [results.block_item(b) for b in blocks], afters, None, budget, bound, call))

    # --- conversation -------------------------------------------------------------------------------
    def _append_fifo(self, call: ToolCall) -> Reply:
        a = call.args
        if a["role"] == "tool":
            raise ValidationError(
                "role tool is reserved for tool results, which answer a tool call; use assistant or system",
                field="role",
            )
        res = self.service.append(
            call.agent.agent_id,
            a["role"],
            a["content"],
            pinned=bool(a.get("pinned", False)),
            idempotency_key=a["idempotency_key"],
            actor=call.actor,
        )
        body = {"message_id": res.message_id, "tokens": res.tokens, "action": res.action}
        if res.pressure_message_id:
            body["memory_pressure"] = True
        return Reply(mark_replayed(body | batch_fields(res.batch), res.replayed))

    def _evict_fifo(self, call: ToolCall) -> Reply:
        a = call.args
        _, batch = self.service.evict(
            call.agent.agent_id, a["count"], idempotency_key=a["idempotency_key"], actor=call.actor
        )
        if batch is None:
            return Reply({"evicted": 0, "note": "nothing to evict: the queue holds only pinned or no messages"})
        return Reply({"evicted": batch.count, "batch_id": batch.id, "tokens_freed": batch.tokens})

    def _keyed(self, call: ToolCall, name: str, run: Callable[..., dict[str, Any]]) -> Reply:
        """A structured-memory write under its idempotency key: a retry answers as the first call
        did (its body is kept with the key) and changes nothing."""
        a = call.args
        request = {k: v for k, v in a.items() if k not in ("idempotency_key", "request_heartbeat")}
        agent_id = call.agent.agent_id
        first, replayed = self.service.claim(agent_id, a["idempotency_key"], name, request, {"pending": True})
        if replayed and "body" in first:
            return Reply(mark_replayed(dict(first["body"]), True))
        body = run(self.service, call.agent.agent_id, a, call.actor)
        self.service.settle(call.agent.agent_id, a["idempotency_key"], name, request, {"body": body})
        return Reply(body)

    def _write_recall(self, call: ToolCall) -> Reply:
        a = call.args
        msg = self.service.write_recall(
            call.agent.agent_id,
            a["content"],
            role=a.get("role", "assistant"),
            idempotency_key=a["idempotency_key"],
            actor=call.actor,
        )
        return Reply({"message_id": msg.message_id, "tokens": msg.tokens, "stored_in": "recall"})

    # --- archival ingest ----------------------------------------------------------------------------
    def _ingest_archival(self, call: ToolCall) -> Reply:
        """Queues the document and returns its job; the document is searchable once the job is
        done. The same key and document replay the first job; another document under the key is
        IDEMPOTENCY_MISMATCH (both kept by the service, as for every entry point)."""
        a, agent = call.args, call.agent.agent_id
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
        elif job.status == "failed":  # the job ran inline and failed: report it as this call's error
            raise from_payload(job.error or {"code": "INTERNAL_ERROR", "message": "ingestion failed"})
        else:
            body |= {"chunks_done": job.chunks_done, "chunks_total": job.chunks_total}
            body["note"] = "queued for the ingest workers; search_archival finds it once status is done"
        return Reply(body)
