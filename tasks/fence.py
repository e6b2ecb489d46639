"""The incarnation fence of the cold path (docs/architecture.md §5, "Delete is final").

Every agent has an *incarnation*, chosen when it is created and kept on its store record and in
its hot state; an agent deleted and created again under the same id has a new one. A cold-path
job reads the incarnation from the hot state before it reads its work (a batch, messages, a
document) and again after: a change means the work it read belongs to another agent of that id,
and it stops. Its store writes then go through :func:`fenced`, which gives each of them that
incarnation: the store checks it inside the write's own transaction and raises
:class:`~vcm.errors.AgentFenced` (writing nothing) when the agent was deleted or re-created in
the meantime. The job ends ``fenced``: logged, counted (``vcm_fenced_jobs_total``), never retried
or dead-lettered.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from vcm.hotpath.state import HotState
from vcm.obs import metrics
from vcm.obs.metered_store import MeteredStore
from vcm.store.port import MemoryStore
from vcm.store.principals import is_holder
from vcm.store.types import EvictionCommit, Fact

log = logging.getLogger(__name__)

R = TypeVar("R")

# The store's fenced writes (their ``incarnation`` keyword; commit_eviction's is on the commit).
FENCED_WRITES = frozenset(
    {
        "spool_messages",
        "put_idempotency",
        "put_message_vectors",
        "ingest_archival",
        "put_fact",
        "append_event",
        "add_edge",
    }
)


class FencedStore(MeteredStore):
    """The store as one job of one incarnation sees it: reads as they are, and every fenced
    write carrying ``incarnation`` (unless the caller gave one). Built on the metering wrapper's
    one call path (``_call``) so that no operation is left out; it meters nothing itself (the
    store it wraps is the metered one)."""

    def __init__(self, inner: MemoryStore, incarnation: str) -> None:
        super().__init__(inner)
        self.incarnation = incarnation

    def _call(self, operation: str, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        if operation == "put_fact" and args and isinstance(args[0], Fact) and is_holder(args[0].agent_id):
            pass  # a user's or domain's fact: the store fences it by its principal, not this agent
        elif operation in FENCED_WRITES and kwargs.get("incarnation") is None:
            kwargs["incarnation"] = self.incarnation
        elif operation == "commit_eviction" and args and isinstance(args[0], EvictionCommit):
            commit = args[0]
            if commit.incarnation is None:
                args = (dataclasses.replace(commit, incarnation=self.incarnation), *args[1:])
        return fn(*args, **kwargs)


def fenced(store: MemoryStore, incarnation: str) -> MemoryStore:
    """``store`` with its cold-path writes fenced by ``incarnation``."""
    return FencedStore(store, incarnation)


def incarnation_of(store: MemoryStore) -> str | None:
    """The incarnation a :func:`fenced` store carries (None: not fenced)."""
    return store.incarnation if isinstance(store, FencedStore) else None


def read_fenced(hot: HotState, agent_id: str, read: Callable[[], R]) -> tuple[str, R] | None:
    """``read()`` between two reads of the agent's incarnation: the incarnation and what was
    read, or None when the agent changed incarnation in between (deleted and re-created: what
    was read may be the new agent's, whose own jobs handle it). NOT_FOUND when the agent is
    missing, before or after (``read`` may raise it too)."""
    incarnation = hot.incarnation(agent_id)
    value = read()
    if hot.incarnation(agent_id) != incarnation:
        return None
    return incarnation, value


def note_fenced(task: str, agent_id: str, detail: object = "") -> None:
    """Log and count a job that stopped at the fence."""
    metrics.fenced(task)
    log.info("%s of agent %s fenced (deleted or re-created since it began) %s", task, agent_id, detail)
