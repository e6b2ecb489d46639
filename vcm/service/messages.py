"""The main context's messages through the façade: append (with the tags a reply captures),
requested evictions, notes straight into recall, and the assembled context.

An append is one Lua call on the hot path; what follows it here (write-through, spool, flush,
audit rows, captured facts) makes every entry point's append the same."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from vcm import validation
from vcm.errors import IdempotencyMismatch, PolicyRefused, ValidationError, VcmError
from vcm.facts.capture import Captured, capture
from vcm.hotpath.budget import Budget, FifoEntry, plan_eviction
from vcm.hotpath.context import AssembledContext, assemble
from vcm.obs import audit, footprint, metrics
from vcm.service.core import Core
from vcm.service.facts import Facts
from vcm.service.state import StateKeys
from vcm.store.audit_names import Actor, EventKind, audit_id
from vcm.store.types import StoredMessage
from vcm.types import AppendResult, BatchInfo, Message

# Messages in one append_many call; more go in several.
MAX_APPEND_MANY = 1000
# The largest first_index of an append_many list (a conversation far longer than any real one).
MAX_FIRST_INDEX = 10**9
# Messages of an append_many list written through to the store in one transaction.
WRITE_TOGETHER = 100
LISTED_FIELDS = frozenset({"role", "content", "name", "pinned", "metadata", "tool_call_id", "tool_calls", "created_at"})


def _check_listed(i: int, message: Any, max_chars: int, now: float) -> None:
    """One message of an ``append_many`` list, checked as its append will check it, its errors
    naming where it is in the list as the API's own checks do (``messages.3.content``)."""
    where = f"messages.{i}"
    if not isinstance(message, Mapping):
        raise ValidationError(f"{where} must be an object", field=where)
    unknown = sorted(set(message) - LISTED_FIELDS)
    if unknown:
        raise ValidationError(f"{where}: unknown field {unknown[0]!r}", field=f"{where}.{unknown[0]}")
    if "role" not in message or "content" not in message:
        missing = "role" if "role" not in message else "content"
        raise ValidationError(f"{where}: {missing} is required", field=f"{where}.{missing}")
    try:
        validation.message(
            message["role"], message["content"], max_chars, author=message.get("name"),
            pinned=message.get("pinned", False), meta=message.get("metadata"), call_id=message.get("tool_call_id"),
            calls=message.get("tool_calls"),
        )  # fmt: skip
        validation.created_at(message.get("created_at"), now)
    except ValidationError as exc:
        field = exc.details.get("field")
        raise ValidationError(f"{where}: {exc.message}", field=f"{where}.{field}" if field else where) from None


class Messages:
    """append, evict, write_recall, context, fifo_ids and keep_captured."""

    def __init__(self, core: Core, facts: Facts, state: StateKeys) -> None:
        self.core = core
        # A reply's [MEMORY:type] / [STATE:key] tags become facts and state keys.
        self.facts = facts
        self.state = state
        # The write-throughs an append_many on this thread holds back (see append_many).
        self._listing = threading.local()

    def append(
        self,
        agent_id: str,
        role: str,
        content: str,
        *,
        name: str | None = None,
        pinned: bool = False,
        metadata: Mapping[str, Any] | None = None,
        tool_call_id: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        idempotency_key: str | None = None,
        actor: str = Actor.SYSTEM,
        token_sha256: str | None = None,
        created_at: float | None = None,
    ) -> AppendResult:
        """Append one message. ``token_sha256``: the caller's agent token digest, checked in the
        append's own Lua call (see :meth:`HotState.append`). ``created_at``: when it was said
        (seconds since the epoch), for history imported with its own times; default now.

        An assistant message's ``[MEMORY:type]`` / ``[STATE:key]`` tags (:mod:`vcm.facts.capture`)
        are kept as facts / state pointing at the message, and the message enters the context
        without them."""
        captured = capture(content) if role == "assistant" and isinstance(content, str) and "[" in content else None
        if captured is not None and captured.any:
            content = captured.stripped
            metadata = {
                **(dict(metadata) if isinstance(metadata, Mapping) else {}),
                "memory_tags": {"facts": len(captured.memories), "state": [k for k, _ in captured.states]},
            }
        with self.core.refusals_audited(agent_id, "append", actor, idempotency_key):
            res = self.core.hot_call(
                agent_id,
                self.core.hot.append,
                agent_id,
                role,
                content,
                name=name,
                pinned=pinned,
                metadata=metadata,
                tool_call_id=tool_call_id,
                tool_calls=tool_calls,
                idempotency_key=idempotency_key,
                actor=actor,
                token_sha256=token_sha256,
                created_at=created_at,
            )
        # Before the caller hears of it: the store holds the message (write-through) and the id
        # floor stays ahead of the sequence. A replay writes it too: its first attempt may have
        # died before doing so.
        ids = [res.message_id] + ([res.pressure_message_id] if res.pressure_message_id else [])
        deferred = getattr(self._listing, "pending", None)
        if deferred is None:
            self._write_through(agent_id, [res])
        else:  # append_many writes its messages through together, before its caller hears of any
            deferred.append(res)
        if res.backlog is not None and self.core.behind is not None:
            # Write-behind: past its bound, the backlog is written through before the answer.
            self.core.behind.after_append(agent_id, res.backlog, res)
        if res.replayed:
            # The first request may have died between its Lua call and its follow-ups. Hand its
            # batch over again with the flush row (both idempotent); a missed spool is the
            # sweeper's to catch (reconciliation), so a plain retry dispatches nothing.
            if res.batch is not None:
                self.core.batch_begun(agent_id, res.batch, res.total, res.target_unreachable, actor, idempotency_key)
            return res
        if captured is not None and captured.any:
            self.keep_captured(agent_id, captured, res.message_id, actor)
        # The append's audit row is written by the spool task with the message (vcm.tasks.spool),
        # so the hot path stays one Redis round trip.
        if res.gauges is not None:
            self.core.gauges_seen(agent_id, res.gauges)
        metrics.appended(1)
        self.core.dispatcher.spool(agent_id, ids)
        if res.action == "warning":
            metrics.warning()
            self.core.event(
                agent_id,
                EventKind.MEMORY_PRESSURE,
                {"total": res.total, "message_id": res.pressure_message_id},
                actor,
                event_id=audit_id(agent_id, "pressure", res.pressure_message_id),
            )
        if res.batch is not None:
            self.core.batch_begun(agent_id, res.batch, res.total, res.target_unreachable, actor)
            metrics.flush("threshold")
        return res

    def append_many(
        self,
        agent_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
        actor: str = Actor.SYSTEM,
        token_sha256: str | None = None,
        first_index: int = 0,
    ) -> list[AppendResult]:
        """Append a list of messages in order (an imported conversation: each may carry its
        ``created_at``), each as :meth:`append` does it. Every message is checked before the first
        goes in, so bad input appends nothing. ``idempotency_key`` keys each message as
        ``<key>:<index>``: a retry of the whole list replays what went in and goes on from there.
        ``first_index``: the index of the list's first message in a longer conversation sent in
        lists (message *i* is keyed ``<key>:<first_index + i>``), so a retry in lists of another
        size keys every message as before.
        A refusal past the checks (a message larger than the window, say) leaves the messages
        before it appended and says so: ``appended`` (how many) and ``message_ids`` in its details."""
        validation.agent_id(agent_id)
        if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
            raise ValidationError("messages must be a non-empty list of messages", field="messages")
        if len(messages) > MAX_APPEND_MANY:
            raise ValidationError(f"at most {MAX_APPEND_MANY} messages in one call", field="messages")
        if isinstance(first_index, bool) or not isinstance(first_index, int) or not 0 <= first_index <= MAX_FIRST_INDEX:
            raise ValidationError(f"first_index must be an integer from 0 to {MAX_FIRST_INDEX}", field="first_index")
        if first_index and idempotency_key is None:
            raise ValidationError(
                "first_index places keyed messages: give idempotency_key with it", field="first_index"
            )
        if idempotency_key is not None:
            validation.idempotency_key(idempotency_key)
            # the longest derived key
            validation.idempotency_key(f"{idempotency_key}:{first_index + len(messages) - 1}")
        now = self.core.clock()
        for i, m in enumerate(messages):
            _check_listed(i, m, self.core.settings.budget.max_content_chars, now)
        results: list[AppendResult] = []
        # The write-through of each append, kept for one store transaction per WRITE_TOGETHER
        # messages (one each cost ~1 ms a message on the embedded store): the rows are the ones
        # the spool and an eviction's commit write too, so it does not matter who writes first.
        # Well within the id reserve's half that the floor is raised from, so the floor stays ahead.
        together = max(1, min(WRITE_TOGETHER, self.core.durable.reserve // 4))
        pending: list[AppendResult] = []
        self._listing.pending = pending
        try:
            for i, m in enumerate(messages):
                try:
                    results.append(self._listed(agent_id, m, first_index + i, idempotency_key, actor, token_sha256))
                except VcmError as exc:
                    exc.details.update(index=i, appended=len(results), message_ids=[r.message_id for r in results])
                    raise
                if len(pending) >= together:
                    self._write_through(agent_id, pending)
                    pending.clear()
        finally:
            self._listing.pending = None
            if pending:
                self._write_through(agent_id, pending)
        return results

    def _listed(
        self,
        agent_id: str,
        m: Mapping[str, Any],
        i: int,
        idempotency_key: str | None,
        actor: str,
        token_sha256: str | None,
    ) -> AppendResult:
        return self.append(
            agent_id,
            m["role"],
            m["content"],
            name=m.get("name"),
            pinned=m.get("pinned", False),
            metadata=m.get("metadata"),
            tool_call_id=m.get("tool_call_id"),
            tool_calls=m.get("tool_calls"),
            idempotency_key=None if idempotency_key is None else f"{idempotency_key}:{i}",
            actor=actor,
            token_sha256=token_sha256,
            created_at=m.get("created_at"),
        )

    def _write_through(self, agent_id: str, appends: Sequence[AppendResult]) -> None:
        """The store side of ``appends`` (their messages, any pressure notice, and the keyed ones'
        idempotency records as their replies gave them), fenced by the incarnation each ran under
        (a list of appends spans two only if the agent was deleted and re-created meanwhile)."""
        groups: dict[str | None, list[AppendResult]] = {}
        for r in appends:
            groups.setdefault(r.incarnation, []).append(r)
        for incarnation, group in groups.items():
            ids = [i for r in group for i in (r.message_id, r.pressure_message_id) if i]
            known = [r.message for r in group if r.message is not None]
            records = {
                m.idempotency_key: r.record for r in group if r.record and (m := r.message) and m.idempotency_key
            }
            self.core.durable.appended(
                agent_id, ids, max(r.seq for r in group), known=known, records=records, incarnation=incarnation
            )

    def evict(
        self,
        agent_id: str,
        count: int | None = None,
        *,
        target_tokens: int | None = None,
        summarize: bool = True,
        idempotency_key: str | None = None,
        actor: str = Actor.SYSTEM,
    ) -> tuple[int, BatchInfo | None]:
        """Begin an eviction batch now: the oldest ``count`` unpinned messages, or (``count``
        None) as many of the oldest as bring the context to ``target_tokens`` (None: the target
        line). ``summarize`` False leaves the recursive summary as it is for this batch; recall
        gets every message either way."""
        if count is not None and target_tokens is not None:
            raise ValidationError("send count or target_tokens, not both", field="count")
        if target_tokens is not None and (
            not isinstance(target_tokens, int) or isinstance(target_tokens, bool) or target_tokens < 0
        ):
            raise ValidationError("target_tokens must be an integer of at least 0", field="target_tokens")
        hot_key = idempotency_key
        if count is None:
            count, hot_key = self._count_for_target(agent_id, target_tokens, summarize, idempotency_key)
            if count == 0:
                return self.core.hot.gauges(agent_id).total, None
        with self.core.refusals_audited(agent_id, "evict", actor, idempotency_key):
            total, batch = self.core.hot_call(
                agent_id, self.core.hot.evict_oldest, agent_id, count, idempotency_key=hot_key
            )
        # Its record, in the store too: a retry after Redis lost it evicts nothing more.
        self.core.durable.keep_hot_record(agent_id, hot_key)
        if batch is not None:
            if not summarize and batch.message_ids:  # before the cold path can see the batch
                self.core.hot.skip_summary(agent_id, batch.id, batch.message_ids[0])
            self.core.batch_begun(agent_id, batch, total, False, actor, idempotency_key)
            metrics.flush("request")
        return total, batch

    def _count_for_target(
        self, agent_id: str, target_tokens: int | None, summarize: bool, idempotency_key: str | None
    ) -> tuple[int, str | None]:
        """How many of the oldest unpinned messages bring the context to the target, planned as
        the flush path plans (:func:`vcm.hotpath.budget.plan_eviction`). Under a key the first
        call's count is kept with the key, so a retry evicts that batch again (a replay) instead
        of planning afresh on the smaller context; the hot path's own record then lives under a
        derived key."""
        snap = self.core.hot_call(agent_id, self.core.hot.snapshot, agent_id)
        info = self.core.agent(agent_id)
        gauges = assemble(snap).gauges
        target = target_tokens
        if target is None:
            target = Budget.for_window(info.window, self.core.settings.budget).target
        pending = sum(n for _, n, _ in snap.placeholders)
        plan = plan_eviction(
            [FifoEntry(m.id, m.tokens, m.pinned) for m in snap.fifo],
            gauges.total,
            target,
            snap.counter("ph_base"),
            pending=pending,
            placeholders=gauges.placeholders,
        )
        count = len(plan.message_ids)
        if idempotency_key is None:
            return count, None
        request = {"target_tokens": target_tokens, "summarize": summarize}
        first, _ = self.core.claim(agent_id, idempotency_key, "evict_fifo", request, {"count": count})
        return int(first["count"]), "evict#" + hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()[:32]

    def write_recall(
        self,
        agent_id: str,
        content: str,
        *,
        role: str = "assistant",
        idempotency_key: str | None,
        actor: str = Actor.SYSTEM,
    ) -> StoredMessage:
        """A note straight into recall memory, never into the context window.

        A note needs an idempotency key (VALIDATION_ERROR without one): its message id comes from
        the key, so a retried note is the same note. The key is claimed before anything is
        written (one atomic check-and-record in the hot state), so two concurrent notes under one
        key cannot both succeed: the second gets the first's note, or IDEMPOTENCY_MISMATCH when
        its text differs."""
        if idempotency_key is None:
            raise ValidationError("a recall note needs an idempotency key", field="idempotency_key")
        validation.role(role)
        content = validation.text(content, "content", self.core.settings.budget.max_content_chars)
        validation.idempotency_key(idempotency_key)
        info = self.core.agent(agent_id)
        # The id comes from the idempotency key, so the store's idempotent spool dedupes retries.
        message_id = "r" + hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()[:20]
        request = {"role": role, "content_sha256": hashlib.sha256(content.encode("utf-8")).hexdigest()}
        claimed, replayed = self.core.claim(
            agent_id, idempotency_key, "write_recall", request, {"message_id": message_id}
        )
        message_id = str(claimed["message_id"])
        existing = self.core.store.get_messages(agent_id, [message_id])
        if existing:
            # The claim expires after idempotency_ttl_s; the note itself does not.
            if (existing[0].role, existing[0].content) != (role, content):
                raise IdempotencyMismatch("this idempotency key was already used for a different note")
            return existing[0]
        # First use, or a replay whose first attempt died before its write: write it (idempotent).
        _, seq = self.core.hot.reserve_message_id(agent_id)
        tokens = self.core.hot.counter(info.model).message(content)
        now = self.core.clock()
        ttl = self.core.settings.maintenance.recall_ttl_s  # notes are recall like any message: same retention
        msg = StoredMessage(
            agent_id,
            message_id,
            seq,
            role,
            content,
            tokens,
            now,
            metadata={"kind": "recall_note"},
            expires_at=now + ttl if ttl else None,
        )
        self.core.store.spool_messages([msg])
        self.core.event(
            agent_id,
            EventKind.RECALL_WRITE,
            {"message_id": message_id, "tokens": tokens, **({"replayed": True} if replayed else {})},
            actor,
            event_id=audit_id(agent_id, "recall", message_id),
            idempotency_key=idempotency_key,
            change=footprint.recall_note(content, tokens, role=role),
        )
        return self.core.store.get_messages(agent_id, [message_id])[0]

    def write_recall_entries(
        self,
        agent_id: str,
        entries: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str,
        actor: str = Actor.SYSTEM,
    ) -> list[StoredMessage]:
        """Several notes (``{"content", "role"?}`` each) straight into recall in one store write
        under one idempotency key: all of them or none. A retry with the key returns the same
        notes; the key used for other notes is IDEMPOTENCY_MISMATCH. The ids come from the key
        and each note's position, as :meth:`write_recall`'s come from its key."""
        if not isinstance(entries, Sequence) or isinstance(entries, str) or not 1 <= len(entries) <= 100:
            raise ValidationError("entries must be a list of 1 to 100 notes", field="entries")
        validation.idempotency_key(idempotency_key)
        limit = self.core.settings.budget.max_content_chars
        checked: list[tuple[str, str]] = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or set(entry) - {"content", "role"}:
                raise ValidationError("each entry is {content, role?}", field=f"entries.{i}")
            role = str(entry.get("role", "assistant"))
            validation.role(role)
            checked.append((role, validation.text(entry.get("content"), f"entries.{i}.content", limit)))
        info = self.core.agent(agent_id)
        base = hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()[:16]
        ids = [f"r{base}e{i}" for i in range(len(checked))]
        digest = hashlib.sha256(json.dumps(checked, ensure_ascii=False).encode("utf-8")).hexdigest()
        self.core.claim(agent_id, idempotency_key, "write_recall", {"entries_sha256": digest}, {"message_ids": ids})
        existing = self.core.store.get_messages(agent_id, ids)
        if len(existing) == len(ids):  # a replay whose first call wrote them (one write: all or none)
            return existing
        counter = self.core.hot.counter(info.model)
        now = self.core.clock()
        ttl = self.core.settings.maintenance.recall_ttl_s
        notes = []
        for message_id, (role, content) in zip(ids, checked, strict=True):
            _, seq = self.core.hot.reserve_message_id(agent_id)
            notes.append(
                StoredMessage(
                    agent_id,
                    message_id,
                    seq,
                    role,
                    content,
                    counter.message(content),
                    now,
                    metadata={"kind": "recall_note"},
                    expires_at=now + ttl if ttl else None,
                )
            )
        rows = [
            audit.event(
                agent_id,
                EventKind.RECALL_WRITE,
                footprint.recall_note(note.content, note.tokens, role=note.role),
                actor=actor,
                event_id=audit_id(agent_id, "recall", note.message_id),
                idempotency_key=idempotency_key,
                created_at=now,
                details={"message_id": note.message_id, "tokens": note.tokens},
            )
            for note in notes
        ]
        # One store transaction: every note and its audit row, or none of them.
        self.core.store.spool_messages(notes, events=rows)
        return self.core.store.get_messages(agent_id, ids)

    def context(self, agent_id: str, *, token_sha256: str | None = None) -> AssembledContext:
        """The assembled main context; ``token_sha256`` as in :meth:`append`, read in the snapshot's
        own transaction."""
        return self.context_and_fifo(agent_id, token_sha256=token_sha256)[0]

    def context_and_fifo(
        self, agent_id: str, *, token_sha256: str | None = None
    ) -> tuple[AssembledContext, list[Message]]:
        """:meth:`context` and its FIFO's messages, oldest first, from one snapshot (the prompt
        builder needs both: a second snapshot cost ~5 ms a build on the embedded hot state)."""
        snap = self.core.hot_call(agent_id, self.core.hot.snapshot, agent_id, token_sha256=token_sha256)
        self.core.agent_seen(snap.info)  # a build's agent checks need no read of their own
        assembled = assemble(snap)
        self.core.gauges_seen(agent_id, assembled.gauges)
        return assembled, list(snap.fifo)

    def fifo_ids(self, agent_id: str) -> list[str]:
        """The ids of the messages in the agent's FIFO, oldest first."""
        return [m.id for m in self.core.hot_call(agent_id, self.core.hot.snapshot, agent_id).fifo]

    def keep_captured(self, agent_id: str, captured: Captured, message_id: str, actor: str) -> dict[str, Any]:
        """Store what a reply's tags asked to keep; a refused one is an event, never a failed append."""
        kept: dict[str, Any] = {"facts": [], "state": [], "refused": 0}
        pointer = [{"kind": "message", "id": message_id}]
        for type_, text in captured.memories:
            known = type_ if type_ in self.core.settings.facts.types else "learned"
            try:
                res = self.facts.remember(
                    agent_id, text, type=known, evidence=pointer, tags=(type_,) if known != type_ else (), actor=actor
                )
                kept["facts"].append(res.fact.fact_id)
            except (PolicyRefused, ValidationError):
                kept["refused"] += 1
        for key, value in captured.states:
            try:
                self.state.set_state(agent_id, key, value, actor=actor)
                kept["state"].append(key)
            except (PolicyRefused, ValidationError):
                kept["refused"] += 1
        return kept
