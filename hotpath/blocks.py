"""Working blocks in the hot state: create, replace and delete under ``_rev``, in one Lua call
each (:data:`vcm.hotpath.lua.PUT_BLOCK`), with the budget decision the call makes."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from vcm import validation
from vcm.errors import ValidationError
from vcm.hotpath import keys, render
from vcm.hotpath.claims import HotClaims
from vcm.hotpath.codec import dumps, fingerprint, num, reply
from vcm.hotpath.tokens import TokenCounter
from vcm.types import BatchInfo, Block, BlockResult


class HotBlocks(HotClaims):
    """The working blocks of :class:`~vcm.hotpath.state.HotState` (which sets these)."""

    _put_block: Any  # the registered script vcm.hotpath.lua.PUT_BLOCK
    _pressure: str  # the memory-pressure notice, as JSON
    counter: Callable[[str], TokenCounter]
    _model: Callable[..., str]

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
    ) -> BlockResult:
        """Create (``expected_rev=None``) or replace a block; every edit presents its ``_rev``."""
        validation.agent_id(agent_id)
        validation.block_id(block_id)
        content = validation.text(content, "content", self.settings.budget.max_content_chars)
        if not isinstance(role, str) or not validation.NAME.match(role):
            raise ValidationError("block role must be 1-64 of letters, digits, '_', '-'", field="role")
        validation.flag(pinned, "pinned")
        validation.idempotency_key(idempotency_key)
        if expected_rev is not None and (not isinstance(expected_rev, str) or not expected_rev):
            raise ValidationError("_rev must be a non-empty string", field="_rev")
        meta = validation.metadata(metadata)
        counter = self.counter(self._model(agent_id))
        tokens = counter.message(render.block(block_id, role, content, pinned))
        body: dict[str, Any] = {"role": role, "content": content, "tokens": tokens, "pinned": pinned}
        if meta:
            body["metadata"] = meta
        fp = fingerprint({"op": "put_block", "block": block_id, "rev": expected_rev, **body})
        return self._block_call(
            agent_id, block_id, expected_rev or "", body, tokens, pinned, False, fp, idempotency_key
        )

    def delete_block(
        self, agent_id: str, block_id: str, expected_rev: str, *, idempotency_key: str | None = None
    ) -> BlockResult:
        validation.agent_id(agent_id)
        validation.block_id(block_id)
        validation.idempotency_key(idempotency_key)
        if not isinstance(expected_rev, str) or not expected_rev:
            raise ValidationError("deleting a block needs its _rev", field="_rev")
        fp = fingerprint({"op": "delete_block", "block": block_id, "rev": expected_rev})
        return self._block_call(
            agent_id, block_id, expected_rev, {"deleted": True}, 0, False, True, fp, idempotency_key
        )

    def _block_call(
        self,
        agent_id: str,
        block_id: str,
        expected_rev: str,
        body: Mapping[str, Any],
        tokens: int,
        pinned: bool,
        delete: bool,
        fp: str,
        idempotency_key: str | None,
    ) -> BlockResult:
        now = self.clock()
        raw = self._put_block(
            keys=[
                keys.key(agent_id, keys.META),
                keys.key(agent_id, keys.BLOCKS),
                keys.key(agent_id, keys.FIFO),
                keys.key(agent_id, keys.MESSAGES),
                keys.key(agent_id, keys.BATCHES),
                keys.key(agent_id, keys.PLACEHOLDERS),
                keys.idempotency(agent_id, idempotency_key or ""),
            ],
            args=[
                keys.prefix(agent_id),
                idempotency_key or "",
                fp,
                self.settings.idempotency_ttl_s,
                block_id,
                expected_rev,
                dumps(body),
                tokens,
                "1" if pinned else "0",
                "1" if delete else "0",
                self._pressure,
                num(now),
            ],
        )
        data, replayed = reply(raw)
        return BlockResult(
            block_id=data["block_id"],
            rev=data.get("rev"),
            tokens=int(data["tokens"]),
            total=int(data["total"]),
            action=data["action"],
            deleted=bool(data["deleted"]),
            batch=BatchInfo.from_json(data.get("batch")),
            pressure_message_id=data.get("pressure_message_id"),
            replayed=replayed,
            previous=Block.from_json(json.loads(raw[2])) if len(raw) > 2 and raw[2] else None,
        )
