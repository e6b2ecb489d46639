"""Snapshots of an agent through the façade: capture (blocks, summary, FIFO with pending batches,
settings, facts, state keys and fact edges; compressed and checksummed by :mod:`vcm.snapshots`),
list, delete, and restore, which goes through the lifecycle's hand-over
(:class:`~vcm.service.lifecycle.Lifecycle`): the store switches over in one transaction and the
hot state is rebuilt from it."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

from vcm import snapshots as payloads
from vcm import validation
from vcm.durable import agent_config, block_write, stored_message
from vcm.errors import Conflict, NotFound, SnapshotCorrupt, ValidationError
from vcm.obs import metrics
from vcm.service.core import Core
from vcm.service.lifecycle import Lifecycle
from vcm.store import validation as store_validation
from vcm.store.audit_names import Actor, EventKind
from vcm.store.types import AgentMemory, ContextReset, SnapshotRecord, SummaryVersion, fact_node, message_node
from vcm.types import Block, Message

# The note a forget leaves in the summary (:mod:`vcm.service.forgetting`); a restored summary that
# may speak of a message forgotten since gets it too.
FORGOTTEN_NOTE = "[A message was removed from memory at the user's request.]"


def new_snapshot_id(kind: str, now: float) -> str:
    return f"{kind}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}-{uuid.uuid4().hex[:8]}"


class Snapshots:
    """create_snapshot, summary_versions, list_snapshots, get_snapshot, delete_snapshot,
    restore_snapshot, snapshot_all, store_agent_ids."""

    def __init__(self, core: Core, lifecycle: Lifecycle) -> None:
        self.core = core
        self.lifecycle = lifecycle  # a restore hands the hot state over as a reset does

    def create_snapshot(
        self,
        agent_id: str,
        *,
        kind: str = "manual",
        reason: str = "",
        ttl_s: int | None = None,
        snapshot_id: str | None = None,
        actor: str = Actor.SYSTEM,
        idempotency_key: str | None = None,
    ) -> SnapshotRecord:
        """Capture the agent's blocks, summary, FIFO (with pending batches' messages, which the
        summary does not cover yet), settings, facts (every status, with evidence, lifetimes and
        versions), state keys and fact edges, compressed and checksummed.

        Under an idempotency key the snapshot's id is claimed first: a retry answers with the
        snapshot the first call took, or takes it under that id if the first call died before
        writing it."""
        validation.idempotency_key(idempotency_key)
        # Bad input is refused before a key is claimed: a corrected retry under the same key must
        # not meet IDEMPOTENCY_MISMATCH for a request that changed nothing.
        if kind not in payloads.KINDS:
            raise ValidationError(f"kind must be one of {', '.join(payloads.KINDS)}", field="kind")
        reason = validation.text(reason, "reason", 1000, allow_empty=True)
        ttl = self.core.settings.durability.snapshot_ttl_s if ttl_s is None else ttl_s
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
            raise ValidationError("ttl_s must be a non-negative integer (0: no expiry)", field="ttl_s")
        if idempotency_key is not None:
            request = {"kind": kind, "reason": reason, "ttl_s": ttl_s}
            first = {"snapshot_id": new_snapshot_id(kind, self.core.clock())}
            claimed, _ = self.core.claim(agent_id, idempotency_key, "snapshot", request, first)
            snapshot_id = str(claimed["snapshot_id"])
            try:
                return self.get_snapshot(agent_id, snapshot_id)
            except NotFound:
                pass  # the first attempt died before writing it: write it now
        info = self.core.agent(agent_id)
        now = self.core.clock()
        snapshot_id = snapshot_id or new_snapshot_id(kind, now)
        store_validation.identifier("snapshot_id", snapshot_id)
        try:
            snap, fifo = self.lifecycle.held(agent_id)
            text, tokens, _, batch = self.core.hot.summary(agent_id)
            state = {
                "agent_id": agent_id,
                "config": agent_config(info.model, snap.system_prompt, snap.tools),
                "blocks": [b.as_json() for b in snap.blocks],
                "summary": {"text": text, "tokens": tokens, "batch_id": batch},
                "fifo": [m.as_json() for m in fifo],
                "memory": payloads.memory_json(self.core.store.agent_memory(agent_id, now)),
            }
            payload, sha, size = payloads.encode(state)
            record = self.core.store.put_snapshot(
                SnapshotRecord(agent_id, snapshot_id, kind, reason, payload, sha, size, now, now + ttl if ttl else None)
            )
        except Exception:  # counted for the failed-snapshot alert (compose/alerts.yml), then raised
            metrics.snapshot("failed")
            raise
        metrics.snapshot("taken")
        self.core.audit(
            agent_id,
            EventKind.SNAPSHOT,
            {"snapshot_id": snapshot_id, "kind": kind, "bytes": len(payload), "fifo": len(fifo)},
            actor,
        )
        return SnapshotRecord(**{**record.__dict__, "payload": b""})

    def summary_versions(self, agent_id: str, *, limit: int = 20) -> list[SummaryVersion]:
        self.core.agent(agent_id)
        return self.core.store.summary_versions(agent_id, limit=limit)

    def list_snapshots(self, agent_id: str) -> list[SnapshotRecord]:
        self.core.agent(agent_id)
        return self.core.store.list_snapshots(agent_id)

    def get_snapshot(self, agent_id: str, snapshot_id: str) -> SnapshotRecord:
        """A snapshot's metadata (not its payload)."""
        self.core.agent(agent_id)
        return SnapshotRecord(**{**self.core.store.get_snapshot(agent_id, snapshot_id).__dict__, "payload": b""})

    def delete_snapshot(self, agent_id: str, snapshot_id: str, *, actor: str = Actor.SYSTEM) -> bool:
        self.core.agent(agent_id)
        deleted = self.core.store.delete_snapshot(agent_id, snapshot_id)
        if deleted:
            self.core.audit(agent_id, EventKind.SNAPSHOT_DELETED, {"snapshot_id": snapshot_id}, actor)
        return deleted

    def restore_snapshot(
        self, agent_id: str, snapshot_id: str, *, actor: str = Actor.SYSTEM, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Return the agent to a snapshot: blocks, summary, FIFO, settings, facts, state keys and
        fact edges exactly as captured (a snapshot taken before snapshots held facts and state
        leaves those as they are). The checksum is verified and the whole payload read first
        (SNAPSHOT_CORRUPT, nothing changed); the current state is kept as a ``pre_restore``
        snapshot; then one store transaction switches the agent over and its hot state is rebuilt
        from the store. A retry under the same idempotency key restores nothing (it would undo
        what happened since the first call) and answers with an empty ``pre_restore_snapshot_id``."""
        validation.idempotency_key(idempotency_key)
        self.core.agent(agent_id)
        record = self.core.store.get_snapshot(agent_id, snapshot_id)
        state = payloads.decode(record.payload, record.sha256)
        if state.get("agent_id") != agent_id:
            raise Conflict("the snapshot belongs to another agent", snapshot_id=snapshot_id)
        # Claimed only once the snapshot is known to be readable: a restore refused above (not
        # found, corrupt, another agent's) leaves no record that a retry would replay as done.
        if idempotency_key is not None:
            request = {"snapshot_id": snapshot_id}
            _, replayed = self.core.claim(agent_id, idempotency_key, "restore", request, {"done": True})
            if replayed:
                return {"agent_id": agent_id, "snapshot_id": snapshot_id, "pre_restore_snapshot_id": ""}
        # Everything is read before anything is written: a payload that cannot be read changes nothing.
        try:
            fifo = [Message.from_json(m) for m in state["fifo"]]
            blocks = [Block.from_json(b) for b in state["blocks"]]
            summary, config = dict(state["summary"]), dict(state["config"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotCorrupt(f"the snapshot cannot be read ({exc!r}); nothing was restored") from None
        memory = payloads.memory_of(state, agent_id)  # None: an older snapshot, facts and state stay
        # What was forgotten stays forgotten: the store's tombstones name every message and
        # document a forget removed, and nothing restored may bring one back.
        fifo, memory, summary = self._honour_tombstones(agent_id, record, fifo, memory, summary)
        before = self.create_snapshot(
            agent_id, kind="pre_restore", reason=f"before restoring {snapshot_id}", actor=actor
        )
        # Writes that change nothing the agent holds (they only make the switch-over possible):
        # the hot state's messages reach the store, and so do the snapshot's FIFO messages, which
        # come back if expired since (never if forgotten: those left the FIFO above).
        self.lifecycle.persist_hot(agent_id)
        ttl = self.core.settings.maintenance.recall_ttl_s
        self.core.store.spool_messages([stored_message(agent_id, m, ttl_s=ttl) for m in fifo])
        batch_id = self.lifecycle.fresh_id(agent_id)
        # The switch-over, in one store transaction: summary, FIFO, blocks, settings, facts, state
        # keys and fact edges change together or not at all.
        self.core.store.reset_context(
            ContextReset(
                agent_id,
                batch_id,
                str(summary.get("text", "")),
                int(summary.get("tokens", 0)),
                fifo_ids=[m.id for m in fifo],
                blocks=[block_write(agent_id, b) for b in blocks],
                config=config,
                memory=None if memory is None else self._linked(agent_id, memory),
            )
        )
        self.lifecycle.reload(agent_id)
        # Blocks, state and facts may all differ now: instances drop their whole cache of the
        # agent (an "agent reset" change clears every kind, :meth:`vcm.sync.state.SyncState.apply`).
        self.core.changed(agent_id, "agent", "*", None, "reset")
        self.core.audit(
            agent_id,
            EventKind.SNAPSHOT_RESTORED,
            {"snapshot_id": snapshot_id, "pre_restore_snapshot_id": before.snapshot_id, "fifo": len(fifo)},
            actor,
        )
        return {"agent_id": agent_id, "snapshot_id": snapshot_id, "pre_restore_snapshot_id": before.snapshot_id}

    def _honour_tombstones(
        self,
        agent_id: str,
        record: SnapshotRecord,
        fifo: list[Message],
        memory: AgentMemory | None,
        summary: dict[str, Any],
    ) -> tuple[list[Message], AgentMemory | None, dict[str, Any]]:
        """The snapshot's FIFO, memory and summary without what forgets removed since: forgotten
        messages leave the FIFO (the rebuild counts the FIFO's tokens from what is stored), facts
        lose the evidence pointing at forgotten messages and documents (:func:`vcm.snapshots.redacted`; edges to
        them or to facts gone are dropped by :meth:`_linked`). A summary taken before a
        message it may have covered was forgotten (not in the snapshot's FIFO, so possibly folded
        into it) comes back as the store's version of its batch, which that forget re-summarised
        without the message; where the store has no such version, it gets the note a forget leaves."""
        marks = self.core.store.tombstones(agent_id)
        if not marks.messages and not marks.documents:
            return fifo, memory, summary
        captured = {m.id for m in fifo}
        kept = [m for m in fifo if m.id not in marks.messages]
        if memory is not None:
            memory = payloads.redacted(memory, set(marks.messages), set(marks.documents))
        later = [m for m, at in marks.messages.items() if at >= record.created_at and m not in captured]
        if later:
            summary = self._noted(agent_id, summary)
        return kept, memory, summary

    def _noted(self, agent_id: str, summary: dict[str, Any]) -> dict[str, Any]:
        batch = int(summary.get("batch_id", 0))
        stored = next((v for v in self.core.store.summary_versions(agent_id, limit=1000) if v.batch_id == batch), None)
        if batch > 0 and stored is not None:
            # The version the snapshot holds, as the store keeps it now: a forget since re-summarised
            # it without the message (vcm.service.redaction), so the restore takes the rewrite.
            return {**summary, "text": stored.text, "tokens": self.core.hot.summary_tokens(agent_id, stored.text)}
        if FORGOTTEN_NOTE in str(summary.get("text", "")):
            return summary  # noted by an earlier forget already
        text = f"{summary.get('text', '')}\n{FORGOTTEN_NOTE}".strip()
        tokens = self.core.hot.summary_tokens(agent_id, text)
        cap = int(self.core.agent(agent_id).window * self.core.settings.budget.summary_cap)
        # Over the summary cap the snapshot's summary stays as it is (the forget's audit row is the note).
        return {**summary, "text": text, "tokens": tokens} if tokens <= cap else summary

    def _linked(self, agent_id: str, memory: AgentMemory) -> AgentMemory:
        """The memory with only the edges whose ends exist once it is back: its own facts, and
        messages still stored (one forgotten since the snapshot takes its edges with it, as a
        forget does)."""
        facts = {fact_node(agent_id, f.fact_id) for f in memory.facts}
        wanted = {n.key.split(":", 1)[1] for e in memory.edges for n in (e.src, e.dst) if n.collection == "messages"}
        stored = {m.message_id for m in self.core.store.get_messages(agent_id, sorted(wanted))} if wanted else set()
        messages = {message_node(agent_id, m) for m in stored}
        edges = tuple(e for e in memory.edges if all(n in facts or n in messages for n in (e.src, e.dst)))
        return replace(memory, edges=edges)

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
        return [r.agent_id for r in self.core.store.list_agents()]
