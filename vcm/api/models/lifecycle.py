"""Reset, snapshots and summary versions (:mod:`vcm.api.routes.lifecycle`,
:mod:`vcm.api.routes.snapshots`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from vcm.api.models.common import RequestBody


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
