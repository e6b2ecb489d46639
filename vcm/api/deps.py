"""What the routes share: the app's parts, who is calling, and the header helpers.

:func:`vcm.api.app.create_app` keeps one :class:`Api` (the service, the token authority, the tool
executor, the settings, the health cache, the chat routes' model) on ``app.state``; routes reach it through the
dependencies here, so the route modules hold plain module-level functions and an app can still be
built as often as a process or a test likes (there are no module globals).

Who is calling, as ``Annotated`` aliases for a route's signature:

* :data:`Anyone`: any valid token (the admin's or an agent's).
* :data:`Agent`: the agent of the path itself, or the admin; the agent must exist.
* :data:`Admin`: the admin token only.
* :data:`TokenChecked`: the hot path's caller, whose token is checked inside the route's one Redis
  call (see :class:`~vcm.api.auth.Caller`).

No ``from __future__ import annotations``: FastAPI reads these signatures at import time.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import Depends, Header, Request, Response, Security
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from vcm import validation
from vcm.api import errors as api_errors
from vcm.api.auth import Caller, Principal, TokenAuthority
from vcm.api.chat import Upstream
from vcm.api.health import HealthCache
from vcm.api.models import AgentId
from vcm.errors import RevConflict, ValidationError
from vcm.service import MemoryService
from vcm.settings import Settings


class ToolOutcome(Protocol):
    """What :class:`vcm.tools.executor.ToolResult` offers the route."""

    @property
    def ok(self) -> bool: ...

    def as_dict(self) -> dict[str, Any]: ...


class ToolRunner(Protocol):
    """The interface of :class:`vcm.tools.executor.ToolExecutor` the route needs."""

    def execute(
        self,
        agent_id: str,
        name: str,
        arguments: Mapping[str, Any],
        *,
        tool_call_id: str | None = None,
        actor: str = "agent",
        idempotency_key: str | None = None,
    ) -> ToolOutcome: ...


@dataclass(frozen=True)
class Api:
    """The parts of one app that its routes use (``app.state.vcm``)."""

    service: MemoryService
    authority: TokenAuthority
    executor: ToolRunner | None
    settings: Settings
    health: HealthCache
    upstream: Upstream  # the model the chat routes call


def api_of(request: Request) -> Api:
    api: Api = request.app.state.vcm
    return api


# The dependencies that only read app.state are `async`: a plain `def` would cost each request a
# thread-pool hop, which on the hot path costs more than the route's own work.
async def _service(request: Request) -> MemoryService:
    return api_of(request).service


async def _authority(request: Request) -> TokenAuthority:
    return api_of(request).authority


async def _executor(request: Request) -> ToolRunner | None:
    return api_of(request).executor


async def _health(request: Request) -> HealthCache:
    return api_of(request).health


async def _upstream(request: Request) -> Upstream:
    return api_of(request).upstream


ServiceDep = Annotated[MemoryService, Depends(_service)]
AuthorityDep = Annotated[TokenAuthority, Depends(_authority)]
ExecutorDep = Annotated[ToolRunner | None, Depends(_executor)]
HealthDep = Annotated[HealthCache, Depends(_health)]
UpstreamDep = Annotated[Upstream, Depends(_upstream)]


# --- query parameters --------------------------------------------------------------------------------

_declared_cache: dict[int, frozenset[str]] = {}


def _declared(route: APIRoute) -> frozenset[str]:
    """The query parameters a route declares, its dependencies' included (by their aliases)."""
    known = _declared_cache.get(id(route))
    if known is None:
        names: set[str] = set()
        stack = [route.dependant]
        while stack:
            dependant = stack.pop()
            names.update(p.alias for p in dependant.query_params)
            stack.extend(dependant.dependencies)
        known = _declared_cache[id(route)] = frozenset(names)
    return known


# The memory proxies speak their SDKs' wire formats, whose clients add query parameters of
# their own (the Anthropic SDK's beta endpoints ``?beta=true``, Azure OpenAI's ``api-version``).
FOREIGN_QUERY = frozenset({"/v1/chat/completions", "/v1/messages"})


async def known_query(request: Request) -> None:
    """A route refuses a query parameter it does not declare (VALIDATION_ERROR naming it): a
    misspelt filter silently ignored would answer a question that was not asked, and on a write
    it does worse (``DELETE .../state?key=k`` would clear every key, ``DELETE .../state/k?rev=3``
    delete whatever revision is there). Installed on the whole app
    (:func:`vcm.api.app.create_app`); the memory proxies' routes are left to their wire formats."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or route.path in FOREIGN_QUERY:
        return
    if not route.include_in_schema and not route.path.startswith("/v1/"):
        return  # a page (the memory viewer): its query string is for its script, not the server
    unknown = sorted(set(request.query_params) - _declared(route))
    if unknown:
        known = ", ".join(sorted(_declared(route))) or "none"
        raise ValidationError(
            f"unknown query parameter {unknown[0]!r} (this route takes: {known})", field=unknown[0], unknown=unknown
        )


# --- who is calling ---------------------------------------------------------------------------------

_bearer = HTTPBearer(auto_error=False, description="an agent's token, or the admin token")


def principal(
    authority: AuthorityDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    # `credentials` is declared so that OpenAPI documents the bearer scheme; the raw header is
    # what is checked, so a malformed one gets a precise message instead of being dropped.
    return authority.principal(authorization)


Anyone = Annotated[Principal, Depends(principal)]


def principal_or_api_key(
    authority: AuthorityDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    x_api_key: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    """As :func:`principal`, with the token also taken from ``x-api-key`` (the Anthropic SDK's
    way of sending it) when no Authorization header is sent."""
    if authorization is None and x_api_key:
        authorization = f"Bearer {x_api_key}"
    return authority.principal(authorization)


AnyoneByApiKey = Annotated[Principal, Depends(principal_or_api_key)]


def agent_scope(agent_id: AgentId, who: Anyone, service: ServiceDep) -> Principal:
    who.authorize(agent_id)  # before any lookup: another agent's id answers NOT_FOUND, existing or not
    service.agent(agent_id)  # unknown (or malformed) id: the same NOT_FOUND / VALIDATION_ERROR for admin
    return who


Agent = Annotated[Principal, Depends(agent_scope)]


def admin(who: Anyone) -> Principal:
    who.require_admin()
    return who


Admin = Annotated[Principal, Depends(admin)]


async def caller(
    agent_id: AgentId,
    authority: AuthorityDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Caller:
    """The caller of a route whose own Redis call checks the agent token (see
    :class:`~vcm.api.auth.Caller`). ``async`` and free of I/O in the common case, so it costs no
    thread-pool hop and no round trip; a token of another agent takes the full check (a Redis
    read, in the thread pool) to answer 401 or 404 exactly as the other routes do."""
    claimed = authority.claim(authorization, agent_id)
    if claimed is not None:
        return claimed
    who: Principal = await run_in_threadpool(authority.principal, authorization)
    who.authorize(agent_id)  # another agent's id: NOT_FOUND, existing or not
    return Caller(who, None)


# The hot path's two busiest routes check the token inside their one Redis call.
TokenChecked = Annotated[Caller, Depends(caller)]


# --- headers: idempotency keys, revisions ------------------------------------------------------------

IdemHeader = Annotated[
    str | None,
    Header(alias="Idempotency-Key", description="a retry with the same key returns the first result"),
]
IfMatch = Annotated[str | None, Header(alias="If-Match", description="the block's current _rev (its ETag)")]


def one_key(header: str | None, body: str | None) -> str | None:
    """The idempotency key of a request that may send it as the header or in the body (not both,
    unless they agree); checked. The rule is :func:`vcm.validation.one_key`'s, which the tool
    executor applies to a tool call's arguments too."""
    return validation.one_key(header, body)


def rev_of(if_match: str | None, body_rev: str | None) -> tuple[str | None, bool]:
    """The expected _rev, and whether it came from If-Match (a mismatch is then a 412)."""
    header_rev = None
    if if_match is not None:
        value = if_match.strip()
        if value == "*" or "," in value:
            raise ValidationError("If-Match must name one _rev (an ETag from GET)", field="If-Match")
        header_rev = value.removeprefix("W/").strip('"')
        if not header_rev:
            raise ValidationError("If-Match is empty", field="If-Match")
    if header_rev is not None and body_rev is not None and header_rev != body_rev:
        raise ValidationError("If-Match and the body's _rev differ; send one", field="_rev")
    if header_rev is not None:
        return header_rev, True
    return body_rev, False


def etag(rev: str | None) -> dict[str, str]:
    return {"ETag": f'"{rev}"'} if rev else {}


def precondition_failed(exc: RevConflict) -> Response:
    """REV_CONFLICT answered as 412: the expected _rev came from If-Match."""
    return api_errors.error_response(str(exc.code), exc.message, 412, **exc.details)
