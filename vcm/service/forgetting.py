"""Forgetting one message wherever it is, and what was derived from it.

:meth:`Forgetting.forget` takes the message out of every place it can be, in this order:

1. **the main context**: a message still in the FIFO leaves it with its tokens, in one Lua call
   (:data:`vcm.hotpath.lua.FORGET_MESSAGE`); one in a pending eviction batch is refused with
   CONFLICT until the batch has committed (the commit would otherwise write it back);
2. **the facts derived from it**: every fact whose evidence points at it is removed, or, when
   other evidence remains, rewritten without the pointer (its words are then also those of the
   other evidence). A conflict's open question quotes both sides, so one citing the message goes
   whole; the others' ``conflict_with`` lose the removed ids;
3. **the store**: the message row, its vectors, its text index entry and every graph edge of it
   (``cites``, ``mentions``, ``recall_log``) go (the store's ``forget_message``).

4. **the summary**: a message an eviction folded into the summary has every summary version from
   that batch on re-summarised from what remains (:mod:`vcm.service.redaction`); without the cold
   path's summariser wired in, the summary gets a note that a message was removed instead.

Hot state first: a crash after it leaves the message in the store, where a retry of the forget
finds and removes it (every step is idempotent; the summary's replay runs again whenever an
``evict`` row names the message).

The answer is a receipt: what went, by kind, and the ids of the facts removed and rewritten. It is
kept as the forget's audit row (the receipt id as the row's idempotency key), and
:meth:`Forgetting.check` re-reads every place against it: the check the tests use, and an
operator's proof.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vcm.errors import NotFound, ValidationError
from vcm.obs import audit
from vcm.service.core import Core
from vcm.service.facts import Facts
from vcm.service.lifecycle import Lifecycle
from vcm.service.redaction import SummaryRedaction
from vcm.service.snapshots import FORGOTTEN_NOTE
from vcm.store import validation as store_validation
from vcm.store.audit_names import Actor, EventKind
from vcm.store.principals import is_holder
from vcm.store.types import EDGE_KINDS, Fact, message_node
from vcm.types import Gauges


@dataclass(frozen=True)
class ForgetReceipt:
    """What one forget removed: ``removed`` counts by kind (``messages``, ``message_vectors``,
    ``text_index_entries``, ``edges``, ``fifo``, ``fifo_tokens``, ``facts_removed``,
    ``facts_rewritten``, ``summary_versions`` rewritten; only those above 0) and the facts' ids."""

    receipt: str
    agent_id: str
    message_id: str
    removed: dict[str, int]
    facts_removed: tuple[str, ...] = ()
    facts_rewritten: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "receipt": self.receipt,
            "agent_id": self.agent_id,
            "message_id": self.message_id,
            "removed": dict(self.removed),
            "facts_removed": list(self.facts_removed),
            "facts_rewritten": list(self.facts_rewritten),
        }


@dataclass(frozen=True)
class ForgetCheck:
    """A receipt re-checked: ``clean`` when nothing of the message is left; else ``left`` says
    where (``recall``, ``context``, ``edges``: counts; ``facts``: ids of facts citing it or
    removed facts that exist again)."""

    receipt: str
    agent_id: str
    message_id: str
    clean: bool
    left: dict[str, Any] = field(default_factory=dict)


class Forgetting:
    """forget (with its receipt), forget_message (its counts only, as before), check_forget."""

    def __init__(self, core: Core, facts: Facts, lifecycle: Lifecycle, redaction: SummaryRedaction) -> None:
        self.core = core
        self.facts = facts
        self.lifecycle = lifecycle
        self.redaction = redaction

    def forget_message(self, agent_id: str, message_id: str, *, actor: str = Actor.SYSTEM) -> dict[str, int]:
        return self.forget(agent_id, message_id, actor=actor).removed

    def forget(self, agent_id: str, message_id: str, *, actor: str = Actor.SYSTEM) -> ForgetReceipt:
        self.core.agent(agent_id)
        store_validation.identifier("message_id", message_id)
        counts: dict[str, int] = {}
        hot = self.core.hot_call(agent_id, self.core.hot.forget_message, agent_id, message_id)
        if hot["removed"]:
            counts["fifo"], counts["fifo_tokens"] = 1, int(hot["tokens"])
            self.core.gauges_seen(agent_id, Gauges(*(int(v) for v in hot["gauges"])))
        # Before the store forgets the message, which takes its edges: what the receipt counts.
        node = message_node(agent_id, message_id)
        counts["edges"] = sum(len(self.core.store.traverse(node, [k], direction="any")) for k in EDGE_KINDS)
        removed, rewritten = self._derived_facts(agent_id, lambda e: _points_at(e, "message", message_id))
        counts["facts_removed"], counts["facts_rewritten"] = len(removed), len(rewritten)
        stored = dict(self.core.store.forget_message(agent_id, message_id).counts)
        counts.update(stored)
        # The store's text index entry goes with the row (the embedded index drains its deletes).
        counts["text_index_entries"] = stored.get("messages", 0)
        if not hot["removed"]:  # it had left the context, so a summary may speak of it
            if self.redaction.available:
                if (batch := self.redaction.batch_of(agent_id, message_id)) is not None:
                    counts["summary_versions"] = len(self.redaction.redact(agent_id, batch).versions)
            elif stored.get("messages"):
                self.lifecycle.note_in_summary(agent_id, FORGOTTEN_NOTE)
        receipt = ForgetReceipt(
            "fr" + uuid.uuid4().hex[:20],
            agent_id,
            message_id,
            {k: v for k, v in counts.items() if v},
            tuple(removed),
            tuple(rewritten),
        )
        details = {**receipt.as_json(), "removed": receipt.removed}
        # Written to the store directly, not through the audit helper that swallows a failure: a
        # receipt that cannot be checked later is an error the caller sees (a retry forgets nothing
        # twice and writes a new receipt).
        self.core.store.append_event(
            audit.event(
                agent_id,
                EventKind.FORGET,
                None,
                actor=actor,
                event_id=f"{agent_id}:forget:{receipt.receipt}",
                idempotency_key=receipt.receipt,
                created_at=self.core.clock(),
                details=details,
            )
        )
        return receipt

    def check_forget(self, agent_id: str, receipt: str) -> ForgetCheck:
        """Re-read every place the receipt's message could be: the store's messages (recall), the
        hot state (FIFO, batches), its graph edges, and the facts (any status) citing it or
        removed by the forget."""
        self.core.agent(agent_id)
        if not isinstance(receipt, str) or not receipt.startswith("fr") or len(receipt) > 64:
            raise ValidationError("not a forget receipt", field="receipt")
        rows = self.core.store.query_events(agent_id, [EventKind.FORGET], idempotency_key=receipt, limit=1).items
        if not rows:
            raise NotFound(f"no forget receipt {receipt!r} for agent {agent_id!r}", agent_id=agent_id)
        row = rows[0].payload
        message_id = str(row["message_id"])
        left: dict[str, Any] = {}
        if n := len(self.core.store.get_messages(agent_id, [message_id])):
            left["recall"] = n
        if n := len(self.core.hot_call(agent_id, self.core.hot.get_messages, agent_id, [message_id])):
            left["context"] = n
        node = message_node(agent_id, message_id)
        if n := sum(len(self.core.store.traverse(node, [k], direction="any")) for k in EDGE_KINDS):
            left["edges"] = n
        gone = set(row.get("facts_removed") or ())
        facts = [f for _, owned in self._owned(agent_id) for f in owned]
        if found := sorted(f.fact_id for f in facts if f.fact_id in gone or _cites(f, message_id, agent_id)):
            left["facts"] = found
        return ForgetCheck(receipt, agent_id, message_id, not left, left)

    def forget_document(self, agent_id: str, doc_id: str, *, actor: str = Actor.SYSTEM) -> dict[str, int]:
        """An archival document's chunks go, and the facts citing it go or are rewritten without
        it, as for a message; counts by kind."""
        self.core.agent(agent_id)
        store_validation.identifier("doc_id", doc_id)
        removed, rewritten = self._derived_facts(agent_id, lambda e: _points_at(e, "document", doc_id))
        counts = dict(self.core.store.forget_document(agent_id, doc_id).counts)
        counts["facts_removed"], counts["facts_rewritten"] = len(removed), len(rewritten)
        counts = {k: v for k, v in counts.items() if v}
        self.core.audit(agent_id, EventKind.FORGET, {"doc_id": doc_id, "removed": counts}, actor)
        return counts

    def _owned(self, agent_id: str) -> list[tuple[str, Sequence[Fact]]]:
        """Every fact, whatever its status (an archived or shadow fact can come back), of the agent
        and of its user and domain: ``(holder, facts)``; the whole structured memory is read, as a
        snapshot reads it; a forget is rare."""
        now = self.core.clock()
        holders = [agent_id, *self.facts.principals.holders(agent_id).values()]
        return [(h, self.core.store.agent_memory(h, now).facts) for h in holders]

    def _derived_facts(self, agent_id: str, points: Callable[[Any], bool]) -> tuple[list[str], list[str]]:
        """Remove or rewrite the facts with evidence ``points`` at — the agent's own, and those it
        wrote to its user's or domain's memory (their pointers name it); their ids."""
        removed: list[str] = []
        rewritten: list[str] = []
        for holder, facts in self._owned(agent_id):
            mine = points if holder == agent_id else (lambda e: points(e) and e.get("agent_id") == agent_id)
            gone, changed = self._derived_of(holder, facts, mine)
            removed.extend(gone)
            rewritten.extend(changed)
        return sorted(removed), sorted(rewritten)

    def _derived_of(
        self, agent_id: str, facts: Sequence[Fact], points: Callable[[Any], bool]
    ) -> tuple[list[str], list[str]]:
        citing = [f for f in facts if any(points(e) for e in f.evidence)]
        doomed: list[Fact] = []
        kept: list[Fact] = []
        for f in citing:
            rest = [e for e in f.evidence if not points(e)]
            # An open question of a conflict quotes each side's value: it goes whole.
            if rest and not (f.type == "question" and (f.key or "").startswith("conflict:")):
                kept.append(replace(f, evidence=tuple(rest), updated_at=self.core.clock()))
            else:
                doomed.append(f)
        gone = {f.fact_id for f in doomed}
        if gone:
            self.core.store.delete_facts(agent_id, sorted(gone))
            for fact_id in sorted(gone) if not is_holder(agent_id) else ():  # shared facts: no feed
                self.core.changed(agent_id, "fact", fact_id, None, "delete")
        rewritten = {f.fact_id: f for f in kept}
        for f in facts:
            # A removed fact leaves no dangling conflict marks behind.
            if f.fact_id not in gone and set(f.conflict_with) & gone:
                base = rewritten.get(f.fact_id, f)
                rewritten[f.fact_id] = replace(base, conflict_with=tuple(c for c in f.conflict_with if c not in gone))
        for f in rewritten.values():
            self.facts.put_fact(f, f.version)
        return sorted(gone), sorted(rewritten)


def _points_at(pointer: Any, kind: str, item_id: str) -> bool:
    return isinstance(pointer, Mapping) and pointer.get("kind") == kind and str(pointer.get("id")) == item_id


def _cites(fact: Fact, message_id: str, agent_id: str) -> bool:
    """The fact cites the agent's message (a shared fact's pointer names the agent that wrote it)."""
    shared = is_holder(fact.agent_id)
    return any(_points_at(e, "message", message_id) and (not shared or e.get("agent_id") == agent_id)
               for e in fact.evidence)  # fmt: skip
