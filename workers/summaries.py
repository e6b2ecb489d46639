"""The cold path's summariser, for a forget's replay of the summary (:mod:`vcm.service.redaction`):
the service may not import ``vcm.tasks``, so the composition root (:mod:`vcm.workers.wiring`)
hands this in."""

from __future__ import annotations

from collections.abc import Sequence

from vcm.durable import hot_message
from vcm.store.types import StoredMessage
from vcm.tasks.deps import Deps
from vcm.tasks.evict import summarize


class LocalSummaries:
    """Summarises here, with this process's dependencies (model, summariser settings, counters)."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    def __call__(self, agent_id: str, previous: str, messages: Sequence[StoredMessage]) -> tuple[str, int]:
        draft = summarize(self.deps, agent_id, previous, [hot_message(m) for m in messages]).draft
        return draft.text, draft.tokens
