"""The MCP server: vcm's memory tools and an agent's memory, for one agent per session.

Tools are :mod:`vcm.tools.schemas`' (listed afresh at every ``tools/list``, see
:mod:`vcm.mcp.catalog`), and every call runs through the same
:class:`~vcm.tools.executor.ToolExecutor` the HTTP API's ``POST /v1/agents/{id}/tools/{name}``
uses: the same validation, idempotency keys, coded errors (a result with ``isError``, the model
reads it), heartbeat governor and paging. Resources are the session agent's context, working
blocks (all, or one) and structured facts; they read as the HTTP
API's JSON does. Another agent's URI answers exactly like a missing one.

Who a session serves (:class:`Session`) comes from a bearer token, the one the HTTP API issues:
over stdio it is checked once, before serving (:func:`session_for`); over streamable HTTP on
every request (:mod:`vcm.mcp.http`), and :func:`build_server` is given how to read it then.
Handlers run the (blocking) service and executor in worker threads.
"""

from __future__ import annotations

import dataclasses
import io
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from vcm import validation
from vcm.api.auth import TokenAuthority, not_found
from vcm.api.models import BlockList, BlockOut, ContextOut
from vcm.errors import NotFound, ValidationError, VcmError
from vcm.mcp import catalog
from vcm.obs import audit
from vcm.service import MemoryService
from vcm.tools.executor import ToolExecutor

Context = ServerRequestContext[Any, Any]

INSTRUCTIONS = (
    "vcm keeps this agent's memory: a main context within the model's token window (working blocks, "
    "a recursive summary, a FIFO of messages), recall memory of every past message, and archival "
    "documents. Use the tools to write and search it; writes take an idempotency_key (a retry with the "
    "same key returns the first result). Errors come back as results with a stable code. The resources "
    "show the agent's current context and working blocks."
)


@dataclass(frozen=True)
class Session:
    """The one agent an MCP session serves, and the actor its writes are audited under."""

    agent_id: str
    actor: str


Resolve = Callable[[Context], Session]


def session_for(authority: TokenAuthority, service: MemoryService, token: str, agent_id: str | None = None) -> Session:
    """The session of a bearer token (stdio): an agent's token serves that agent (``agent_id``,
    when given, must be it: another agent answers NOT_FOUND, as on the HTTP API); the admin token
    serves the agent ``agent_id`` names. UNAUTHORIZED for any other token."""
    principal = authority.principal(f"Bearer {token.strip()}")
    if principal.admin:
        if not agent_id:
            raise ValidationError("the admin token serves the one agent named with --agent", field="agent")
        validation.agent_id(agent_id)
        service.agent(agent_id)  # NOT_FOUND for an unknown agent
        return Session(agent_id, audit.MCP_ADMIN)
    own = principal.agent_id
    assert own is not None  # a non-admin principal always names its agent
    if agent_id is not None:
        principal.authorize(agent_id)
    return Session(own, audit.mcp_agent(own))


def fixed(session: Session) -> Resolve:
    """Every request of a connection is this session's (stdio: one process, one agent)."""
    return lambda ctx: session


def build_server(service: MemoryService, executor: ToolExecutor, resolve: Resolve) -> Server[Any]:
    """The low-level MCP server; ``resolve`` says which session a request belongs to."""

    async def list_tools(ctx: Context, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=catalog.mcp_tools())

    async def call_tool(ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
        session = resolve(ctx)
        if params.name not in catalog.tool_names():
            names = ", ".join(catalog.tool_names())
            raise MCPError(
                INVALID_PARAMS, f"unknown tool {params.name!r}; the tools are {names}", {"tool": params.name}
            )
        run = partial(
            executor.execute, session.agent_id, params.name, catalog.arguments(params.arguments), actor=session.actor
        )
        try:
            result = await anyio.to_thread.run_sync(run)
        except VcmError as exc:  # infrastructure the executor does not turn into a result (RATE_LIMITED, ...)
            return catalog.error_result(exc.to_dict())
        meta = {"tool_call_id": result.tool_call_id, "tokens": result.tokens}
        return catalog.call_result(result.payload, str(result.message["content"]), ok=result.ok, meta=meta)

    async def list_resources(ctx: Context, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        session = resolve(ctx)
        return types.ListResourcesResult(resources=catalog.resources(session.agent_id))

    async def list_templates(
        ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=catalog.templates())

    async def read_resource(ctx: Context, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        session = resolve(ctx)
        uri = str(params.uri)
        target = catalog.parse(uri)
        if target is None:
            raise MCPError(
                INVALID_PARAMS, f"unknown resource {uri!r}; resources/templates/list names them", {"uri": uri}
            )
        try:
            if target.agent_id != session.agent_id:
                raise not_found(target.agent_id)  # another agent reads like a missing one
            data = await anyio.to_thread.run_sync(partial(read, service, target))
        except VcmError as exc:
            code = INVALID_PARAMS if isinstance(exc, NotFound | ValidationError) else INTERNAL_ERROR
            raise MCPError(code, f"{exc.code}: {exc.message}", {"uri": uri, "error": exc.to_dict()}) from None
        return catalog.contents(uri, data)

    return Server(
        "vcm",
        version=_version(),
        title="vcm memory",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=catalog.input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


def read(service: MemoryService, target: catalog.Target) -> Any:
    """A resource's data, as the HTTP API renders the same thing."""
    agent = target.agent_id
    if target.kind == catalog.CONTEXT:
        return ContextOut.of(agent, service.context(agent)).model_dump(mode="json")
    if target.kind == catalog.PROMPT:  # a look: the facts it shows are not counted as used
        return ContextOut.built(agent, service.build_context(agent, record_use=False)).model_dump(mode="json")
    if target.kind == catalog.BLOCKS:
        if target.block_id is not None:
            return BlockOut.of(service.get_block(agent, target.block_id)).model_dump(mode="json", by_alias=True)
        blocks = [BlockOut.of(b) for b in service.list_blocks(agent)]
        return BlockList(blocks=blocks).model_dump(mode="json", by_alias=True)
    return {"facts": _facts(service, agent)}


def _facts(service: MemoryService, agent_id: str) -> list[dict[str, Any]]:
    """Active and shadow facts, most recently updated first, without embeddings."""
    return [{k: v for k, v in dataclasses.asdict(f).items() if k != "embedding"} for f in service.list_facts(agent_id)]


def _version() -> str:
    try:
        return metadata.version("vcm")
    except metadata.PackageNotFoundError:
        return ""


@contextmanager
def reserved_stdio() -> Iterator[tuple[int, int]]:
    """Keeps this process's stdin and stdout for the MCP wire from now on: yields private copies
    of them (not inherited by child processes) and points fds 0 and 1 at the null device and at
    stderr, so that nothing else this process or its children print (the in-process cold path,
    an embedding process, a progress bar) can reach the wire or read from it. Restored on exit."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        yield wire_in, wire_out
    finally:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)


async def serve_stdio(server: Server[Any], wire: tuple[int, int]) -> None:
    """Serve one MCP connection over ``wire`` (:func:`reserved_stdio`) until its input closes."""
    reader = io.TextIOWrapper(os.fdopen(wire[0], "rb", closefd=False), encoding="utf-8", errors="replace")
    writer = io.TextIOWrapper(os.fdopen(wire[1], "wb", closefd=False), encoding="utf-8")
    try:
        async with stdio_server(anyio.wrap_file(reader), anyio.wrap_file(writer)) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        writer.close()
        reader.close()
