"""Working (core) blocks (:mod:`vcm.api.routes.blocks`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vcm.api.models.common import IDEMPOTENCY_FIELD, BatchOut, RequestBody
from vcm.types import Block, BlockResult


class BlockPut(RequestBody):
    content: str
    role: str = "working"
    pinned: bool = False
    metadata: dict[str, Any] | None = None
    rev: str | None = Field(
        None, alias="_rev", description="the block's current _rev (or send If-Match); omit to create"
    )
    idempotency_key: str | None = IDEMPOTENCY_FIELD
    justification: str | None = Field(
        None,
        max_length=2000,
        description="why content that reads like instructions to the model (TAINTED_CONTENT) belongs in the block: "
        "a sentence of at least 3 words",
    )


class BlockOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: str
    role: str
    content: str
    tokens: int
    pinned: bool
    rev: str = Field(alias="_rev")
    updated_at: float
    metadata: dict[str, Any]

    @classmethod
    def of(cls, block: Block) -> BlockOut:
        return cls(
            id=block.id,
            role=block.role,
            content=block.content,
            tokens=block.tokens,
            pinned=block.pinned,
            rev=block.rev,
            updated_at=block.updated_at,
            metadata=dict(block.metadata),
        )


class BlockList(BaseModel):
    blocks: list[BlockOut]


class BlockWriteOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    block_id: str
    rev: str | None = Field(alias="_rev", description="the new _rev; null after a delete")
    tokens: int
    total: int
    action: str
    deleted: bool
    batch: BatchOut | None
    pressure_message_id: str | None
    replayed: bool

    @classmethod
    def of(cls, res: BlockResult) -> BlockWriteOut:
        return cls(
            block_id=res.block_id,
            rev=res.rev,
            tokens=res.tokens,
            total=res.total,
            action=res.action,
            deleted=res.deleted,
            batch=BatchOut.of(res.batch),
            pressure_message_id=res.pressure_message_id,
            replayed=res.replayed,
        )
