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

The chat routes (``/v1/agents/{id}/chat``, ``/v1/chat/completions``, ``/v1/agents/{id}/stats``)
are :mod:`vcm.api.routes.chat`'s. The memory viewer's page, ``GET /v1/whoami`` and the agent's
live stream (``GET /v1/agents/{id}/stream``, server-sent events) are
:mod:`vcm.api.routes.viewer`'s. The change feed, conflict records and sync status of an agent's
client instances (``/changes``, ``/changes/stream``, ``/conflicts``, ``/instances``) are
:mod:`vcm.api.routes.sync`'s.

The routes live in :mod:`vcm.api.routes`, one module per resource (agents; messages and context;
blocks; recall; archival; events; tools; probes and metrics; lifecycle; snapshots; facts;
entities; state; chat; viewer; sync); what they share (who is calling, the idempotency and
revision headers) is :mod:`vcm.api.deps`; their bodies are :mod:`vcm.api.models` (the chat,
viewer and sync routes': :mod:`vcm.api.chat`, :mod:`vcm.api.viewer`, :mod:`vcm.api.sync`, with
the helpers of their streams). This module only builds the app: the
parts the routes use go on ``app.state`` (:class:`~vcm.api.deps.Api`), then the middleware, the
error handlers and the routers.

"agent" means that agent's own token or the admin token (see :mod:`vcm.api.auth`); errors are coded
JSON (see :mod:`vcm.api.errors`). Handlers are plain ``def``: the service blocks on Redis and
the store, so FastAPI runs them in its thread pool. Two exceptions, for the hot path's sake:
``/healthz`` answers from memory (:mod:`vcm.api.health`), and the append of a short message runs
on the event loop, its token checked inside its one Lua call (see
:func:`vcm.api.routes.messages.append_message`): a thread-pool hop and two extra round trips cost
more than the append itself.
"""

from fastapi import Depends, FastAPI

from vcm.api import errors as api_errors
from vcm.api.auth import TokenAuthority, admin_digest
from vcm.api.chat import Upstream
from vcm.api.deps import Api, ToolOutcome, ToolRunner, known_query
from vcm.api.health import HealthCache
from vcm.api.models import ErrorOut
from vcm.api.routes import (
    agents,
    anthropic,
    archival,
    blocks,
    chat,
    entities,
    events,
    facts,
    lifecycle,
    maintenance,
    messages,
    portable,
    principals,
    probes,
    recall,
    snapshots,
    state,
    sync,
    tools,
    viewer,
)
from vcm.service import MemoryService
from vcm.settings import Settings

# In the order they were declared before the split, so that matching and the OpenAPI document
# keep theirs.
ROUTERS = (
    agents.router, messages.router, blocks.router, recall.router, archival.router, events.router, tools.router,
    probes.router, lifecycle.router, snapshots.router, facts.router, entities.router, state.router, chat.router,
    viewer.router, sync.router, maintenance.router, anthropic.router, portable.router, principals.router,
)  # fmt: skip


def create_app(service: MemoryService, executor: ToolRunner | None, *, settings: Settings) -> FastAPI:
    """The app. Refuses (ConfigError) to build without an admin token: see :mod:`vcm.api.auth`."""
    authority = TokenAuthority(service.hot.tokens, admin_digest(settings), rebuild=service.rebuild)
    app = FastAPI(
        title="vcm",
        version="1",
        summary="Virtual context manager for LLM agents: main context, working blocks, recall and archival memory.",
        responses={500: {"model": ErrorOut, "description": "INTERNAL_ERROR (a bug)"}},
        dependencies=[Depends(known_query)],  # routes refuse query parameters they do not take
    )
    app.state.vcm = Api(service, authority, executor, settings, HealthCache(service.health), Upstream(settings.chat))
    api_errors.install(app)
    app.add_middleware(api_errors.BodyLimit, limit=settings.api.max_body_bytes)
    for router in ROUTERS:
        app.include_router(router)
    # A route, not a mount: a mount answers GET /metrics with a redirect to /metrics/.
    app.add_route(
        "/metrics", probes.metrics_route(service, authority, settings), methods=["GET"], include_in_schema=False
    )
    return app


__all__ = ["ToolOutcome", "ToolRunner", "create_app"]
