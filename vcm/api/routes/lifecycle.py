"""An agent's lifecycle: delete it, forget a message or a document, start the conversation over,
and the summary's versions; the admin or the agent itself. Snapshots are
:mod:`vcm.api.routes.snapshots`'s.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Path, Query

from vcm import validation
from vcm.api.deps import Agent, Anyone, IdemHeader, ServiceDep
from vcm.api.models import (
    ERROR_RESPONSES,
    WRITE_ERROR_RESPONSES,
    AgentId,
    ForgetCheckOut,
    ForgetOut,
    RemovedOut,
    ResetOut,
    SummaryVersionList,
    SummaryVersionOut,
)

router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["lifecycle"])


@router.delete("", response_model=RemovedOut, responses=WRITE_ERROR_RESPONSES)
def delete_agent(agent_id: AgentId, who: Anyone, service: ServiceDep) -> RemovedOut:
    """Delete the agent and everything of it (store, indexes, Redis, metrics). A repeat by
    the admin answers with nothing removed; the agent's own token stops working with it."""
    who.authorize(agent_id)
    validation.agent_id(agent_id)
    return RemovedOut(agent_id=agent_id, removed=service.delete_agent(agent_id, actor=who.actor))


@router.delete("/messages/{message_id}", response_model=ForgetOut, responses=WRITE_ERROR_RESPONSES)
def forget_message(
    agent_id: AgentId, message_id: Annotated[str, Path(max_length=256)], who: Agent, service: ServiceDep
) -> ForgetOut:
    """Forget one message wherever it is (the main context, recall and every index) and the facts
    derived from it; one in an eviction batch being committed: CONFLICT, retry in seconds. The
    answer's receipt re-checks it (GET .../forget/{receipt})."""
    r = service.forget(agent_id, message_id, actor=who.actor)
    return ForgetOut(
        agent_id=agent_id,
        removed=r.removed,
        receipt=r.receipt,
        message_id=r.message_id,
        facts_removed=list(r.facts_removed),
        facts_rewritten=list(r.facts_rewritten),
    )


@router.get("/forget/{receipt}", response_model=ForgetCheckOut, responses=ERROR_RESPONSES)
def check_forget(
    agent_id: AgentId, receipt: Annotated[str, Path(max_length=64)], who: Agent, service: ServiceDep
) -> ForgetCheckOut:
    """Re-check a forget: is anything of its message left (recall, context, edges, facts)?"""
    c = service.check_forget(agent_id, receipt)
    return ForgetCheckOut(agent_id=agent_id, receipt=c.receipt, message_id=c.message_id, clean=c.clean, left=c.left)


@router.delete("/archival/{doc_id}", response_model=RemovedOut, responses=WRITE_ERROR_RESPONSES)
def forget_document(
    agent_id: AgentId, doc_id: Annotated[str, Path(max_length=256)], who: Agent, service: ServiceDep
) -> RemovedOut:
    return RemovedOut(agent_id=agent_id, removed=service.forget_document(agent_id, doc_id, actor=who.actor))


@router.post("/reset", response_model=ResetOut, responses=WRITE_ERROR_RESPONSES)
def reset(agent_id: AgentId, who: Agent, service: ServiceDep, idem: IdemHeader = None) -> ResetOut:
    """Start the conversation over: FIFO and summary go to recall, blocks stay."""
    out = service.reset(agent_id, actor=who.actor, idempotency_key=idem)
    return ResetOut(agent_id=agent_id, messages_to_recall=int(out["messages_to_recall"]))


@router.get("/summary/versions", response_model=SummaryVersionList, responses=ERROR_RESPONSES)
def summary_versions(
    agent_id: AgentId, who: Agent, service: ServiceDep, limit: Annotated[int, Query(ge=1, le=1000)] = 20
) -> SummaryVersionList:
    versions = service.summary_versions(agent_id, limit=limit)
    return SummaryVersionList(
        versions=[
            SummaryVersionOut(batch_id=v.batch_id, text=v.text, tokens=v.tokens, rev=v.rev, created_at=v.created_at)
            for v in versions
        ]
    )
