"""MCP over streamable HTTP: the SDK's transport behind vcm's bearer tokens.

Every HTTP request to the endpoint must carry ``Authorization: Bearer <agent token>``, the token
the HTTP API issues for the agent (checked as the API checks it: :class:`TokenAuthority`, one
Redis read). A missing, malformed or wrong token, and the admin token (it names no agent), get
vcm's coded ``401 UNAUTHORIZED`` before the MCP transport sees the request. A verified request
carries its agent to the handlers (:func:`session_of`) as the SDK's authenticated user, so the
SDK also binds each MCP session to the agent that opened it: another agent's token on that
session id is answered as if the session did not exist.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import redis
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel.server import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from vcm.api import errors as api_errors
from vcm.api.auth import TokenAuthority
from vcm.errors import ErrorCode, Unauthorized, VcmError
from vcm.mcp.server import Context, Session, build_server
from vcm.obs import audit
from vcm.service import MemoryService
from vcm.service.tokens import digest
from vcm.tools.executor import ToolExecutor

PATH = "/mcp"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class BearerGate:
    """Admits requests that carry a valid agent token; answers the rest 401 (coded JSON)."""

    def __init__(self, app: ASGIApp, authority: TokenAuthority) -> None:
        self.app = app
        self.authority = authority

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get("authorization")
        try:
            principal = await anyio.to_thread.run_sync(self.authority.principal, header)
            if principal.admin or principal.agent_id is None:
                raise Unauthorized("the admin token names no agent: connect with the agent's own token")
        except VcmError as exc:
            await api_errors.coded(exc)(scope, receive, send)
            return
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            unavailable = api_errors.error_response(
                ErrorCode.STORE_UNAVAILABLE, "the hot state (Redis) is unavailable; retry shortly"
            )
            await unavailable(scope, receive, send)
            return
        # The SDK's user: its client_id (the agent) owns the MCP sessions this request opens. The
        # token itself stays out of it, only its digest goes in.
        token = AccessToken(token="sha256:" + digest(header or ""), client_id=principal.agent_id, scopes=[])
        await self.app({**scope, "user": AuthenticatedUser(token), "auth": AuthCredentials([])}, receive, send)


def session_of(ctx: Context) -> Session:
    """The session of an MCP request that came through :class:`BearerGate`."""
    request: Any = ctx.request
    user = request.scope.get("user") if request is not None else None
    if not isinstance(user, AuthenticatedUser):  # only reachable by mounting the server without its gate
        raise MCPError(INVALID_REQUEST, "unauthenticated request: send 'Authorization: Bearer <agent token>'")
    agent_id = user.access_token.client_id
    return Session(agent_id, audit.mcp_agent(agent_id))


def http_app(
    service: MemoryService,
    executor: ToolExecutor,
    authority: TokenAuthority,
    *,
    host: str = "127.0.0.1",
    path: str = PATH,
    max_body_bytes: int = 16 * 1024 * 1024,
) -> ASGIApp:
    """The ASGI app serving MCP at ``path``. ``host`` is where it listens: on a loopback address
    the SDK's DNS-rebinding protection admits only loopback Host and Origin headers."""
    server: Server[Any] = build_server(service, executor, session_of)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    if host in LOOPBACK:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    app: Starlette = server.streamable_http_app(
        streamable_http_path=path,
        transport_security=security,
        host=host,
        max_request_body_size=max_body_bytes,
    )
    return BearerGate(app, authority)
