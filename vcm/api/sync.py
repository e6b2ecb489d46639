"""What the routes of client instances (:mod:`vcm.api.routes.sync`; the service side is
:mod:`vcm.service.replicas`, the client side :mod:`vcm.sync`) take and answer: the change feed's
pages and stream frames, conflict records, and instances' sync status.

**The stream** is the viewer's (:func:`vcm.api.viewer.feed`): read with ``fetch()`` and the
ordinary bearer header, the token re-checked every second, a keepalive comment when idle, ``bye``
after ``[sync] max_stream_s``. Frames: ``ready`` (first; ``head``: the feed's newest change),
``change`` (a :class:`ChangeOut`; its ``id:`` is the change id, so a client that reconnects with
``Last-Event-ID`` misses nothing), ``gap`` (changes after the client's position were lost:
drop the cache of the agent), ``error`` (coded; the stream ends), ``bye``. Each tick reads the
feed once (one ``XRANGE``) every ``[sync] poll_s`` (:class:`ChangeWatch`).
"""

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, Field

from vcm.api.models import RequestBody
from vcm.api.viewer import frame
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


def position(value: str | None, field: str) -> str | None:
    """A feed position a client sent (``Last-Event-ID`` or ``after``), checked."""
    if value is not None and not _POSITION.match(value):
        raise ValidationError(f"{field} must be a change id from this feed (<ms>-<seq>) or 0", field=field)
    return value


__all__ = [
    "POSITION",
    "RECHECK_S",
    "STREAM_PAGE",
    "ChangeOut",
    "ChangePageOut",
    "ChangeWatch",
    "ConflictIn",
    "ConflictOut",
    "InstanceId",
    "InstanceList",
    "InstanceOut",
    "InstanceStatusIn",
    "position",
]
