"""An agent's lifecycle beyond appends: delete, forget, reset, and snapshots (seed 001 §3.3).

Part of :class:`~vcm.service.MemoryService` (a mixin, so the API, CLI, tools and beat reach these
through the one façade). Every operation here changes the store first, the store being the source
of truth, and then drops the agent's hot state and rebuilds it from the store: whatever happens
in between, the agent is either as it was or as asked, never a mix (a crash after the store
commit leaves the hot state to be rebuilt from the new store state on the next call).

Before the hot state is dropped, every message it holds (FIFO and pending batches) is written to
the store, so no acknowledged message is lost whatever the durability mode.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from vcm import snapshots, validation
from vcm.durable import Durability, agent_config, append_event, block_write, stored_message
from vcm.errors import Conflict, NotFound, ValidationError
from vcm.hotpath import keys
from vcm.hotpath.state import HotState, Snapshot
from vcm.obs import metrics
from vcm.settings import Settings
from vcm.store import validation as store_validation
from vcm.store.port import MemoryStore
from vcm.store.types import ContextReset, SnapshotRecord, SummaryVersion
from vcm.types import Block, Message

# Audit rows about an agent that no longer exists go under this agent id.
SYSTEM_AGENT = "*"


def new_snapshot_id(kind: str, now: float) -> str:
    return f"{kind}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}-{uuid.uuid4().hex[:8]}"


class LifecycleOps:
    """Delete, forget, reset and snapshot operations of the façade."""

    hot: HotState
    store: MemoryStore
    durable: Durability
    settings: Settings
    clock: Callable[[], float]

    # Provided by MemoryService.
    agent: Callable[[str], Any]
    rebuild: Callable[[str], bool]
    _event: Callable[..., None]
    _changed: Callable[..., None]  # ReplicaOps: publish a change to the agent's feed

    # --- delete and forget ------------------------------------------------------------------------
    def delete_agent(self, agent_id: str, *, actor: str = "system") -> dict[str, int]:
        """Remove the agent everywhere: store rows and indexes, Redis keys, metric series. The
        audit row (under agent ``*``) names the agent and counts what went, never content.
        Idempotent: deleting an unknown agent removes nothing and says so with empty counts."""
        validation.agent_id(agent_id)
        counts = dict(self.store.delete_agent(agent_id).counts)
        counts["redis_keys"] = self.hot.forget(agent_id)
        self.durable.forget(agent_id)
        metrics.forget_agent(agent_id)
        counts = {k: v for k, v in counts.items() if v}
        self._audit(SYSTEM_AGENT, "agent_deleted", {"agent_id": agent_id, "removed": counts}, actor)
        return counts

    def forget_message(self, agent_id: str, message_id: str, *, actor: str = "system") -> dict[str, int]:
        """Remove one message from recall and every index. A message still in the main context
        (FIFO or a pending batch) is refused with CONFLICT: evict it first. The summary keeps a
        note that something was forgotten; what a summary said about it before stays there."""
        self.agent(agent_id)
        store_validation.identifier("message_id", message_id)
        if self.hot.get_messages(agent_id, [message_id]):
            raise Conflict(
                f"message {message_id!r} is in the main context; evict it first, then forget it",
                message_id=message_id,
            )
        counts = dict(self.store.forget_message(agent_id, message_id).counts)
        if counts:
            self._note_in_summary(agent_id, "[A message was removed from memory at the user's request.]")
        self._audit(agent_id, "forget", {"message_id": message_id, "removed": counts}, actor)
        return counts

    def forget_document(self, agent_id: str, doc_id: str, *, actor: str = "system") -> dict[str, int]:
        self.agent(agent_id)
        store_validation.identifier("doc_id", doc_id)
        counts = dict(self.store.forget_document(agent_id, doc_id).counts)
        self._audit(agent_id, "forget", {"doc_id": doc_id, "removed": counts}, actor)
        return counts

    # --- reset ------------------------------------------------------------------------------------
    def reset(self, agent_id: str, *, actor: str = "system") -> dict[str, Any]:
        """Start the conversation over (VICW ``/reset``): the FIFO and the summary go, the blocks
        stay. The messages stay in recall, searchable."""
        self.agent(agent_id)
        left = self._persist_hot(agent_id)
        batch_id = self._fresh_id(agent_id)
        self.store.reset_context(ContextReset(agent_id, batch_id, "", 0, fifo_ids=[]))
        self._reload(agent_id)
        self._audit(agent_id, "reset", {"messages_to_recall": left, "batch_id": batch_id}, actor)
        return {"agent_id": agent_id, "messages_to_recall": left}

    # --- snapshots --------------------------------------------------------------------------------
    def create_snapshot(
        self,
        agent_id: str,
        *,
        kind: str = "manual",
        reason: str = "",
        ttl_s: int | None = None,
        snapshot_id: str | None = None,
        actor: str = "system",
    ) -> SnapshotRecord:
        """Capture the agent's blocks, summary, FIFO (with pending batches' messages, which the
        summary does not cover yet) and settings, compressed and checksummed."""
        info = self.agent(agent_id)
        if kind not in snapshots.KINDS:
            raise ValidationError(f"kind must be one of {', '.join(snapshots.KINDS)}", field="kind")
        reason = validation.text(reason, "reason", 1000, allow_empty=True)
        ttl = self.settings.durability.snapshot_ttl_s if ttl_s is None else ttl_s
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
            raise ValidationError("ttl_s must be a non-negative integer (0: no expiry)", field="ttl_s")
        now = self.clock()
        snapshot_id = snapshot_id or new_snapshot_id(kind, now)
        store_validation.identifier("snapshot_id", snapshot_id)
        try:
            snap, fifo = self._held(agent_id)
            text, tokens, _, batch = self.hot.summary(agent_id)
            state = {
                "agent_id": agent_id,
                "config": agent_config(info.model, snap.system_prompt, snap.tools),
                "blocks": [b.as_json() for b in snap.blocks],
                "summary": {"text": text, "tokens": tokens, "batch_id": batch},
                "fifo": [m.as_json() for m in fifo],
            }
            payload, sha, size = snapshots.encode(state)
            record = self.store.put_snapshot(
                SnapshotRecord(agent_id, snapshot_id, kind, reason, payload, sha, size, now, now + ttl if ttl else None)
            )
        except Exception:  # counted for the failed-snapshot alert (compose/alerts.yml), then raised
            metrics.snapshot("failed")
            raise
        metrics.snapshot("taken")
        self._audit(
            agent_id,
            "snapshot",
            {"snapshot_id": snapshot_id, "kind": kind, "bytes": len(payload), "fifo": len(fifo)},
            actor,
        )
        return SnapshotRecord(**{**record.__dict__, "payload": b""})

    def summary_versions(self, agent_id: str, *, limit: int = 20) -> list[SummaryVersion]:
        self.agent(agent_id)
        return self.store.summary_versions(agent_id, limit=limit)

    def list_snapshots(self, agent_id: str) -> list[SnapshotRecord]:
        self.agent(agent_id)
        return self.store.list_snapshots(agent_id)

    def get_snapshot(self, agent_id: str, snapshot_id: str) -> SnapshotRecord:
        """A snapshot's metadata (not its payload)."""
        self.agent(agent_id)
        return SnapshotRecord(**{**self.store.get_snapshot(agent_id, snapshot_id).__dict__, "payload": b""})

    def delete_snapshot(self, agent_id: str, snapshot_id: str, *, actor: str = "system") -> bool:
        self.agent(agent_id)
        deleted = self.store.delete_snapshot(agent_id, snapshot_id)
        if deleted:
            self._audit(agent_id, "snapshot_deleted", {"snapshot_id": snapshot_id}, actor)
        return deleted

    def restore_snapshot(self, agent_id: str, snapshot_id: str, *, actor: str = "system") -> dict[str, Any]:
        """Return the agent to a snapshot: blocks, summary, FIFO and settings exactly as captured.
        The checksum is verified first (SNAPSHOT_CORRUPT, nothing changed); the current state is
        kept as a ``pre_restore`` snapshot; then one store transaction switches the agent over
        and its hot state is rebuilt from the store."""
        self.agent(agent_id)
        record = self.store.get_snapshot(agent_id, snapshot_id)
        state = snapshots.decode(record.payload, record.sha256)
        if state.get("agent_id") != agent_id:
            raise Conflict("the snapshot belongs to another agent", snapshot_id=snapshot_id)
        fifo = [Message.from_json(m) for m in state["fifo"]]
        blocks = [Block.from_json(b) for b in state["blocks"]]
        summary = state["summary"]
        before = self.create_snapshot(
            agent_id, kind="pre_restore", reason=f"before restoring {snapshot_id}", actor=actor
        )
        self._persist_hot(agent_id)
        # Messages of the snapshot's FIFO come back even if forgotten or expired since.
        ttl = self.settings.maintenance.recall_ttl_s
        self.store.spool_messages([stored_message(agent_id, m, ttl_s=ttl) for m in fifo])
        self.store.put_agent(agent_id, state["config"])
        batch_id = self._fresh_id(agent_id)
        self.store.reset_context(
            ContextReset(
                agent_id,
                batch_id,
                str(summary.get("text", "")),
                int(summary.get("tokens", 0)),
                fifo_ids=[m.id for m in fifo],
                blocks=[block_write(agent_id, b) for b in blocks],
            )
        )
        self._reload(agent_id)
        # Blocks, state and facts may all differ now: instances drop their cache of the agent.
        self._changed(agent_id, "agent", "*", None, "reset")
        self._audit(
            agent_id,
            "snapshot_restored",
            {"snapshot_id": snapshot_id, "pre_restore_snapshot_id": before.snapshot_id, "fifo": len(fifo)},
            actor,
        )
        return {"agent_id": agent_id, "snapshot_id": snapshot_id, "pre_restore_snapshot_id": before.snapshot_id}

    def snapshot_all(self, *, kind: str = "periodic") -> int:
        """A snapshot of every agent (beat, and before an upgrade); returns how many were taken."""
        taken = 0
        for agent_id in self.store_agent_ids():
            try:
                self.create_snapshot(agent_id, kind=kind, reason=f"{kind} snapshot")
                taken += 1
            except NotFound:
                continue  # deleted meanwhile
        return taken

    def store_agent_ids(self) -> list[str]:
        return [r.agent_id for r in self.store.list_agents()]

    # --- plumbing ---------------------------------------------------------------------------------
    def _persist_hot(self, agent_id: str) -> int:
        """Write every message the hot state holds (FIFO and pending batches) to the store, so
        dropping the hot state loses none. Returns how many there were."""
        _, messages = self._held(agent_id)
        ttl = self.settings.maintenance.recall_ttl_s
        if messages:
            self.store.spool_messages(
                [stored_message(agent_id, m, ttl_s=ttl) for m in messages],
                events=[append_event(agent_id, m) for m in messages],
            )
        return len(messages)

    def _held(self, agent_id: str) -> tuple[Snapshot, list[Message]]:
        """The hot state's snapshot, and every message it holds (FIFO and pending batches: the
        summary does not cover those yet), oldest first."""
        snap = self.hot.snapshot(agent_id)
        pending = [m for ids in self.hot.batch_message_ids(agent_id).values() for m in ids]
        return snap, sorted([*snap.fifo, *self.hot.get_messages(agent_id, pending)], key=lambda m: m.seq)

    def _fresh_id(self, agent_id: str) -> int:
        """A batch id no one has used: the current floor, with the floor moved past it (the hot
        state's ids stay below the floor, and a rebuild continues above the new one)."""
        floor = self.store.get_agent(agent_id).id_floor
        self.store.advance_id_floor(agent_id, floor + 1 + self.durable.reserve)
        return floor

    def _reload(self, agent_id: str) -> None:
        # The change feed and the instance reports outlive a reload: followers see the change that
        # says what happened (restore: the whole agent) rather than a gap; a running turn keeps its lock.
        self.hot.forget(agent_id, keep=(keys.CHANGES, keys.INSTANCES, keys.TURN))
        self.durable.forget(agent_id)
        self.rebuild(agent_id)

    def _note_in_summary(self, agent_id: str, note: str) -> None:
        """Append a note to the summary in the store, keeping the FIFO as it is; the hot state
        takes it on its next rebuild or summary install (a note is a few tokens, for which the
        summary's newest clauses make room when it fills its cap)."""
        summary = self.store.get_summary(agent_id)
        kept = summary.text if summary else ""
        cap = int(self.agent(agent_id).window * self.settings.budget.summary_cap)
        text = f"{kept}\n{note}".strip()
        tokens = self.hot.summary_tokens(agent_id, text)
        while tokens > cap and kept:
            # A summary fills its cap: its newest clauses ("; "-separated) or lines give way.
            kept = kept[: max(kept.rfind("; "), kept.rfind("\n"), 0)]
            text = f"{kept}\n{note}".strip()
            tokens = self.hot.summary_tokens(agent_id, text)
        if tokens > cap:
            return  # no room under the summary cap: the audit row is the note
        fifo = [m.message_id for m in self.durable.uncommitted(agent_id)]
        # Under the current summary's batch id: the hot state keeps its batch sequence, and the
        # cold path treats a stored summary of a later batch as its own batch already committed.
        batch_id = summary.batch_id if summary else 0
        self.store.reset_context(ContextReset(agent_id, batch_id, text, tokens, fifo_ids=fifo))

    def _audit(self, agent_id: str, kind: str, payload: Mapping[str, Any], actor: str) -> None:
        # Unique per call (two identical rows in one clock tick are still two events).
        digest = hashlib.sha256(f"{kind}{sorted(payload.items())!r}{time.perf_counter_ns()}".encode()).hexdigest()[:24]
        self._event(agent_id, kind, payload, actor, event_id=f"{agent_id}:{kind}:{digest}")
