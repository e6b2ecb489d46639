"""What to do when a local change was based on a stale version. Pure.

A change of a block or a state key carries the version it was made on (the one the instance last
saw); the server refuses it when its version differs (``REV_CONFLICT``, or ``NOT_FOUND`` for a
block deleted meanwhile). The instance then reads the remote version and applies its strategy:

==================  ============================================================================
``reject``          (default) nothing is written; the change is refused with RevConflict carrying
                    both versions (at once in write-through mode; from ``sync()`` in write-back)
``last_write_wins`` the write the server receives last wins, by server time: the local change is
                    written over the remote version, and the value it replaces is recorded in the
                    audit trail. No client clock is consulted (machines' clocks disagree); the
                    arrival order at the server is the one order every instance agrees on
``merge``           ``merge(local, remote)`` returns the value to write (None: delete); it is
                    written on top of the remote version. Returning the remote value unchanged
                    keeps it (nothing written; the local value is recorded as the loser)
==================  ============================================================================

Values are what a change sets: a state key's JSON value, a block's content; ``None`` stands for
deleted (or absent) on either side. Where both sides already agree (the same value, or both
deleted) there is no conflict: the local change is done.

Every conflict, whatever its strategy, is reported to the server before anything is written over
(:mod:`vcm.service.replicas`), so an overwritten value is in the audit trail before it is gone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Strategy = Literal["reject", "last_write_wins", "merge"]
STRATEGIES: tuple[Strategy, ...] = ("reject", "last_write_wins", "merge")
Resolution = Literal["rejected", "local_won", "remote_won", "merged", "agreed"]
Merge = Callable[[Any, Any], Any]  # (local value, remote value) -> the value to write; None = delete


@dataclass(frozen=True)
class Version:
    """One side of a conflict."""

    value: Any  # None when deleted or absent
    version: str | None
    at: float | None  # local: when the instance made the change (its clock); remote: server time
    deleted: bool = False


@dataclass(frozen=True)
class Decision:
    resolution: Resolution
    write: bool  # write ``value`` on top of the remote version
    value: Any = None  # None with ``write``: delete
    losing: tuple[Any, ...] = ()  # (the value that is dropped,) when one is

    @property
    def conflict(self) -> bool:
        """A real conflict (reported and counted), not two sides that already agree."""
        return self.resolution != "agreed"


def resolve(strategy: Strategy, local: Version, remote: Version, merge: Merge | None = None) -> Decision:
    if local.deleted == remote.deleted and (local.deleted or local.value == remote.value):
        return Decision("agreed", write=False)
    if strategy == "reject":
        return Decision("rejected", write=False, losing=() if local.deleted else (local.value,))
    if strategy == "last_write_wins":
        return Decision("local_won", write=True, value=local.value, losing=() if remote.deleted else (remote.value,))
    if merge is None:
        raise ValueError("the merge strategy needs a merge function")
    merged = merge(None if local.deleted else local.value, None if remote.deleted else remote.value)
    if (merged is None and remote.deleted) or (merged is not None and not remote.deleted and merged == remote.value):
        return Decision("remote_won", write=False, losing=() if local.deleted else (local.value,))
    return Decision("merged", write=True, value=merged)


__all__ = ["STRATEGIES", "Decision", "Merge", "Resolution", "Strategy", "Version", "resolve"]
