"""Portable export and import of one agent, the admin's: ``GET /v1/agents/{id}/export`` streams the
agent as JSON Lines, ``POST /v1/import`` creates an agent from such a file (docs/portable.md).

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from vcm.api.deps import Admin, ServiceDep
from vcm.api.models import ERROR_RESPONSES, WRITE_ERROR_RESPONSES, AgentId
from vcm.api.models.portable import ImportOut
from vcm.errors import ValidationError
from vcm.service import portable_format

router = APIRouter(tags=["admin"])

MEDIA_TYPE = "application/x-ndjson"


@router.get(
    "/v1/agents/{agent_id}/export",
    response_class=StreamingResponse,
    responses={**ERROR_RESPONSES, 200: {"content": {MEDIA_TYPE: {}}, "description": "the agent, one record a line"}},
)
def export_agent(
    agent_id: AgentId,
    who: Admin,
    service: ServiceDep,
    vectors: Annotated[bool, Query(description="include fact and archival vectors")] = False,
) -> StreamingResponse:
    """The agent in the portable format, streamed. An unknown agent is NOT_FOUND before the first
    line; the last line (``kind`` end) counts the records, so a cut stream is refused on import."""
    lines = service.export_agent(agent_id, vectors=vectors, actor=who.actor)
    disposition = f'attachment; filename="{agent_id}.jsonl"'
    return StreamingResponse(lines, media_type=MEDIA_TYPE, headers={"Content-Disposition": disposition})


@router.post(
    "/v1/import",
    status_code=201,
    response_model=ImportOut,
    responses={**WRITE_ERROR_RESPONSES, 200: {"model": ImportOut, "description": "imported before: replayed"}},
    openapi_extra={"requestBody": {"required": True, "content": {MEDIA_TYPE: {"schema": {"type": "string"}}}}},
)
async def import_agent(
    request: Request,
    response: Response,
    who: Admin,
    service: ServiceDep,
    as_id: Annotated[str | None, Query(description="the id to create the agent under")] = None,
) -> ImportOut:
    """Create the agent a portable file holds (``as_id``: under another id). The whole file is
    checked first: a bad line is VALIDATION_ERROR with its number in ``line``, and nothing is
    written. An agent that exists is CONFLICT (never merged); the same file again answers the
    first import (200, ``replayed``). Other query parameters are refused (``known_query``)."""
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError("the body must be UTF-8 JSON Lines", field="body") from None
    out = await run_in_threadpool(service.import_agent, portable_format.split_lines(text), as_id=as_id, actor=who.actor)
    if out["replayed"]:
        response.status_code = 200
    return ImportOut.model_validate(out)
