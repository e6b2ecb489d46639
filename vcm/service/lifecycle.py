"""An agent's lifecycle beyond appends: delete, forget a document, reset (seed 001 §3.3), and the steps they
share with snapshot restores (:mod:`vcm.service.snapshots`).

Every operation here changes the store first, the store being the source of truth, and then
drops the agent's hot state and rebuilds it from the store: whatever happens in between, the
agent is either as it was or as asked, never a mix (a crash after the store commit leaves the
hot state to be rebuilt from the new store state on the next call).

Before the hot state is dropped, every message it holds (FIFO and pending batches) is written to
the store, so no acknowledged message is lost whatever the durability mode.
"""

from __future__ import annotations

from typing import Any

from vcm import validation
from vcm.durable import append_event, append_records, stored_message
from vcm.hotpath import keys
from vcm.hotpath.state import Snapshot
from vcm.obs import metrics
from vcm.service.core import Core
from vcm.store.audit_names import Actor, EventKind
from vcm.store.types import ContextReset
from vcm.types import Message

# Audit rows about an agent that no longer exists go under this agent id.
SYSTEM_AGENT = "*"


class Lifecycle:
    """delete_agent, reset (a message's and a document's forget is :mod:`vcm.service.forgetting`'s,
    which notes it in the summary here: :meth:`note_in_summary`); and the hot state's hand-over to the
    store that snapshot restores share (:meth:`persist_hot`, :meth:`held`, :meth:`fresh_id`,
    :meth:`reload`)."""

    def __init__(self, core: Core) -> None:
        self.core = core

    def delete_agent(self, agent_id: str, *, actor: str = Actor.SYSTEM) -> dict[str, int]:
        """Remove the agent everywhere: store rows and indexes, Redis keys, metric series. The
        audit row (under agent ``*``) names the agent and counts what went, never content.
        Idempotent: deleting an unknown agent removes nothing and says so with empty counts."""
        validation.agent_id(agent_id)
        counts = dict(self.core.store.delete_agent(agent_id).counts)
        counts["redis_keys"] = self.core.hot.forget(agent_id)
        self.core.durable.forget(agent_id)
        metrics.forget_agent(agent_id)
        counts = {k: v for k, v in counts.items() if v}
        self.core.audit(SYSTEM_AGENT, EventKind.AGENT_DELETED, {"agent_id": agent_id, "removed": counts}, actor)
        return counts

    def reset(self, agent_id: str, *, actor: str = Actor.SYSTEM, idempotency_key: str | None = None) -> dict[str, Any]:
        """Start the conversation over (VICW ``/reset``): the FIFO and the summary go, the blocks
        stay. The messages stay in recall, searchable; ingestion jobs still queued or running end
        ``cancelled``, finished ones keep their records. A retry under the same idempotency key
        resets nothing (it would drop what was said since) and answers ``messages_to_recall`` 0."""
        validation.idempotency_key(idempotency_key)
        if idempotency_key is not None:
            _, replayed = self.core.claim(agent_id, idempotency_key, "reset", {}, {"done": True})
            if replayed:
                return {"agent_id": agent_id, "messages_to_recall": 0}
        self.core.agent(agent_id)
        left = self.persist_hot(agent_id)
        batch_id = self.fresh_id(agent_id)
        self.core.store.reset_context(ContextReset(agent_id, batch_id, "", 0, fifo_ids=[]))
        # Once the reset has happened (a failed one leaves the jobs be): ingestion still queued or
        # running is cancelled, its worker checks before its store write and writes nothing
        # (vcm.tasks.ingest.jobs). Finished jobs keep their records.
        self.core.hot.jobs.cancel_open(agent_id, self.core.clock(), "the agent was reset; submit the document again")
        self.reload(agent_id)
        self.core.audit(agent_id, EventKind.RESET, {"messages_to_recall": left, "batch_id": batch_id}, actor)
        return {"agent_id": agent_id, "messages_to_recall": left}

    def persist_hot(self, agent_id: str) -> int:
        """Write every message the hot state holds (FIFO and pending batches) to the store, so
        dropping the hot state loses none. Returns how many there were."""
        _, messages = self.held(agent_id)
        ttl = self.core.settings.maintenance.recall_ttl_s
        if messages:
            self.core.store.spool_messages(
                [stored_message(agent_id, m, ttl_s=ttl) for m in messages],
                events=[append_event(agent_id, m) for m in messages],
                # Their keys' records too: the reload drops Redis's copies and re-installs the store's.
                idempotency=append_records(self.core.hot, agent_id, messages),
            )
        return len(messages)

    def held(self, agent_id: str) -> tuple[Snapshot, list[Message]]:
        """The hot state's snapshot, and every message it holds (FIFO and pending batches: the
        summary does not cover those yet), oldest first."""
        snap = self.core.hot.snapshot(agent_id)
        pending = [m for ids in self.core.hot.batch_message_ids(agent_id).values() for m in ids]
        return snap, sorted([*snap.fifo, *self.core.hot.get_messages(agent_id, pending)], key=lambda m: m.seq)

    def fresh_id(self, agent_id: str) -> int:
        """A batch id no one has used: the current floor, with the floor moved past it (the hot
        state's ids stay below the floor, and a rebuild continues above the new one)."""
        floor = self.core.store.get_agent(agent_id).id_floor
        self.core.store.advance_id_floor(agent_id, floor + 1 + self.core.durable.reserve)
        return floor

    def reload(self, agent_id: str) -> None:
        # The change feed and the instance reports outlive a reload: followers see the change that
        # says what happened (restore: the whole agent) rather than a gap; a running turn keeps its
        # lock; ingestion jobs keep their records (a poller of a finished job still finds it).
        self.core.hot.forget(agent_id, keep=(keys.CHANGES, keys.INSTANCES, keys.TURN), keep_prefixes=(keys.JOB,))
        self.core.durable.forget(agent_id)
        self.core.rebuild(agent_id)

    def note_in_summary(self, agent_id: str, note: str) -> None:
        """Append a note to the summary in the store, keeping the FIFO as it is; the hot state
        takes it on its next rebuild or summary install (a note is a few tokens, for which the
        summary's newest clauses make room when it fills its cap)."""
        summary = self.core.store.get_summary(agent_id)
        kept = summary.text if summary else ""
        cap = int(self.core.agent(agent_id).window * self.core.settings.budget.summary_cap)
        text = f"{kept}\n{note}".strip()
        tokens = self.core.hot.summary_tokens(agent_id, text)
        while tokens > cap and kept:
            # A summary fills its cap: its newest clauses ("; "-separated) or lines give way.
            kept = kept[: max(kept.rfind("; "), kept.rfind("\n"), 0)]
            text = f"{kept}\n{note}".strip()
            tokens = self.core.hot.summary_tokens(agent_id, text)
        if tokens > cap:
            return  # no room under the summary cap: the audit row is the note
        fifo = [m.message_id for m in self.core.durable.uncommitted(agent_id)]
        # Under the current summary's batch id: the hot state keeps its batch sequence, and the
        # cold path treats a stored summary of a later batch as its own batch already committed.
        batch_id = summary.batch_id if summary else 0
        self.core.store.reset_context(ContextReset(agent_id, batch_id, text, tokens, fifo_ids=fifo))
