"""Client instances of an agent (:mod:`vcm.replicas`; the client side is :mod:`vcm.sync`): the
agent's change feed, the conflicts instances resolve, and the sync status they report.

======  ========================================  =====  ======================================================
method  path                                      who    what
======  ========================================  =====  ======================================================
GET     /v1/agents/{id}/changes?after=&limit=     agent  a page of the change feed (polling); no ``after``: none,
                                                         only where the feed is now (``next_after``)
GET     /v1/agents/{id}/changes/stream            agent  the change feed as server-sent events, from
                                                         ``Last-Event-ID`` or ``?after=`` (none: from now on)
POST    /v1/agents/{id}/conflicts                 agent  keep a conflict an instance resolved (an audit row)
PUT     /v1/agents/{id}/instances/{instance_id}   agent  an instance's sync status after a sync
GET     /v1/agents/{id}/instances                 agent  every instance's latest status, with its age
======  ========================================  =====  ======================================================

**The stream** is the viewer's (:func:`vcm.api.viewer.feed`): read with ``fetch()`` and the
ordinary bearer header, the token re-checked every second, a keepalive comment when idle, ``bye``
after ``[sync] max_stream_s``. Frames: ``ready`` (first; ``head``: the feed's newest change),
``change`` (a :class:`ChangeOut`; its ``id:`` is the change id, so a client that reconnects with
``Last-Event-ID`` misses nothing), ``gap`` (changes after the client's position were lost:
drop the cache of the agent), ``error`` (coded; the stream ends), ``bye``. Each tick reads the
feed once (one ``XRANGE``) every ``[sync] poll_s``. It is left out of the OpenAPI schema, like
the viewer's stream: it is not a JSON operation.

No ``from __future__ import annotations``: the routes' annotations name dependencies passed in.
"""

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from vcm.api.auth import Principal, TokenAuthority
from vcm.api.models import ERROR_RESPONSES, AgentId, RequestBody
from vcm.api.viewer import STREAM_HEADERS, feed, frame
from vcm.errors import ValidationError
from vcm.service import MemoryService

POSITION = r"^(?:0|[0-9]{1,20}-[0-9]{1,20})$"
_POSITION = re.compile(POSITION)
# Changes sent per tick of a stream at most; a client further behind gets the rest next tick.
STREAM_PAGE = 500
# The stream re-checks the bearer token this often (a rotated token or deleted agent ends it).
RECHECK_S = 1.0

InstanceId = Annotated[
    str, Path(description="the client instance's id", max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")
]
Number = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=2**53)]


class ChangeOut(BaseModel):
    id: str = Field(description="the change's position in the feed (resume after it)")
    kind: str = Field(description="block, state, fact, or agent (every kind at once)")
    key: str = Field(description="block id, state key or fact id; * for all")
    version: str | None = Field(description="the new _rev or fact version; null when deleted")
    op: str = Field(description="put, delete, clear (every state key), reset (everything), start (the feed began)")
    at: float = Field(description="server time of the change (unix seconds)")


class ChangePageOut(BaseModel):
    changes: list[ChangeOut]
    next_after: str = Field(description="pass as after= to read on")
    head: str = Field(description="the newest change in the feed now")
    gap: bool = Field(description="changes after `after` were lost (trimmed or reset): drop the cache of the agent")


class LocalVersion(RequestBody):
    base_version: str | None = Field(None, max_length=128, description="the version the local change was based on")
    edited_at: Number | None = Field(None, description="when the instance made the change (its clock)")
    deleted: bool = Field(False, description="the local change deletes")


class RemoteVersion(RequestBody):
    version: str | None = Field(None, max_length=128, description="the version the server held")
    updated_at: Number | None = Field(None, description="when the server wrote it (server time)")
    deleted: bool = Field(False, description="the server no longer holds it")


class ConflictIn(RequestBody):
    conflict_id: str = Field(max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")
    instance_id: str = Field(max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")
    kind: Literal["block", "state"]
    key: str = Field(min_length=1, max_length=512)
    strategy: Literal["reject", "last_write_wins", "merge"]
    resolution: Literal["rejected", "local_won", "remote_won", "merged"]
    local: LocalVersion
    remote: RemoteVersion
    losing_value: Any = Field(None, description="last_write_wins: the value it overwrote or dropped")


class ConflictOut(BaseModel):
    event_id: str = Field(description="the sync_conflict audit row")


class CacheCounts(RequestBody):
    entries: Count = 0
    hits: Count = 0
    misses: Count = 0


class InstanceStatusIn(RequestBody):
    status: Literal["synced", "syncing", "conflict", "error"]
    last_sync_at: Number | None = Field(None, description="when the last sync ended (the instance's clock)")
    sync_version: str | None = Field(None, max_length=64, description="the feed position the instance has applied")
    pending: Count = Field(0, description="local changes not yet pushed")
    conflicts: Count = Field(0, description="conflicts found since the instance started")
    syncs: Count = Field(0, description="syncs since the instance started (runs and write-through pushes)")
    failures: Count = Field(0, description="failed syncs since the instance started")
    consecutive_failures: Count = 0
    last_sync_latency_s: Number | None = None
    sync_interval_s: Number | None = Field(None, description="its periodic sync interval (0: none)")
    last_error: str | None = Field(None, max_length=200)
    host: str | None = Field(None, max_length=200)
    cache: CacheCounts = Field(default_factory=CacheCounts)


class CacheCountsOut(BaseModel):
    entries: int
    hits: int
    misses: int


class InstanceOut(BaseModel):
    instance_id: str
    status: str
    last_sync_at: float | None
    sync_version: str | None
    pending: int
    conflicts: int
    syncs: int
    failures: int
    consecutive_failures: int
    last_sync_latency_s: float | None
    sync_interval_s: float | None
    last_error: str | None
    host: str | None
    cache: CacheCountsOut
    reported_at: float = Field(description="server time of the report")
    age_s: float = Field(0.0, description="seconds since the report")
    stale: bool = Field(False, description="silent for three sync intervals (90 s without one)")

    @classmethod
    def of(cls, record: dict[str, Any]) -> "InstanceOut":
        return cls.model_validate({k: record.get(k) for k in cls.model_fields if k in record})


class InstanceList(BaseModel):
    instances: list[InstanceOut]


@dataclass
class ChangeWatch:
    """One stream's position in the agent's feed; :meth:`poll` returns the frames of what is new."""

    service: MemoryService
    agent_id: str
    after: str | None
    started: bool = False

    def poll(self) -> list[str]:
        page = self.service.changes(self.agent_id, after=self.after, limit=STREAM_PAGE, checked=True)
        frames: list[str] = []
        if not self.started:
            self.started = True
            ready = {"head": page.head, "after": self.after}
            frames.append(f"id: {self.after or page.next_after}\n" + frame("ready", ready))
        if page.gap:
            frames.append(frame("gap", {"head": page.head}))
        for c in page.changes:
            frames.append(f"id: {c.id}\n" + frame("change", ChangeOut.model_validate(c.as_dict())))
        self.after = page.next_after
        return frames


def _position(value: str | None, field: str) -> str | None:
    if value is not None and not _POSITION.match(value):
        raise ValidationError(f"{field} must be a change id from this feed (<ms>-<seq>) or 0", field=field)
    return value


def sync_routes(
    service: MemoryService,
    authority: TokenAuthority,
    agent_scope: Callable[..., Principal],
) -> APIRouter:
    """The routes of client instances; ``agent_scope`` is the app's auth dependency (the agent
    itself or the admin), so they check tokens as the rest do."""
    router = APIRouter(prefix="/v1/agents/{agent_id}", tags=["sync"])
    Agent = Annotated[Principal, Depends(agent_scope)]
    settings = service.settings.sync

    @router.get("/changes", response_model=ChangePageOut, responses=ERROR_RESPONSES)
    def changes(
        agent_id: AgentId,
        who: Agent,
        after: Annotated[str | None, Query(max_length=41, pattern=POSITION, description="a change id, or 0")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> ChangePageOut:
        """The agent's changes after ``after`` (kind, key, version, op, time; never content). Without
        ``after``: no changes, and ``next_after`` is where the feed is now (start there, then read
        the memory: no later change is missed)."""
        page = service.changes(agent_id, after=after, limit=limit, checked=True)
        return ChangePageOut(
            changes=[ChangeOut.model_validate(c.as_dict()) for c in page.changes],
            next_after=page.next_after,
            head=page.head,
            gap=page.gap,
        )

    @router.get("/changes/stream", include_in_schema=False)
    def change_stream(
        agent_id: AgentId,
        request: Request,
        who: Agent,
        authorization: Annotated[str | None, Header()] = None,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
        after: Annotated[str | None, Query(max_length=41)] = None,
    ) -> StreamingResponse:
        """The change feed as server-sent events (see the module docstring). A reconnecting
        client's ``Last-Event-ID`` wins over the ``after`` its URL still carries."""
        start = _position(last_event_id, "Last-Event-ID") or _position(after, "after")
        watch = ChangeWatch(service, agent_id, start)
        checked = [time.monotonic()]

        def allowed() -> None:
            now = time.monotonic()
            if now - checked[0] >= RECHECK_S:
                authority.principal(authorization).authorize(agent_id)
                checked[0] = now

        frames = feed(request, watch, allowed, poll_s=settings.poll_s, max_s=settings.max_stream_s)
        return StreamingResponse(frames, media_type="text/event-stream", headers=STREAM_HEADERS)

    @router.post("/conflicts", response_model=ConflictOut, responses=ERROR_RESPONSES)
    def conflict(agent_id: AgentId, body: ConflictIn, who: Agent) -> ConflictOut:
        """Keep a conflict an instance found (a change based on a stale version) and how its
        strategy resolved it, with both versions' metadata and, where a value was overwritten or
        dropped, that value. Idempotent by ``conflict_id``."""
        record = body.model_dump(exclude_unset=False)
        if "losing_value" not in body.model_fields_set:
            record.pop("losing_value")
        return ConflictOut(event_id=service.record_conflict(agent_id, record, actor=who.actor))

    @router.put("/instances/{instance_id}", response_model=InstanceOut, responses=ERROR_RESPONSES)
    def report(agent_id: AgentId, instance_id: InstanceId, body: InstanceStatusIn, who: Agent) -> InstanceOut:
        """An instance's sync status, as it was after its latest sync (the latest report wins)."""
        return InstanceOut.of(service.report_instance(agent_id, instance_id, body.model_dump()))

    @router.get("/instances", response_model=InstanceList, responses=ERROR_RESPONSES)
    def instances(agent_id: AgentId, who: Agent) -> InstanceList:
        """Every instance's latest sync status, with how long ago it reported and whether it has
        gone silent."""
        return InstanceList(instances=[InstanceOut.of(r) for r in service.instances(agent_id)])

    return router


__all__ = ["ChangeWatch", "sync_routes"]
