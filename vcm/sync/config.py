"""How a client caches and syncs an agent's memory: :class:`CacheConfig`, passed as
``VcmClient(url, token, cache=CacheConfig(...))``."""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass
from typing import Literal

from vcm.sync.conflicts import STRATEGIES, Merge, Strategy

_UNSAFE = re.compile(r"[^A-Za-z0-9_.:\-]")


def default_instance_id() -> str:
    """``<host>-<pid>-<random>``: unique per process, and says where it runs."""
    host = _UNSAFE.sub("-", socket.gethostname())[:60].strip("-.") or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class CacheConfig:
    """The local cache of blocks, state and facts, and how it syncs with the server.

    ``write``: ``"through"`` sends every change at once (the call returns the server's answer);
    ``"back"`` keeps changes of blocks and state locally (reads see them at once) and pushes them
    on the next sync: periodic, on demand (``client.sync()``) and on close. A process that dies
    before then loses those changes, and only those. Facts are written through in both modes: a
    fact write is a merge (dedup), never an overwrite, so it has no stale base to defer.

    ``conflict``: what a change based on a stale version does (:mod:`vcm.sync.conflicts`):
    ``reject`` (default), ``last_write_wins``, or ``merge`` with ``merge(local, remote) -> value``.
    """

    max_entries: int = 1024
    ttl_s: float = 300.0
    conflict: Strategy = "reject"
    merge: Merge | None = None
    write: Literal["through", "back"] = "through"
    # Periodic sync (push pending changes, pull missed changes, report status); 0: only on demand.
    sync_interval_s: float = 30.0
    # Follow the agent's change feed in a background thread (sync client) so that other
    # instances' writes invalidate this cache within a fraction of a second.
    follow: bool = True
    # Report this instance's sync status to the server after each sync (``vcm instances``).
    report: bool = True
    instance_id: str | None = None

    def __post_init__(self) -> None:
        if self.conflict not in STRATEGIES:
            raise ValueError(f"conflict must be one of {', '.join(STRATEGIES)}")
        if self.conflict == "merge" and self.merge is None:
            raise ValueError("the merge strategy needs merge=callable(local, remote) -> value")
        if self.write not in ("through", "back"):
            raise ValueError("write must be 'through' or 'back'")
        if self.max_entries < 1 or self.ttl_s <= 0 or self.sync_interval_s < 0:
            raise ValueError("max_entries >= 1, ttl_s > 0 and sync_interval_s >= 0, please")
        if self.instance_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}", self.instance_id):
            raise ValueError("instance_id: 1-128 characters of letters, digits, '_', '.', ':', '-'")


__all__ = ["CacheConfig", "default_instance_id"]
