"""What the replica keeps and reports: a pending local change (and the call that pushes it), a
sync's result, feed positions, item paths and versions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from vcm.errors import RevConflict, VcmError
from vcm.sync.cache import Json, Key
from vcm.wire import Call, seg

Listener = Callable[[str, Json], None]
Kind = Literal["block", "state"]

PULL_PAGE = 500
# A change that meets this many conflicts in a row (others keep writing the key) gives up.
MAX_ATTEMPTS = 8
# Statuses that refuse a pushed change for good (conflict, gone, invalid or refused content);
# anything else (401, 429, 5xx) leaves it queued for the next sync.
REFUSED_FOR_GOOD = (404, 409, 412, 422)


def position(change_id: str) -> tuple[int, int]:
    ms, _, seq = change_id.partition("-")
    return int(ms), int(seq or 0)


def agent_path(agent_id: str) -> str:
    return f"/v1/agents/{seg(agent_id)}"


def item_path(agent_id: str, kind: str, key: str) -> str:
    section = {"block": "blocks", "state": "state", "fact": "facts"}[kind]
    return f"{agent_path(agent_id)}/{section}/{seg(key)}"


def version_of(kind: str, body: Json) -> str | None:
    found = body.get("version") if kind == "fact" else body.get("_rev")
    return None if found is None else str(found)


@dataclass(frozen=True)
class LocalChange:
    """A change of one block or state key, as the application made it."""

    agent_id: str
    kind: Kind
    key: str
    value: Any  # a state value, a block's content; None: delete
    base: str | None  # the version it was made on (None: none known)
    edited_at: float  # when (this machine's clock)
    fields: tuple[tuple[str, Any], ...] = ()  # block: role, pinned, metadata; state: ttl_s
    seq: int = 0
    # Sent with the first attempt only: a write again after a conflict is another request.
    idempotency_key: str | None = None

    @property
    def deleted(self) -> bool:
        return self.value is None

    @property
    def item(self) -> Key:
        return (self.agent_id, self.kind, self.key)

    def call(self, base: str | None) -> Call:
        path = item_path(self.agent_id, self.kind, self.key)
        extra = dict(self.fields)
        headers = {"Idempotency-Key": self.idempotency_key} if self.idempotency_key and base == self.base else None
        if self.deleted:
            return Call("DELETE", path, params={"_rev": base} if base is not None else None, headers=headers)
        if self.kind == "state":
            body = {"value": self.value, **({"ttl_s": extra["ttl_s"]} if extra.get("ttl_s") else {})}
        else:
            body = {"content": self.value, **{k: v for k, v in extra.items() if v is not None}}
        return Call("PUT", path, json=body | ({"_rev": base} if base is not None else {}), headers=headers)

    def staged(self) -> Json:
        """What a read answers while the change waits to be pushed (write-back)."""
        extra = dict(self.fields)
        if self.kind == "state":
            return {"key": self.key, "value": self.value, "_rev": self.base, "updated_at": None,
                    "expires_at": None, "pending": True}  # fmt: skip
        return {"id": self.key, "role": extra.get("role", "working"), "content": self.value, "tokens": None,
                "pinned": bool(extra.get("pinned", False)), "_rev": self.base, "updated_at": None,
                "metadata": dict(extra.get("metadata") or {}), "pending": True}  # fmt: skip


@dataclass
class SyncResult:
    pushed: int = 0
    pulled: int = 0
    conflicts: int = 0
    rejected: list[RevConflict | VcmError] = field(default_factory=list)
    latency_s: float = 0.0

    def as_dict(self) -> Json:
        return {"pushed": self.pushed, "pulled": self.pulled, "conflicts": self.conflicts,
                "rejected": [e.to_dict() for e in self.rejected], "latency_s": self.latency_s}  # fmt: skip
