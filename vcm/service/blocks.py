"""Working blocks through the façade: the taint check of what enters a block, the audit rows
and change-feed entries of each edit, and the store's copy (write-through)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vcm import poisoning
from vcm.errors import TaintedContent, ValidationError
from vcm.obs import footprint, metrics
from vcm.service.core import Core
from vcm.store.audit_names import Actor, EventKind, audit_id
from vcm.types import Block, BlockResult


class Blocks:
    """put_block, delete_block, get_block, list_blocks."""

    def __init__(self, core: Core) -> None:
        self.core = core

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
        actor: str = Actor.SYSTEM,
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
        verdict = self.core.taint.scan(content) if isinstance(content, str) else poisoning.CLEAN
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
        with self.core.refusals_audited(agent_id, "put_block", actor, idempotency_key):
            res = self.core.hot_call(
                agent_id,
                self.core.hot.put_block,
                agent_id,
                block_id,
                content,
                role=role,
                pinned=pinned,
                expected_rev=expected_rev,
                metadata=metadata,
                idempotency_key=idempotency_key,
            )
        # Replays too: the first attempt may have died before its copy reached the store (the
        # key's record with it: a retry after Redis lost it replays rather than conflicts).
        self.core.durable.block_written(agent_id, block_id)
        self.core.durable.keep_hot_record(agent_id, idempotency_key)
        # Replays too: the first attempt may have died before publishing, and a follower given the
        # same change twice only reads the block once more.
        self.core.changed(agent_id, "block", block_id, res.rev)
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
            self.core.event(
                agent_id,
                EventKind.CORE_WRITE,
                details,
                actor,
                event_id=audit_id(agent_id, "core", block_id, res.rev),
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
                self.core.batch_begun(agent_id, res.batch, res.total, False, actor, idempotency_key)
                metrics.flush("threshold")
        elif res.batch is not None:  # a replay: the first request may have died before its follow-ups
            self.core.batch_begun(agent_id, res.batch, res.total, False, actor, idempotency_key)
        return res

    def delete_block(
        self,
        agent_id: str,
        block_id: str,
        expected_rev: str,
        *,
        idempotency_key: str | None = None,
        actor: str = Actor.SYSTEM,
    ) -> BlockResult:
        res = self.core.hot_call(
            agent_id, self.core.hot.delete_block, agent_id, block_id, expected_rev, idempotency_key=idempotency_key
        )
        if res.deleted:
            self.core.durable.block_deleted(agent_id, block_id)
        self.core.durable.keep_hot_record(agent_id, idempotency_key)
        if res.deleted:  # replays too, as for put_block
            self.core.changed(agent_id, "block", block_id, None, "delete")
        if not res.replayed:
            before = res.previous
            self.core.event(
                agent_id,
                EventKind.CORE_DELETE,
                {"block_id": block_id, "previous_rev": expected_rev},
                actor,
                event_id=audit_id(agent_id, "core", block_id, "del", expected_rev),
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
        return self.core.hot_call(agent_id, self.core.hot.get_block, agent_id, block_id)

    def list_blocks(self, agent_id: str) -> list[Block]:
        return self.core.hot_call(agent_id, self.core.hot.list_blocks, agent_id)
