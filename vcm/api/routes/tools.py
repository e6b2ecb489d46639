"""vcm's LLM tools: their schemas, and one tool call run through the executor.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Path

from vcm.api.deps import Agent, Anyone, ExecutorDep, IdemHeader
from vcm.api.models import ERROR_RESPONSES, AgentId, ToolCall, ToolCallOut, ToolList
from vcm.errors import NotFound, ValidationError
from vcm.tools import schemas as tools

router = APIRouter(prefix="/v1", tags=["tools"])


@router.get("/tools", response_model=ToolList, responses=ERROR_RESPONSES)
def list_tools(who: Anyone) -> ToolList:
    """vcm's tools as OpenAI function definitions (also ``vcm.client.tool_schemas()``)."""
    return ToolList(tools=tools.tool_schemas())


@router.post("/agents/{agent_id}/tools/{name}", response_model=ToolCallOut, responses=ERROR_RESPONSES)
def call_tool(
    agent_id: AgentId,
    name: Annotated[str, Path(max_length=64)],
    body: ToolCall,
    who: Agent,
    executor: ExecutorDep,
    idem: IdemHeader = None,
) -> dict[str, Any]:
    """Run one tool call as the model made it. The result (``ok`` false with a coded error in
    ``payload`` included) is what goes back to the model, so it comes with 200; only a request
    that names no agent or tool, or is not a JSON object, is an HTTP error."""
    if name not in tools.TOOL_NAMES:
        raise NotFound(f"unknown tool {name!r}; GET /v1/tools lists them", tool=name)
    if executor is None:
        raise ValidationError("tool execution is not configured in this process", field="name")
    result = executor.execute(
        agent_id, name, body.arguments, tool_call_id=body.tool_call_id, actor=who.actor, idempotency_key=idem
    )
    return result.as_dict()
