"""Forget receipts, reset, snapshots and summary versions (:mod:`vcm.api.routes.lifecycle`,
:mod:`vcm.api.routes.snapshots`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from vcm.api.models.common import RemovedOut, RequestBody


class ForgetOut(RemovedOut):
    """A message forgotten: ``removed`` as before, and the receipt that re-checks it."""

    receipt: str = Field(description="GET .../forget/{receipt} re-checks that nothing of the message is left")
    message_id: str
    facts_removed: list[str] = Field(description="facts whose only evidence was the message")
    facts_rewritten: list[str] = Field(description="facts kept without their pointer to it")


class ForgetCheckOut(BaseModel):
    agent_id: str
    receipt: str
    message_id: str
    clean: bool = Field(description="true when nothing of the message is left anywhere")
    left: dict[str, Any] = Field(description="where something is left: recall, context, edges (counts), facts (ids)")


class ResetOut(BaseModel):
    agent_id: str
    messages_to_recall: int


class SnapshotIn(RequestBody):
    kind: Literal["manual", "pre_upgrade"] = "manual"
    reason: str = Field("", max_length=1000)
    ttl_s: int | None = Field(None, ge=0, le=10 * 365 * 86400, description="lifetime; 0 keeps it; default: settings")
    idempotency_key: str | None = None


class SnapshotOut(BaseModel):
    agent_id: str
    snapshot_id: str
    kind: str
    reason: str
    sha256: str
    size: int = Field(description="bytes of the uncompressed state")
    created_at: float
    expires_at: float | None

    @classmethod
    def of(cls, s: Any) -> SnapshotOut:
        return cls(
            agent_id=s.agent_id,
            snapshot_id=s.snapshot_id,
            kind=s.kind,
            reason=s.reason,
            sha256=s.sha256,
            size=s.size,
            created_at=s.created_at,
            expires_at=s.expires_at,
        )


class SnapshotList(BaseModel):
    snapshots: list[SnapshotOut]


class RestoreOut(BaseModel):
    agent_id: str
    snapshot_id: str
    pre_restore_snapshot_id: str


class SummaryVersionOut(BaseModel):
    batch_id: int
    text: str
    tokens: int
    rev: str
    created_at: float


class SummaryVersionList(BaseModel):
    versions: list[SummaryVersionOut]
