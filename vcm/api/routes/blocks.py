"""Working (core) blocks: list, read (ETag = _rev), create or replace, delete. A write names the
_rev it replaces, in the body (or ``?_rev=``) or as If-Match; a stale one from If-Match is a 412.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from vcm.api.deps import Agent, IdemHeader, IfMatch, ServiceDep, etag, one_key, precondition_failed, rev_of
from vcm.api.models import (
    ERROR_RESPONSES,
    WRITE_ERROR_RESPONSES,
    AgentId,
    BlockList,
    BlockOut,
    BlockPut,
    BlockWriteOut,
)
from vcm.errors import RevConflict, ValidationError

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["memory"])

BlockId = Annotated[str, Path(description="the block's id", max_length=64)]


@router.get("/blocks", response_model=BlockList, responses=ERROR_RESPONSES)
def list_blocks(agent_id: AgentId, who: Agent, service: ServiceDep) -> BlockList:
    return BlockList(blocks=[BlockOut.of(b) for b in service.list_blocks(agent_id)])


@router.get("/blocks/{block_id}", response_model=BlockOut, responses=ERROR_RESPONSES)
def get_block(agent_id: AgentId, block_id: BlockId, who: Agent, service: ServiceDep, response: Response) -> BlockOut:
    block = service.get_block(agent_id, block_id)
    response.headers.update(etag(block.rev))
    return BlockOut.of(block)


@router.put("/blocks/{block_id}", response_model=BlockWriteOut, responses=WRITE_ERROR_RESPONSES)
def put_block(
    agent_id: AgentId,
    block_id: BlockId,
    body: BlockPut,
    who: Agent,
    service: ServiceDep,
    response: Response,
    idem: IdemHeader = None,
    if_match: IfMatch = None,
) -> BlockWriteOut | Response:
    """Create a block (no _rev) or replace it (its current _rev, in the body or as If-Match)."""
    rev, from_header = rev_of(if_match, body.rev)
    try:
        res = service.put_block(
            agent_id,
            block_id,
            body.content,
            role=body.role,
            pinned=body.pinned,
            expected_rev=rev,
            metadata=body.metadata,
            idempotency_key=one_key(idem, body.idempotency_key),
            actor=who.actor,
            justification=body.justification,
        )
    except RevConflict as exc:
        if from_header:
            return precondition_failed(exc)
        raise
    response.headers.update(etag(res.rev))
    return BlockWriteOut.of(res)


@router.delete("/blocks/{block_id}", response_model=BlockWriteOut, responses=WRITE_ERROR_RESPONSES)
def delete_block(
    agent_id: AgentId,
    block_id: BlockId,
    who: Agent,
    service: ServiceDep,
    rev: Annotated[str | None, Query(alias="_rev", description="the block's current _rev")] = None,
    idem: IdemHeader = None,
    if_match: IfMatch = None,
) -> BlockWriteOut | Response:
    expected, from_header = rev_of(if_match, rev)
    if expected is None:
        raise ValidationError("deleting a block needs its _rev (query ?_rev= or If-Match)", field="_rev")
    try:
        res = service.delete_block(agent_id, block_id, expected, idempotency_key=one_key(idem, None), actor=who.actor)
    except RevConflict as exc:
        if from_header:
            return precondition_failed(exc)
        raise
    return BlockWriteOut.of(res)
