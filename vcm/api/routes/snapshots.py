"""Snapshots of an agent: take one, list them, restore one, delete one; the admin or the agent
itself. Keyed retries answer as the first call did.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Path

from vcm.api.deps import Agent, IdemHeader, ServiceDep, one_key
from vcm.api.models import (
    ERROR_RESPONSES,
    WRITE_ERROR_RESPONSES,
    AgentId,
    RemovedOut,
    RestoreOut,
    SnapshotIn,
    SnapshotList,
    SnapshotOut,
)

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["lifecycle"])

SnapshotId = Annotated[str, Path(max_length=256)]


@router.post("/snapshots", status_code=201, response_model=SnapshotOut, responses=WRITE_ERROR_RESPONSES)
def create_snapshot(
    agent_id: AgentId, body: SnapshotIn, who: Agent, service: ServiceDep, idem: IdemHeader = None
) -> SnapshotOut:
    key = one_key(idem, body.idempotency_key)
    record = service.create_snapshot(
        agent_id, kind=body.kind, reason=body.reason, ttl_s=body.ttl_s, actor=who.actor, idempotency_key=key
    )
    return SnapshotOut.of(record)


@router.get("/snapshots", response_model=SnapshotList, responses=ERROR_RESPONSES)
def list_snapshots(agent_id: AgentId, who: Agent, service: ServiceDep) -> SnapshotList:
    return SnapshotList(snapshots=[SnapshotOut.of(s) for s in service.list_snapshots(agent_id)])


@router.post("/snapshots/{snapshot_id}/restore", response_model=RestoreOut, responses=WRITE_ERROR_RESPONSES)
def restore_snapshot(
    agent_id: AgentId, snapshot_id: SnapshotId, who: Agent, service: ServiceDep, idem: IdemHeader = None
) -> RestoreOut:
    """Return the agent to the snapshot (checksum verified first: SNAPSHOT_CORRUPT changes
    nothing); the state before is kept as a pre_restore snapshot."""
    out = service.restore_snapshot(agent_id, snapshot_id, actor=who.actor, idempotency_key=idem)
    return RestoreOut.model_validate(out)


@router.delete("/snapshots/{snapshot_id}", response_model=RemovedOut, responses=WRITE_ERROR_RESPONSES)
def delete_snapshot(agent_id: AgentId, snapshot_id: SnapshotId, who: Agent, service: ServiceDep) -> RemovedOut:
    deleted = service.delete_snapshot(agent_id, snapshot_id, actor=who.actor)
    return RemovedOut(agent_id=agent_id, removed={"snapshots": 1} if deleted else {})
