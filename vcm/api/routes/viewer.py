"""The memory viewer: one page over the JSON API, and the live stream the page listens to.

======  ===========================  ======  =====================================================
method  path                         who     what
======  ===========================  ======  =====================================================
GET     /viewer/                     nobody  the page (static: it holds no data, only code)
GET     /viewer/{asset}              nobody  its scripts and style sheet (``static/``, in the package)
GET     /v1/whoami                   any     whom the bearer token names: the admin, or one agent
GET     /v1/agents/{id}/stream       agent   server-sent events: new audit rows and context status
======  ===========================  ======  =====================================================

**Tokens.** A browser cannot put a bearer header on a page load, so the page carries no data and
needs none: it asks for the token, or reads it from the URL fragment (``/viewer/#token=...``,
which browsers never send to a server, so it stays out of access logs and ``Referer``), keeps it
in ``sessionStorage`` (gone with the tab) and calls the JSON API with ``Authorization: Bearer``
like any client: the admin token sees every agent, an agent's token its own, with the same coded
errors. Deleting a fact is the API's audited ``DELETE /v1/agents/{id}/facts/{fact_id}``.

The stream (read with ``fetch()``, so it sends the header) and its frames are
:mod:`vcm.api.viewer`'s; its health comes from the app's cache (:mod:`vcm.api.health`). The
stream and the page are left out of the OpenAPI schema: they are not JSON operations.

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse

from vcm.api.deps import Agent, Anyone, AuthorityDep, HealthDep, ServiceDep
from vcm.api.models import ErrorOut
from vcm.api.viewer import (
    BACKLOG_S,
    MAX_STREAM_S,
    POLL_S,
    STREAM_HEADERS,
    Watch,
    WhoAmIOut,
    asset_response,
    feed,
)

router = APIRouter()

AgentId = Annotated[str, Path(description="the agent's id", max_length=128)]
UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "UNAUTHORIZED: missing or invalid bearer token"}
}


@router.get("/viewer", include_in_schema=False)
def viewer_redirect() -> RedirectResponse:
    # Relative, so that the page works behind a proxy that mounts vcm under a prefix.
    return RedirectResponse("viewer/", status_code=308)


@router.get("/viewer/", include_in_schema=False)
def page() -> Response:
    return asset_response("index.html")


@router.get("/viewer/{name}", include_in_schema=False)
def asset(name: Annotated[str, Path(max_length=64)]) -> Response:
    return asset_response(name)


@router.get("/v1/whoami", response_model=WhoAmIOut, responses=UNAUTHORIZED, tags=["viewer"])
def whoami(who: Anyone) -> WhoAmIOut:
    """Whom the bearer token names: the admin (every agent), or one agent (its own)."""
    return WhoAmIOut(admin=who.admin, agent_id=who.agent_id)


@router.get("/v1/agents/{agent_id}/stream", include_in_schema=False)
def stream(
    agent_id: AgentId,
    request: Request,
    who: Agent,
    service: ServiceDep,
    authority: AuthorityDep,
    health: HealthDep,
    authorization: Annotated[str | None, Header()] = None,
    since: Annotated[float | None, Query(allow_inf_nan=False, description="unix seconds, inclusive")] = None,
) -> StreamingResponse:
    """Server-sent events of the agent (see :mod:`vcm.api.viewer`), read with fetch()."""
    start = service.clock() - BACKLOG_S if since is None else since
    watch = Watch(service, agent_id, start, health)

    def allowed() -> None:
        authority.principal(authorization).authorize(agent_id)

    frames = feed(request, watch, allowed, poll_s=POLL_S, max_s=MAX_STREAM_S)
    return StreamingResponse(frames, media_type="text/event-stream", headers=STREAM_HEADERS)
