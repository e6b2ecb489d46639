"""The HTTP API: a FastAPI app over one :class:`~vcm.service.MemoryService`.

``create_app(service, executor, settings=...)`` builds it; there are no module globals, so a
process (``vcm serve``) or a test can build as many as it likes. Routes, all under ``/v1`` except
the probes:

======  ===========================================  ======  ==========================================
method  path                                         who     what
======  ===========================================  ======  ==========================================
POST    /v1/agents                                   admin   create an agent; returns its token once
GET     /v1/agents                                   admin   list agent ids
GET     /v1/agents/{id}                              agent   model, window, budget
POST    /v1/agents/{id}/token                        admin   issue a new token (the old one stops working)
POST    /v1/agents/{id}/messages                     agent   append to the FIFO (Idempotency-Key)
GET     /v1/agents/{id}/context                      agent   the assembled main context and its gauges
GET     /v1/agents/{id}/blocks                       agent   working (core) blocks
GET     /v1/agents/{id}/blocks/{block}               agent   one block; ETag = its _rev
PUT     /v1/agents/{id}/blocks/{block}               agent   create / edit (_rev in body or If-Match)
DELETE  /v1/agents/{id}/blocks/{block}?_rev=         agent   delete (_rev or If-Match)
POST    /v1/agents/{id}/evictions                    agent   move the oldest messages out now
POST    /v1/agents/{id}/recall                       agent   write a note straight into recall
GET     /v1/agents/{id}/recall?query=                agent   search recall (mode, limit, cursor, since, until)
POST    /v1/agents/{id}/archival                     agent   ingest a document
POST    /v1/agents/{id}/archival/search              agent   vector search (k, filters, cursor)
GET     /v1/tools                                    any     the LLM tool schemas
POST    /v1/agents/{id}/tools/{name}                 agent   run one tool call through the executor
GET     /v1/agents/{id}/events                       agent   audit events (kinds, since, until, actor, key, cursor)
GET     /v1/events                                   admin   audit events of every agent
GET     /v1/report                                   admin   Conveyance figure per agent and overall
GET     /healthz (and /health)                       nobody  Redis and store health, as last probed (from memory)
GET     /readyz                                      nobody  Redis and store health, probed now
GET     /metrics                                     nobody  Prometheus exposition (admin with [metrics] require_admin)
======  ===========================================  ======  ==========================================

The memory viewer's page, ``GET /v1/whoami`` and the agent's live stream (``GET
/v1/agents/{id}/stream``, server-sent events) are :mod:`vcm.api.viewer`'s.
The change feed, conflict records and sync status of an agent's client instances (``/changes``,
``/changes/stream``, ``/conflicts``, ``/instances``) are :mod:`vcm.api.sync`'s.

"agent" means that agent's own token or the admin token (see :mod:`vcm.api.auth`); errors are coded
JSON (see :mod:`vcm.api.errors`). Handlers are plain ``def``: the service blocks on Redis and
the store, so FastAPI runs them in its thread pool. Two exceptions, for the hot path's sake:
``/healthz`` answers from memory (:mod:`vcm.api.health`), and the append of a short message runs
on the event loop, its token checked inside its one Lua call (see ``append_message``): a
thread-pool hop and two extra round trips cost more than the append itself.

No ``from __future__ import annotations`` here: the routes are closures whose annotations name
local aliases (``Agent``, ``Admin``), which FastAPI can only resolve when they are evaluated at once.
"""

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Depends, FastAPI, Header, Path, Query, Request, Response, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from vcm import validation
from vcm.api import errors as api_errors
from vcm.api.auth import Caller, Principal, TokenAuthority, admin_digest, derived_token, digest
from vcm.api.chat import Upstream, chat_routes
from vcm.api.health import HealthCache
from vcm.api.models import (
    ERROR_RESPONSES,
    AgentCreate,
    AgentCreated,
    AgentId,
    AgentList,
    AgentOut,
    AppendOut,
    ArchivalHitOut,
    ArchivalIngest,
    ArchivalPage,
    ArchivalSearch,
    ArchivedOut,
    BatchOut,
    BlockList,
    BlockOut,
    BlockPut,
    BlockWriteOut,
    ComponentHealth,
    ConsolidatedOut,
    ContextOut,
    EntityGraphOut,
    ErrorOut,
    EventOut,
    EventPage,
    EvictIn,
    EvictOut,
    FactArchiveIn,
    FactHitOut,
    FactHits,
    FactIn,
    FactList,
    FactOut,
    FactStatsOut,
    HealthOut,
    IngestOut,
    MessageIn,
    MessageOut,
    RecallHitOut,
    RecallNote,
    RecallPage,
    RememberOut,
    RemovedOut,
    ReportOut,
    ResetOut,
    RestoreOut,
    SnapshotIn,
    SnapshotList,
    SnapshotOut,
    StateIn,
    StateList,
    StateOut,
    SummaryVersionList,
    SummaryVersionOut,
    TokenOut,
    ToolCall,
    ToolCallOut,
    ToolList,
    WorkingSetOut,
)
from vcm.api.sync import sync_routes
from vcm.api.viewer import viewer_routes
from vcm.errors import Conflict, NotFound, RevConflict, ValidationError
from vcm.eval.report import build_report
from vcm.lifecycle import new_snapshot_id
from vcm.obs import metrics
from vcm.obs.metrics_state import StateCollector
from vcm.service import MemoryService
from vcm.settings import Settings
from vcm.store.types import FactQuery
from vcm.tools import schemas as tools
from vcm.tools.executor import ToolExecutor


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
    ) -> ToolOutcome: ...


_ERRORS = ERROR_RESPONSES
_WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    409: {"model": ErrorOut, "description": "REV_CONFLICT or CONFLICT"},
    412: {"model": ErrorOut, "description": "REV_CONFLICT: If-Match does not name the current _rev"},
}

BlockId = Annotated[str, Path(description="the block's id", max_length=64)]
IdemHeader = Annotated[
    str | None,
    Header(alias="Idempotency-Key", description="a retry with the same key returns the first result"),
]
IfMatch = Annotated[str | None, Header(alias="If-Match", description="the block's current _rev (its ETag)")]


# Longest message content appended on the event loop (see append_message): ~4k tokens, about a
# millisecond of counting.
INLINE_APPEND_CHARS = 16_000


def create_app(service: MemoryService, executor: ToolRunner | None, *, settings: Settings) -> FastAPI:
    """The app. Refuses (ConfigError) to build without an admin token: see :mod:`vcm.api.auth`."""
    authority = TokenAuthority(
        service.redis, admin_digest(settings), rebuild=service.rebuild, on_change=service.durable.token_changed
    )
    app = FastAPI(
        title="vcm",
        version="1",
        summary="Virtual context manager for LLM agents: main context, working blocks, recall and archival memory.",
        responses={500: {"model": ErrorOut, "description": "INTERNAL_ERROR (a bug)"}},
    )
    api_errors.install(app)
    app.add_middleware(api_errors.BodyLimit, limit=settings.api.max_body_bytes)
    app.include_router(_agent_routes(service, authority))
    app.include_router(_memory_routes(service, authority, settings))
    app.include_router(_tool_routes(service, executor, authority))
    app.include_router(_probe_routes(service))
    app.include_router(_lifecycle_routes(service, authority))
    app.include_router(_knowledge_routes(service, authority))
    app.include_router(
        chat_routes(
            service, executor if isinstance(executor, ToolExecutor) else None, Upstream(settings.chat),
            _principal_dep(authority), _agent_dep(service, authority),
        )
    )  # fmt: skip
    app.include_router(viewer_routes(service, authority, _principal_dep(authority), _agent_dep(service, authority)))
    app.include_router(sync_routes(service, authority, _agent_dep(service, authority)))
    # A route, not a mount: a mount answers GET /metrics with a redirect to /metrics/.
    app.add_route("/metrics", _metrics_route(service, authority, settings), methods=["GET"], include_in_schema=False)
    return app


def _metrics_route(
    service: MemoryService, authority: TokenAuthority, settings: Settings
) -> Callable[[Request], Response]:
    """Prometheus exposition: this process's vcm_* families (every process's, summed, under
    PROMETHEUS_MULTIPROC_DIR) and the state read at scrape time (:mod:`vcm.obs.metrics_state`)."""
    m = settings.metrics
    registry = metrics.registry(
        StateCollector(service.redis, service.stats, agent_stats=service.stats,
                       memory_quota_items=m.memory_quota_items, max_agents=m.max_agent_series)
    )  # fmt: skip

    def exposition(request: Request) -> Response:
        if settings.metrics.require_admin:
            authority.principal(request.headers.get("authorization")).require_admin()
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return exposition


# --- auth dependencies ------------------------------------------------------------------------------

_bearer = HTTPBearer(auto_error=False, description="an agent's token, or the admin token")


def _principal_dep(authority: TokenAuthority) -> Callable[..., Principal]:
    def principal(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> Principal:
        # `credentials` is declared so that OpenAPI documents the bearer scheme; the raw header is
        # what is checked, so a malformed one gets a precise message instead of being dropped.
        return authority.principal(authorization)

    return principal


def _agent_dep(service: MemoryService, authority: TokenAuthority) -> Callable[..., Principal]:
    principal = _principal_dep(authority)

    def agent_scope(agent_id: AgentId, who: Annotated[Principal, Depends(principal)]) -> Principal:
        who.authorize(agent_id)  # before any lookup: another agent's id answers NOT_FOUND, existing or not
        service.agent(agent_id)  # unknown (or malformed) id: the same NOT_FOUND / VALIDATION_ERROR for admin
        return who

    return agent_scope


def _caller_dep(authority: TokenAuthority) -> Callable[..., Any]:
    """The caller of a route whose own Redis call checks the agent token (see
    :class:`~vcm.api.auth.Caller`). ``async`` and free of I/O in the common case, so it costs no
    thread-pool hop and no round trip; a token of another agent takes the full check (a Redis
    read, in the thread pool) to answer 401 or 404 exactly as the other routes do."""

    async def caller(
        agent_id: AgentId,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> Caller:
        claimed = authority.claim(authorization, agent_id)
        if claimed is not None:
            return claimed
        who: Principal = await run_in_threadpool(authority.principal, authorization)
        who.authorize(agent_id)  # another agent's id: NOT_FOUND, existing or not
        return Caller(who, None)

    return caller


def _admin_dep(authority: TokenAuthority) -> Callable[..., Principal]:
    principal = _principal_dep(authority)

    def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
        who.require_admin()
        return who

    return admin


def _one_key(header: str | None, body: str | None) -> str | None:
    if header is not None and body is not None and header != body:
        raise ValidationError(
            "the Idempotency-Key header and the body's idempotency_key differ; send one", field="idempotency_key"
        )
    key = header if header is not None else body
    validation.idempotency_key(key)
    return key


def _rev_of(if_match: str | None, body_rev: str | None) -> tuple[str | None, bool]:
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


def _etag(rev: str | None) -> dict[str, str]:
    return {"ETag": f'"{rev}"'} if rev else {}


# --- agents -----------------------------------------------------------------------------------------


def _agent_routes(service: MemoryService, authority: TokenAuthority) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["agents"])
    admin = _admin_dep(authority)
    agent_scope = _agent_dep(service, authority)
    Admin = Annotated[Principal, Depends(admin)]
    Agent = Annotated[Principal, Depends(agent_scope)]

    @router.post("/agents", status_code=201, response_model=AgentCreated, responses=_WRITE_ERRORS)
    def create_agent(body: AgentCreate, who: Admin) -> AgentCreated:
        """Create an agent and issue its bearer token. The token is in this response only (vcm keeps
        a hash), so this call cannot be replayed: repeating it answers 409 CONFLICT; issue a new
        token with POST /v1/agents/{id}/token."""
        validation.agent_id(body.agent_id)
        if authority.has_token(body.agent_id):
            raise _exists(body.agent_id)
        tool_list = [*body.tools, *(tools.tool_schemas() if body.vcm_tools else [])]
        info = service.create_agent(
            body.agent_id, model=body.model, system_prompt=body.system_prompt, tools=tool_list, actor=who.actor
        )
        token = authority.issue(body.agent_id, replace=False)
        if token is None:  # a concurrent create won the SET NX
            raise _exists(body.agent_id)
        return AgentCreated(agent=AgentOut.of(info), token=token)

    @router.get("/agents", response_model=AgentList, responses=_ERRORS)
    def list_agents(who: Admin) -> AgentList:
        return AgentList(agents=service.agents())

    @router.get("/agents/{agent_id}", response_model=AgentOut, responses=_ERRORS)
    def get_agent(agent_id: AgentId, who: Agent) -> AgentOut:
        return AgentOut.of(service.agent(agent_id))

    @router.post("/agents/{agent_id}/token", response_model=TokenOut, responses=_ERRORS)
    def rotate_token(agent_id: AgentId, who: Admin, idem: IdemHeader = None) -> TokenOut:
        """A new bearer token for the agent; the previous one stops working at once. With an
        Idempotency-Key a retry answers with the same new token instead of revoking it."""
        service.agent(agent_id)
        if idem is None:
            token = authority.issue(agent_id, replace=True)
            assert token is not None  # replace=True always writes
            return TokenOut(agent_id=agent_id, token=token)
        before = authority.current_digest(agent_id) or ""
        first = {"nonce": secrets.token_urlsafe(24), "before": before}
        claimed, _ = service.claim(agent_id, idem, "rotate_token", {}, first)
        token = derived_token(agent_id, str(claimed["nonce"]), service.cursor_secret())
        # Installed unless a later rotation replaced the token this one replaced (then the retry
        # still answers as the first call did, but changes nothing).
        if authority.current_digest(agent_id) != digest(token):
            authority.install(agent_id, token, if_digest=str(claimed["before"]) or None)
        return TokenOut(agent_id=agent_id, token=token)

    @router.get("/report", response_model=ReportOut, responses=_ERRORS, tags=["admin"])
    def conveyance_report(
        who: Admin,
        agent_id: Annotated[list[str] | None, Query(description="only these agents (repeat)")] = None,
        since: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    ) -> ReportOut:
        """The Conveyance figure per agent and overall (see docs/operations.md)."""
        for one in agent_id or ():
            validation.agent_id(one)
        return ReportOut.model_validate(build_report(service, agent_id, since=since).as_dict())

    return router


def _exists(agent_id: str) -> Conflict:
    # Conflict is the hot path's class for the CONFLICT code.
    return Conflict(
        f"agent {agent_id!r} already exists and has a token; issue a new one with POST /v1/agents/{agent_id}/token",
        agent_id=agent_id,
    )


# --- memory -----------------------------------------------------------------------------------------


def _memory_routes(service: MemoryService, authority: TokenAuthority, settings: Settings) -> APIRouter:
    router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["memory"])
    agent_scope = _agent_dep(service, authority)
    Agent = Annotated[Principal, Depends(agent_scope)]
    # The hot path's two busiest routes check the token inside their one Redis call.
    TokenChecked = Annotated[Caller, Depends(_caller_dep(authority))]

    @router.post("/messages", response_model=AppendOut, responses=_WRITE_ERRORS)
    async def append_message(
        agent_id: AgentId, body: MessageIn, who: TokenChecked, idem: IdemHeader = None
    ) -> AppendOut:
        """Append a message to the FIFO: one Redis round trip (the token check, the agent, the
        idempotency key and the budget decision are one Lua call); the cold-path work it starts
        is published in the background."""
        append = partial(
            service.append,
            agent_id,
            body.role,
            body.content,
            name=body.name,
            pinned=body.pinned,
            metadata=body.metadata,
            tool_call_id=body.tool_call_id,
            tool_calls=body.tool_calls,
            idempotency_key=_one_key(idem, body.idempotency_key),
            actor=who.principal.actor,
            token_sha256=who.token_sha256,
        )
        # A short message is appended on the event loop: counting it and the one Redis call take
        # a fraction of a millisecond, less than handing it to the thread pool and back (two
        # thread switches, which on a busy 2-core machine cost more than the append). A long
        # one (counting 400k characters takes ~20 ms) or one with tool calls goes to the pool,
        # so it cannot hold up the other requests of this process.
        inline = len(body.content) <= INLINE_APPEND_CHARS and not body.tool_calls
        res = append() if inline else await run_in_threadpool(append)
        return AppendOut(
            message_id=res.message_id,
            seq=res.seq,
            tokens=res.tokens,
            total=res.total,
            action=res.action,
            batch=BatchOut.of(res.batch),
            pressure_message_id=res.pressure_message_id,
            target_unreachable=res.target_unreachable,
            replayed=res.replayed,
        )

    @router.get("/context", response_model=ContextOut, responses=_ERRORS)
    def get_context(
        agent_id: AgentId,
        who: TokenChecked,
        built: bool = False,
        query: Annotated[str | None, Query(max_length=4000)] = None,
        user: Annotated[str | None, Query(max_length=200)] = None,
    ) -> ContextOut:
        """The main context as the hot state holds it; ``built=true``: the prompt the model sees,
        with the builder's layers (identity, tools hint, state, sticky facts, relevant memory for
        ``query`` or the latest user message, skills), each with its tokens and sources. Looking
        changes nothing: the facts shown are not counted as used."""
        if built:
            ctx = service.build_context(
                agent_id, query=query, user=user, token_sha256=who.token_sha256, record_use=False
            )
            return ContextOut.built(agent_id, ctx)
        return ContextOut.of(agent_id, service.context(agent_id, token_sha256=who.token_sha256))

    @router.get("/blocks", response_model=BlockList, responses=_ERRORS)
    def list_blocks(agent_id: AgentId, who: Agent) -> BlockList:
        return BlockList(blocks=[BlockOut.of(b) for b in service.list_blocks(agent_id)])

    @router.get("/blocks/{block_id}", response_model=BlockOut, responses=_ERRORS)
    def get_block(agent_id: AgentId, block_id: BlockId, who: Agent, response: Response) -> BlockOut:
        block = service.get_block(agent_id, block_id)
        response.headers.update(_etag(block.rev))
        return BlockOut.of(block)

    @router.put("/blocks/{block_id}", response_model=BlockWriteOut, responses=_WRITE_ERRORS)
    def put_block(
        agent_id: AgentId,
        block_id: BlockId,
        body: BlockPut,
        who: Agent,
        response: Response,
        idem: IdemHeader = None,
        if_match: IfMatch = None,
    ) -> BlockWriteOut | Response:
        """Create a block (no _rev) or replace it (its current _rev, in the body or as If-Match)."""
        rev, from_header = _rev_of(if_match, body.rev)
        try:
            res = service.put_block(
                agent_id,
                block_id,
                body.content,
                role=body.role,
                pinned=body.pinned,
                expected_rev=rev,
                metadata=body.metadata,
                idempotency_key=_one_key(idem, body.idempotency_key),
                actor=who.actor,
                justification=body.justification,
            )
        except RevConflict as exc:
            if from_header:
                return _precondition_failed(exc)
            raise
        response.headers.update(_etag(res.rev))
        return BlockWriteOut.of(res)

    @router.delete("/blocks/{block_id}", response_model=BlockWriteOut, responses=_WRITE_ERRORS)
    def delete_block(
        agent_id: AgentId,
        block_id: BlockId,
        who: Agent,
        rev: Annotated[str | None, Query(alias="_rev", description="the block's current _rev")] = None,
        idem: IdemHeader = None,
        if_match: IfMatch = None,
    ) -> BlockWriteOut | Response:
        expected, from_header = _rev_of(if_match, rev)
        if expected is None:
            raise ValidationError("deleting a block needs its _rev (query ?_rev= or If-Match)", field="_rev")
        try:
            res = service.delete_block(
                agent_id, block_id, expected, idempotency_key=_one_key(idem, None), actor=who.actor
            )
        except RevConflict as exc:
            if from_header:
                return _precondition_failed(exc)
            raise
        return BlockWriteOut.of(res)

    @router.post("/evictions", response_model=EvictOut, responses=_WRITE_ERRORS)
    def evict(agent_id: AgentId, body: EvictIn, who: Agent, idem: IdemHeader = None) -> EvictOut:
        """Move the oldest ``count`` unpinned messages (fewer when fewer are unpinned) out of the
        context now. An eviction always frees room: when those messages hold no more tokens than
        the placeholder replacing them adds, the next oldest go too; when all unpinned messages
        cannot pay for it, the request is refused with ``TOKEN_BUDGET_EXCEEDED``."""
        total, batch = service.evict(
            agent_id, body.count, idempotency_key=_one_key(idem, body.idempotency_key), actor=who.actor
        )
        return EvictOut(total=total, batch=BatchOut.of(batch))

    @router.post("/recall", response_model=MessageOut, responses=_WRITE_ERRORS)
    def write_recall(agent_id: AgentId, body: RecallNote, who: Agent, idem: IdemHeader = None) -> MessageOut:
        """A note straight into recall memory (searchable), never into the context window."""
        key = _one_key(idem, body.idempotency_key)
        if key is None:
            raise ValidationError("a recall note needs an idempotency key", field="idempotency_key")
        msg = service.write_recall(agent_id, body.content, role=body.role, idempotency_key=key, actor=who.actor)
        return MessageOut.of(msg)

    @router.get("/recall", response_model=RecallPage, responses=_ERRORS)
    def search_recall(
        agent_id: AgentId,
        who: Agent,
        query: Annotated[str, Query(description="search text")],
        mode: Annotated[str, Query(pattern="^(text|vector|hybrid)$")] = "hybrid",
        limit: Annotated[int, Query(ge=1, le=1000)] = 10,
        cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
        since: Annotated[float | None, Query(allow_inf_nan=False, description="unix time, inclusive")] = None,
        until: Annotated[float | None, Query(allow_inf_nan=False, description="unix time, exclusive")] = None,
    ) -> RecallPage:
        res = service.search_recall(agent_id, query, limit=limit, cursor=cursor, since=since, until=until, mode=mode)
        items = [
            RecallHitOut(message=MessageOut.of(h.message), score=h.score, **mark)
            for h, mark in zip(res.page.items, res.marks, strict=True)
        ]
        return RecallPage(items=items, next_cursor=res.page.next_cursor, mode=res.mode)

    @router.post("/archival", response_model=IngestOut, status_code=202, responses=_WRITE_ERRORS)
    def ingest_archival(agent_id: AgentId, body: ArchivalIngest, who: Agent, idem: IdemHeader = None) -> IngestOut:
        """Queue a document for archival memory (the ``ingest`` workers chunk, embed and store it)
        and return its job at once (202): poll ``GET /archival/jobs/{job_id}`` until ``done`` or
        ``failed``. The same document always maps to the same job; an idempotency key reused for a
        different document answers IDEMPOTENCY_MISMATCH and queues nothing."""
        job = service.ingest_archival(
            agent_id,
            body.text,
            doc_id=body.doc_id,
            source=body.source,
            metadata=body.metadata,
            actor=who.actor,
            idempotency_key=_one_key(idem, body.idempotency_key),
        )
        return IngestOut.model_validate(job.as_dict())

    @router.get("/archival/jobs/{job_id}", response_model=IngestOut, responses=_ERRORS)
    def ingest_job(agent_id: AgentId, job_id: str, who: Agent) -> IngestOut:
        """An ingestion job: queued, running (chunks_done of chunks_total), done (result) or failed (error)."""
        return IngestOut.model_validate(service.ingest_job(agent_id, job_id).as_dict())

    @router.post("/archival/search", response_model=ArchivalPage, responses=_ERRORS)
    def search_archival(agent_id: AgentId, body: ArchivalSearch, who: Agent) -> ArchivalPage:
        res = service.search_archival(agent_id, body.query, k=body.k, filters=body.filters, cursor=body.cursor)
        items = [ArchivalHitOut.of(h, mark) for h, mark in zip(res.page.items, res.marks, strict=True)]
        return ArchivalPage(items=items, next_cursor=res.page.next_cursor)

    @router.get("/events", response_model=EventPage, responses=_ERRORS)
    def agent_events(agent_id: AgentId, who: Agent, f: Annotated[EventFilter, Depends(_event_filter)]) -> EventPage:
        return _events(service, agent_id, f)

    return router


def _precondition_failed(exc: RevConflict) -> Response:
    return api_errors.error_response(str(exc.code), exc.message, 412, **exc.details)


@dataclass(frozen=True)
class EventFilter:
    """The audit-log filters both event routes take."""

    kinds: list[str] | None
    since: float | None
    until: float | None
    actor: str | None
    idempotency_key: str | None
    limit: int
    cursor: str | None


def _event_filter(
    kinds: Annotated[list[str] | None, Query(description="only these kinds (repeat the parameter)")] = None,
    since: Annotated[float | None, Query(allow_inf_nan=False, description="unix seconds, inclusive")] = None,
    until: Annotated[float | None, Query(allow_inf_nan=False, description="unix seconds, exclusive")] = None,
    actor: Annotated[str | None, Query(max_length=200, description="e.g. api:agent:<id>, cli, worker:spool")] = None,
    idempotency_key: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: str | None = None,
) -> EventFilter:
    return EventFilter(kinds, since, until, actor, idempotency_key, limit, cursor)


def _events(service: MemoryService, agent_id: str | None, f: EventFilter) -> EventPage:
    page = service.events(
        agent_id,
        f.kinds,
        since=f.since,
        until=f.until,
        actor=f.actor,
        idempotency_key=f.idempotency_key,
        limit=f.limit,
        cursor=f.cursor,
    )
    return EventPage(items=[EventOut.of(e) for e in page.items], next_cursor=page.next_cursor)


# --- tools, admin events, probes ---------------------------------------------------------------------


def _tool_routes(service: MemoryService, executor: ToolRunner | None, authority: TokenAuthority) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["tools"])
    principal = _principal_dep(authority)
    admin = _admin_dep(authority)
    agent_scope = _agent_dep(service, authority)

    @router.get("/tools", response_model=ToolList, responses=_ERRORS)
    def list_tools(who: Annotated[Principal, Depends(principal)]) -> ToolList:
        """vcm's tools as OpenAI function definitions (also ``vcm.client.tool_schemas()``)."""
        return ToolList(tools=tools.tool_schemas())

    @router.post("/agents/{agent_id}/tools/{name}", response_model=ToolCallOut, responses=_ERRORS)
    def call_tool(
        agent_id: AgentId,
        name: Annotated[str, Path(max_length=64)],
        body: ToolCall,
        who: Annotated[Principal, Depends(agent_scope)],
        idem: IdemHeader = None,
    ) -> dict[str, Any]:
        """Run one tool call as the model made it. The result (``ok`` false with a coded error in
        ``payload`` included) is what goes back to the model, so it comes with 200; only a request
        that names no agent or tool, or is not a JSON object, is an HTTP error."""
        if name not in tools.TOOL_NAMES:
            raise NotFound(f"unknown tool {name!r}; GET /v1/tools lists them", tool=name)
        if executor is None:
            raise ValidationError("tool execution is not configured in this process", field="name")
        arguments = dict(body.arguments)
        if idem is not None and "idempotency_key" in tools.schema_of(name)["properties"]:
            arguments["idempotency_key"] = _one_key(idem, arguments.get("idempotency_key"))
        result = executor.execute(agent_id, name, arguments, tool_call_id=body.tool_call_id, actor=who.actor)
        return result.as_dict()

    @router.get("/events", response_model=EventPage, responses=_ERRORS, tags=["admin"])
    def all_events(
        who: Annotated[Principal, Depends(admin)],
        f: Annotated[EventFilter, Depends(_event_filter)],
        agent_id: Annotated[str | None, Query(description="only this agent")] = None,
    ) -> EventPage:
        if agent_id is not None:
            validation.agent_id(agent_id)
        return _events(service, agent_id, f)

    return router


def _probe_routes(service: MemoryService) -> APIRouter:
    router = APIRouter(tags=["probes"])
    cache = HealthCache(service.health)

    async def health(response: Response) -> HealthOut:
        """Health of Redis and the store as last probed (at most a second or so ago; see
        :mod:`vcm.api.health`): answered from memory, with no thread-pool hop and no I/O. No auth,
        and no details beyond ok and the backend."""
        report = cache.cached()
        if report is None:  # the first ask of this process: probe once
            report = await run_in_threadpool(cache.refresh)
        return _health_out(report, response)

    def ready(response: Response) -> HealthOut:
        """Redis and the store probed now (a PING and the store's health query)."""
        return _health_out(cache.refresh(), response)

    router.add_api_route("/healthz", health, methods=["GET"], response_model=HealthOut)
    # compose/docker-compose.yml probes /health.
    router.add_api_route("/health", health, methods=["GET"], response_model=HealthOut, include_in_schema=False)
    router.add_api_route("/readyz", ready, methods=["GET"], response_model=HealthOut)
    return router


def _health_out(report: Mapping[str, Any], response: Response) -> HealthOut:
    response.status_code = 200 if report["ok"] else 503
    return HealthOut(
        ok=report["ok"],
        redis=ComponentHealth(ok=report["redis"], backend="redis"),
        store=ComponentHealth(ok=report["store"], backend=report["store_backend"]),
    )


__all__ = ["ToolOutcome", "ToolRunner", "create_app"]


# --- lifecycle and snapshots ----------------------------------------------------------------------


def _lifecycle_routes(service: MemoryService, authority: TokenAuthority) -> APIRouter:
    """Delete, forget, reset and snapshots: the admin or the agent itself; keyed retries answer
    as the first call did."""
    router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["lifecycle"])
    Agent = Annotated[Principal, Depends(_agent_dep(service, authority))]
    Anyone = Annotated[Principal, Depends(_principal_dep(authority))]

    @router.delete("", response_model=RemovedOut, responses=_WRITE_ERRORS)
    def delete_agent(agent_id: AgentId, who: Anyone) -> RemovedOut:
        """Delete the agent and everything of it (store, indexes, Redis, metrics). A repeat by
        the admin answers with nothing removed; the agent's own token stops working with it."""
        who.authorize(agent_id)
        validation.agent_id(agent_id)
        return RemovedOut(agent_id=agent_id, removed=service.delete_agent(agent_id, actor=who.actor))

    @router.delete("/messages/{message_id}", response_model=RemovedOut, responses=_WRITE_ERRORS)
    def forget_message(agent_id: AgentId, message_id: Annotated[str, Path(max_length=256)], who: Agent) -> RemovedOut:
        """Forget one message (recall and every index). One still in the main context: CONFLICT."""
        return RemovedOut(agent_id=agent_id, removed=service.forget_message(agent_id, message_id, actor=who.actor))

    @router.delete("/archival/{doc_id}", response_model=RemovedOut, responses=_WRITE_ERRORS)
    def forget_document(agent_id: AgentId, doc_id: Annotated[str, Path(max_length=256)], who: Agent) -> RemovedOut:
        return RemovedOut(agent_id=agent_id, removed=service.forget_document(agent_id, doc_id, actor=who.actor))

    @router.post("/reset", response_model=ResetOut, responses=_WRITE_ERRORS)
    def reset(agent_id: AgentId, who: Agent, idem: IdemHeader = None) -> ResetOut:
        """Start the conversation over: FIFO and summary go to recall, blocks stay."""
        validation.idempotency_key(idem)
        if idem is not None:
            _, replayed = service.claim(agent_id, idem, "reset", {}, {"done": True})
            if replayed:
                return ResetOut(agent_id=agent_id, messages_to_recall=0)
        out = service.reset(agent_id, actor=who.actor)
        return ResetOut(agent_id=agent_id, messages_to_recall=int(out["messages_to_recall"]))

    @router.post("/snapshots", status_code=201, response_model=SnapshotOut, responses=_WRITE_ERRORS)
    def create_snapshot(agent_id: AgentId, body: SnapshotIn, who: Agent, idem: IdemHeader = None) -> SnapshotOut:
        key = _one_key(idem, body.idempotency_key)
        wanted = None
        if key is not None:
            first = {"snapshot_id": new_snapshot_id(body.kind, service.clock())}
            claimed, _ = service.claim(agent_id, key, "snapshot", body.model_dump(exclude={"idempotency_key"}), first)
            wanted = str(claimed["snapshot_id"])
            try:
                return SnapshotOut.of(service.get_snapshot(agent_id, wanted))
            except NotFound:
                pass  # the first attempt died before writing it: write it now
        record = service.create_snapshot(
            agent_id, kind=body.kind, reason=body.reason, ttl_s=body.ttl_s, snapshot_id=wanted, actor=who.actor
        )
        return SnapshotOut.of(record)

    @router.get("/snapshots", response_model=SnapshotList, responses=_ERRORS)
    def list_snapshots(agent_id: AgentId, who: Agent) -> SnapshotList:
        return SnapshotList(snapshots=[SnapshotOut.of(s) for s in service.list_snapshots(agent_id)])

    @router.post("/snapshots/{snapshot_id}/restore", response_model=RestoreOut, responses=_WRITE_ERRORS)
    def restore_snapshot(
        agent_id: AgentId, snapshot_id: Annotated[str, Path(max_length=256)], who: Agent, idem: IdemHeader = None
    ) -> RestoreOut:
        """Return the agent to the snapshot (checksum verified first: SNAPSHOT_CORRUPT changes
        nothing); the state before is kept as a pre_restore snapshot."""
        validation.idempotency_key(idem)
        if idem is not None:
            _, replayed = service.claim(agent_id, idem, "restore", {"snapshot_id": snapshot_id}, {"done": True})
            if replayed:  # a retry must not undo what happened since the first call
                return RestoreOut(agent_id=agent_id, snapshot_id=snapshot_id, pre_restore_snapshot_id="")
        out = service.restore_snapshot(agent_id, snapshot_id, actor=who.actor)
        return RestoreOut.model_validate(out)

    @router.delete("/snapshots/{snapshot_id}", response_model=RemovedOut, responses=_WRITE_ERRORS)
    def delete_snapshot(agent_id: AgentId, snapshot_id: Annotated[str, Path(max_length=256)], who: Agent) -> RemovedOut:
        deleted = service.delete_snapshot(agent_id, snapshot_id, actor=who.actor)
        return RemovedOut(agent_id=agent_id, removed={"snapshots": 1} if deleted else {})

    @router.get("/summary/versions", response_model=SummaryVersionList, responses=_ERRORS)
    def summary_versions(
        agent_id: AgentId, who: Agent, limit: Annotated[int, Query(ge=1, le=1000)] = 20
    ) -> SummaryVersionList:
        versions = service.summary_versions(agent_id, limit=limit)
        return SummaryVersionList(
            versions=[
                SummaryVersionOut(batch_id=v.batch_id, text=v.text, tokens=v.tokens, rev=v.rev, created_at=v.created_at)
                for v in versions
            ]
        )

    return router


# --- facts and state --------------------------------------------------------------------------------


def _knowledge_routes(service: MemoryService, authority: TokenAuthority) -> APIRouter:
    """Structured memory: facts (remember, list, search, stats, get, forget, archive, consolidate)
    and state (key/values with TTL); the agent itself or the admin."""
    router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["facts"])
    Agent = Annotated[Principal, Depends(_agent_dep(service, authority))]
    TypeQ = Annotated[list[str] | None, Query(alias="type", description="fact types (repeat)")]
    TagQ = Annotated[list[str] | None, Query(alias="tag", description="tags, all required (repeat)")]
    StatusQ = Annotated[list[str] | None, Query(alias="status", description="default: active and shadow")]

    @router.post("/facts", response_model=RememberOut, responses=_WRITE_ERRORS)
    def remember(agent_id: AgentId, body: FactIn, who: Agent, idem: IdemHeader = None) -> RememberOut:
        """Keep a fact: the policy guard first (POLICY_REFUSED without a justification), then
        dedup: MATCH joins an existing fact, CONFLICT keeps both values of a key, NEW adds it."""
        res = service.remember(
            agent_id, body.value, type=body.type, scope=body.scope, key=body.key, category=body.category,
            tags=body.tags, importance=body.importance, confidence=body.confidence,
            evidence=[e.model_dump(exclude_none=True) for e in body.evidence], status=body.status, ttl_s=body.ttl_s,
            justification=body.justification, idempotency_key=_one_key(idem, body.idempotency_key), actor=who.actor,
        )  # fmt: skip
        return RememberOut(
            decision=res.decision, fact=FactOut.of(res.fact), conflicts=[FactOut.of(f) for f in res.conflicts]
        )

    @router.get("/facts", response_model=FactList, responses=_ERRORS)
    def list_facts(
        agent_id: AgentId,
        who: Agent,
        types: TypeQ = None,
        tags: TagQ = None,
        statuses: StatusQ = None,
        scope: str | None = None,
        key: str | None = None,
        category: str | None = None,
        min_importance: Annotated[float | None, Query(ge=0.0, le=1.0)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> FactList:
        query = FactQuery(
            scope=scope, types=types, key=key, statuses=statuses or ("active", "shadow"), category=category,
            tags=tags, min_importance=min_importance, limit=limit,
        )  # fmt: skip
        return FactList(facts=[FactOut.of(f) for f in service.list_facts(agent_id, query)])

    @router.get("/facts/search", response_model=FactHits, responses=_ERRORS)
    def search_facts(
        agent_id: AgentId,
        who: Agent,
        query: Annotated[str, Query(min_length=1, max_length=4000)],
        types: TypeQ = None,
        tags: TagQ = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 10,
    ) -> FactHits:
        hits = service.search_facts(agent_id, query, filters=FactQuery(types=types, tags=tags, limit=limit))
        return FactHits(hits=[FactHitOut(fact=FactOut.of(h.fact), score=h.score) for h in hits])

    @router.get("/facts/stats", response_model=FactStatsOut, responses=_ERRORS)
    def fact_stats(agent_id: AgentId, who: Agent) -> FactStatsOut:
        return FactStatsOut.model_validate(service.fact_stats(agent_id))

    @router.post("/facts/archive", response_model=ArchivedOut, responses=_WRITE_ERRORS)
    def archive(agent_id: AgentId, body: FactArchiveIn, who: Agent) -> ArchivedOut:
        """Move matching facts to ``archived`` (kept, no longer recalled or searched)."""
        query = FactQuery(types=body.types, tags=body.tags, category=body.category, until=body.until, limit=1000)
        if body.max_importance is not None:
            facts = [f for f in service.list_facts(agent_id, query) if f.importance <= body.max_importance]
            ids = {f.fact_id for f in facts}
            archived = service.archive_facts(agent_id, query, actor=who.actor, only=ids)
        else:
            archived = service.archive_facts(agent_id, query, actor=who.actor)
        return ArchivedOut(archived=archived)

    @router.post("/facts/consolidate", response_model=ConsolidatedOut, responses=_WRITE_ERRORS)
    def consolidate(agent_id: AgentId, who: Agent) -> ConsolidatedOut:
        """Run the replay test on the agent's shadow facts now (beat does it periodically)."""
        return ConsolidatedOut.model_validate(service.consolidate(agent_id, actor=who.actor))

    @router.get("/working-set", response_model=WorkingSetOut, responses=_ERRORS)
    def working_set(agent_id: AgentId, who: Agent, query: Annotated[str, Query(max_length=4000)] = "") -> WorkingSetOut:
        """The Working Set (seed 002): goal, constraints, top facts, entities, relations, open
        questions, next actions and risk flags, each capped, ranked by utility for ``query``."""
        return WorkingSetOut.model_validate(service.working_set(agent_id, query).as_dict())

    @router.get("/entities/{name}", response_model=EntityGraphOut, responses=_ERRORS)
    def entity_graph(
        agent_id: AgentId,
        name: Annotated[str, Path(max_length=80)],
        who: Agent,
        depth: Annotated[int, Query(ge=1, le=3)] = 1,
    ) -> EntityGraphOut:
        """An entity (any case) with the entities related to it within ``depth`` hops of the
        graph, the relations among them and the messages that mention it."""
        g = service.entity_graph(agent_id, name, depth=depth)
        return EntityGraphOut(
            entity=FactOut.of(g.entity),
            neighbours=[FactOut.of(f) for f in g.neighbours],
            relations=[FactOut.of(f) for f in g.relations],
            mentioned_in=list(g.mentioned_in),
        )

    @router.get("/facts/{fact_id}", response_model=FactOut, responses=_ERRORS)
    def get_fact(agent_id: AgentId, fact_id: Annotated[str, Path(max_length=256)], who: Agent) -> FactOut:
        return FactOut.of(service.get_fact(agent_id, fact_id))

    @router.delete("/facts/{fact_id}", response_model=RemovedOut, responses=_WRITE_ERRORS)
    def forget_fact(agent_id: AgentId, fact_id: Annotated[str, Path(max_length=256)], who: Agent) -> RemovedOut:
        deleted = service.forget_fact(agent_id, fact_id, actor=who.actor)
        return RemovedOut(agent_id=agent_id, removed={"facts": 1} if deleted else {})

    @router.get("/state", response_model=StateList, responses=_ERRORS)
    def list_state(agent_id: AgentId, who: Agent) -> StateList:
        return StateList(state=[StateOut.of(e) for e in service.list_state(agent_id)])

    @router.delete("/state", response_model=RemovedOut, responses=_WRITE_ERRORS)
    def clear_state(agent_id: AgentId, who: Agent) -> RemovedOut:
        return RemovedOut(agent_id=agent_id, removed={"state": service.delete_state(agent_id, None, actor=who.actor)})

    @router.get("/state/{key}", response_model=StateOut, responses=_ERRORS)
    def get_state(agent_id: AgentId, key: Annotated[str, Path(max_length=128)], who: Agent) -> StateOut:
        return StateOut.of(service.get_state(agent_id, key))

    @router.put("/state/{key}", response_model=StateOut, responses=_WRITE_ERRORS)
    def set_state(agent_id: AgentId, key: Annotated[str, Path(max_length=128)], body: StateIn, who: Agent) -> StateOut:
        """Set a key (``_rev``: only if unchanged since, ``""``: only if it does not exist yet;
        ``ttl_s``: expires after that long)."""
        entry = service.set_state(
            agent_id, key, body.value, ttl_s=body.ttl_s, expected_rev=body.rev, justification=body.justification,
            actor=who.actor,
        )  # fmt: skip
        return StateOut.of(entry)

    @router.delete("/state/{key}", response_model=RemovedOut, responses=_WRITE_ERRORS)
    def delete_state(
        agent_id: AgentId,
        key: Annotated[str, Path(max_length=128)],
        who: Agent,
        rev: Annotated[str | None, Query(alias="_rev")] = None,
    ) -> RemovedOut:
        removed = service.delete_state(agent_id, key, expected_rev=rev, actor=who.actor)
        return RemovedOut(agent_id=agent_id, removed={"state": removed} if removed else {})

    return router
