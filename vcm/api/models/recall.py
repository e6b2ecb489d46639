"""Recall memory: notes and stored messages, and their search (:mod:`vcm.api.routes.recall`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from vcm.api.models.common import RequestBody, Role
from vcm.store.types import StoredMessage


class RecallNote(RequestBody):
    content: str
    role: Role = "assistant"
    idempotency_key: str | None = Field(None, description="required here or as the Idempotency-Key header")


class MessageOut(BaseModel):
    message_id: str
    seq: int
    role: str
    content: str
    tokens: int
    created_at: float
    name: str | None
    metadata: dict[str, Any]
    expires_at: float | None

    @classmethod
    def of(cls, msg: StoredMessage) -> MessageOut:
        return cls(
            message_id=msg.message_id,
            seq=msg.seq,
            role=msg.role,
            content=msg.content,
            tokens=msg.tokens,
            created_at=msg.created_at,
            name=msg.name,
            metadata=dict(msg.metadata),
            expires_at=msg.expires_at,
        )


class RecallHitOut(BaseModel):
    message: MessageOut
    score: float
    tainted: bool = Field(False, description="the text reads like instructions to the model (vcm.poisoning)")
    taint_reasons: list[str] = Field(default_factory=list)


class RecallPage(BaseModel):
    items: list[RecallHitOut]
    next_cursor: str | None
    mode: str
    partial: bool = Field(
        False,
        description="the vector half searched the agent's index and only the newest of the vectors not indexed "
        "yet (a bulk load still being indexed in the background): older messages may be missing from this page",
    )
