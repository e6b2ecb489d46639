"""Messages of the ArangoDB store: spooling, reading and listing them, and eviction commits.

Writes are split under the transaction size cap (:mod:`vcm.store.arango.eviction` plans the
eviction split); every insert is idempotent by key, so a retry after a partial failure completes
the write. Searching messages is :mod:`vcm.store.arango.recall_ops`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vcm.errors import RevConflict, ValidationError
from vcm.store import semantics, validation
from vcm.store.arango import documents, names
from vcm.store.arango.aql import common as aql_common
from vcm.store.arango.aql import idempotency as aql_idem
from vcm.store.arango.aql import messages as aql_messages
from vcm.store.arango.aql import tombstones as aql_tombstones
from vcm.store.arango.base import ArangoBase
from vcm.store.arango.eviction import EvictionPlan, chunk_by_size, plan_eviction, size_of
from vcm.store.arango.idempotency import record_docs
from vcm.store.audit_names import EventKind
from vcm.store.types import EvictionCommit, EvictionResult, IdempotencyRecord, MemoryEvent, StoredMessage


class MessageOps(ArangoBase):
    """Message storage and the eviction commit (messages, ``recall_log`` edges, summary, ``evict``
    event and batch marker; one transaction, or pre-written messages plus one when too large)."""

    def spool_messages(
        self,
        messages: Sequence[StoredMessage],
        *,
        events: Sequence[MemoryEvent] = (),
        idempotency: Sequence[IdempotencyRecord] = (),
        incarnation: str | None = None,
    ) -> int:
        batch = semantics.distinct(validation.messages(messages))
        audit = [self._event_doc(e) for e in validation.keyed_events(events)]
        records = record_docs(validation.idempotency_records(idempotency), self._clock())
        if not batch and not audit and not records:
            return 0
        docs = [documents.message_doc(m) for m in batch]
        agents = sorted({m.agent_id for m in batch} | {str(d["agent_id"]) for d in [*audit, *records]})
        added = 0
        # Idempotent chunks under the size cap; a retry after a partial failure completes it.
        # The audit rows and idempotency records go with the last chunk, so they land once
        # every message has: a record never names a message the store lacks.
        parts = _chunks_by_size(docs, self._cap) or [[]]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            collections = (
                (names.MESSAGES, *((names.EVENTS,) if audit else ()), *((names.IDEMPOTENCY,) if records else ()))
                if last
                else (names.MESSAGES,)
            )
            if incarnation is not None:
                collections = (*collections, names.CORE)
            with self._transaction(collections, "spool_messages") as txn:
                # Every part is fenced: a delete between two parts leaves no later part behind.
                self._fence(txn, agents, incarnation, "spool_messages")
                if part:
                    # A forgotten message is never written back: a spool that read it before the
                    # forget (write-behind) lands after it and finds its tombstone here.
                    query = aql_tombstones.tombstoned_messages(
                        sorted({d["agent_id"] for d in part}), [d["message_id"] for d in part]
                    )
                    gone = set(self._run(txn, query, "spool_messages"))
                    part = [d for d in part if f"{d['agent_id']}|{d['message_id']}" not in gone]
                rows = (
                    self._run(
                        txn, aql_common.insert_ignore(names.MESSAGES, part, stamp_ingested=True), "spool_messages"
                    )
                    if part
                    else []
                )
                if last and audit:
                    self._run(txn, aql_common.insert_ignore(names.EVENTS, audit), "spool_messages")
                if last and records:
                    self._run(txn, aql_idem.upsert_records(records), "spool_messages")
                self._fault("spool_messages.before_commit")
            added += sum(1 for r in rows if r is not None)
        return added

    def _event_doc(self, event: MemoryEvent) -> dict[str, Any]:
        created_at = self._now(event.created_at)
        return documents.event_doc(event, semantics.event_id(event), created_at)

    def get_messages(self, agent_id: str, message_ids: Sequence[str]) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        if isinstance(message_ids, str) or not isinstance(message_ids, Sequence):
            raise ValidationError("message_ids must be a sequence of strings")
        wanted = [validation.identifier("message_id", m) for m in message_ids]
        if not wanted:
            return []
        ids = [f"{names.MESSAGES}/{documents.message_key(agent_id, m)}" for m in dict.fromkeys(wanted)]
        found = {
            d["message_id"]: documents.message_from_doc(d)
            for d in self._run(self._ro, aql_common.documents(ids, agent_id), "get_messages")
        }
        return [found[m] for m in wanted if m in found]

    def list_messages(self, agent_id: str, *, after_seq: int = -1, limit: int = 100) -> list[StoredMessage]:
        validation.identifier("agent_id", agent_id)
        q = aql_messages.list_messages(agent_id, validation.after_seq(after_seq), validation.limit("limit", limit))
        return [documents.message_from_doc(d) for d in self._run(self._ro, q, "list_messages")]

    def count_messages(self, agent_id: str, *, id_prefix: str = "") -> int:
        validation.identifier("agent_id", agent_id)
        rows = self._run(self._ro, aql_messages.count_messages(agent_id, id_prefix), "count_messages")
        return int(rows[0]) if rows else 0

    def commit_eviction(self, commit: EvictionCommit) -> EvictionResult:
        validation.eviction(commit)
        now = self._clock()
        plan = plan_eviction(commit, now=now, cap_bytes=self._cap)
        done = self._get(self._ro, names.BATCHES, plan.marker_key, "commit_eviction")
        if done is not None:
            return _replayed_batch(commit, done)
        if plan.split:
            # Fail a stale rev before writing anything, then pre-write the messages (see
            # vcm.store.arango.eviction: replay-safe, indistinguishable from spooling).
            current = self._get(self._ro, names.CORE, plan.summary_key, "commit_eviction")
            current_rev = None if current is None else current["_rev"]
            if current_rev != commit.expected_summary_rev:
                raise semantics.rev_conflict(
                    f"the summary of agent {commit.agent_id!r}", commit.expected_summary_rev, current_rev
                )
            for part in plan.pre_writes:
                self._fenced_run(
                    aql_common.insert_ignore(names.MESSAGES, part, stamp_ingested=True),
                    (names.MESSAGES,),
                    (commit.agent_id,),
                    commit.incarnation,
                    "commit_eviction",
                )
        try:
            return self._commit_final(commit, plan, now)
        except RevConflict:
            done = self._get(self._ro, names.BATCHES, plan.marker_key, "commit_eviction")
            if done is not None:  # a concurrent replay committed it first
                return _replayed_batch(commit, done)
            raise

    def _commit_final(self, commit: EvictionCommit, plan: EvictionPlan, now: float) -> EvictionResult:
        agent = commit.agent_id
        with self._transaction(names.EVICTION_WRITE, "commit_eviction") as txn:
            # First: the agent record's update conflicts with a concurrent delete_agent.
            self._fence(txn, (agent,), commit.incarnation, "commit_eviction")
            done = txn.collection(names.BATCHES).get(plan.marker_key)
            if done is not None:
                return _replayed_batch(commit, done)
            core = txn.collection(names.CORE)
            current = core.get(plan.summary_key)
            current_rev = None if current is None else current["_rev"]
            if current_rev != commit.expected_summary_rev:
                raise semantics.rev_conflict(
                    f"the summary of agent {agent!r}", commit.expected_summary_rev, current_rev
                )
            if plan.final_messages:
                self._run(
                    txn,
                    aql_common.insert_ignore(names.MESSAGES, plan.final_messages, stamp_ingested=True),
                    "commit_eviction",
                )
            self._run(txn, aql_common.insert_ignore(names.RECALL_LOG, plan.edges), "commit_eviction")
            self._fault("commit_eviction.after_recall_append")
            summary = documents.summary_doc(agent, commit.summary_text, commit.summary_tokens, commit.batch_id, now)
            if current is None:
                meta = core.insert(summary)
            else:
                meta = core.replace({**summary, "_rev": commit.expected_summary_rev}, check_rev=True)
            rev = str(meta["_rev"])
            event = MemoryEvent(
                agent_id=agent,
                kind=EventKind.EVICT,
                payload=semantics.evict_event_payload(commit, plan.messages, rev),
                event_id=plan.event_id,
                created_at=now,
                actor=commit.actor,
                idempotency_key=plan.event_id,
            )
            extra = [self._event_doc(e) for e in commit.events]
            self._run(
                txn,
                aql_common.insert_ignore(names.EVENTS, [documents.event_doc(event, plan.event_id, now), *extra]),
                "commit_eviction",
            )
            txn.collection(names.BATCHES).insert(
                {
                    "_key": plan.marker_key,
                    "agent_id": agent,
                    "batch_id": commit.batch_id,
                    "summary_rev": rev,
                    # The summary this batch installed: the agent's summary history.
                    "summary_text": commit.summary_text,
                    "summary_tokens": commit.summary_tokens,
                    "messages_committed": len(plan.messages),
                    "event_id": plan.event_id,
                    "committed_at": now,
                }
            )
            self._fault("commit_eviction.before_commit")
        return EvictionResult(agent, commit.batch_id, rev, len(plan.messages), False)

    def committed_batches(self, agent_id: str) -> list[int]:
        validation.identifier("agent_id", agent_id)
        return [int(b) for b in self._run(self._ro, aql_messages.committed_batches(agent_id), "committed_batches")]


# --- helpers --------------------------------------------------------------------------------------
def _replayed_batch(commit: EvictionCommit, done: Mapping[str, Any]) -> EvictionResult:
    return EvictionResult(
        commit.agent_id, commit.batch_id, str(done["summary_rev"]), int(done["messages_committed"]), True
    )


def _chunks_by_size(docs: Sequence[dict[str, Any]], cap: int) -> list[list[dict[str, Any]]]:
    return chunk_by_size(docs, [size_of(d) for d in docs], cap)
