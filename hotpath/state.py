"""Per-agent hot state in Redis: every mutation is one Lua call (see :mod:`vcm.hotpath.lua`).

The reads are :class:`~vcm.hotpath.reads.HotReads`, the idempotency records
:class:`~vcm.hotpath.claims.HotClaims` and the working blocks :class:`~vcm.hotpath.blocks.HotBlocks`
(which :class:`HotState` extends, in that order); an agent's
budget configuration is :mod:`vcm.hotpath.creation`; the replies of the scripts are decoded by
:mod:`vcm.hotpath.codec`. Beside the agent's memory, the hot state holds the records other
components keep under the agent's hash tag, each behind named operations: ingestion jobs, the
change feed, instance reports, chat turn locks, bearer token digests and heartbeat chains."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import redis

from vcm import validation
from vcm.errors import ValidationError
from vcm.hotpath import keys, lua, render
from vcm.hotpath.backlog import SpoolBacklog, writes_through
from vcm.hotpath.blocks import HotBlocks
from vcm.hotpath.changes import ChangeFeed
from vcm.hotpath.claims import claim_record
from vcm.hotpath.codec import as_str, dumps, fingerprint, num, reply
from vcm.hotpath.creation import creation_of, restored_counters
from vcm.hotpath.credentials import AgentTokens
from vcm.hotpath.heartbeats import HeartbeatStore
from vcm.hotpath.instances import InstanceBoard
from vcm.hotpath.jobs import JobBoard
from vcm.hotpath.reads import Snapshot
from vcm.hotpath.timeline import Timeline
from vcm.hotpath.tokens import TokenCounter
from vcm.hotpath.turns import TurnLocks
from vcm.settings import Settings
from vcm.types import (
    AgentImage,
    AgentInfo,
    AppendResult,
    Backlog,
    BatchInfo,
    FinishResult,
    Gauges,
    Message,
    marked,
)

__all__ = ["HotState", "Snapshot", "claim_record"]


class HotState(HotBlocks):
    """The hot path's Redis state for all agents. Thread-safe; one per process is enough."""

    def __init__(self, client: redis.Redis, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(client)
        self.settings = settings
        self.clock = clock
        # Registered once: redis-py sends EVALSHA and loads the script on NOSCRIPT.
        self._create = client.register_script(lua.CREATE_AGENT)
        self._append = client.register_script(lua.APPEND)
        self._append_as_agent = client.register_script(lua.APPEND_AS_AGENT)
        self._put_block = client.register_script(lua.PUT_BLOCK)
        self._finish = client.register_script(lua.FINISH_EVICTION)
        self._evict = client.register_script(lua.EVICT_OLDEST)
        self._claim = client.register_script(lua.IDEMPOTENCY_CLAIM)
        self._restore = client.register_script(lua.RESTORE_AGENT)
        self._forget_message = client.register_script(lua.FORGET_MESSAGE)
        self._replace_summary = client.register_script(lua.REPLACE_SUMMARY)
        # Archival ingestion jobs; a record outlives its last change as long as an idempotency key.
        self.jobs = JobBoard(client, settings.idempotency_ttl_s)
        # What client instances of an agent follow and report (vcm.service.replicas).
        sync = settings.sync
        self.changes = ChangeFeed(client, maxlen=sync.feed_maxlen, ttl_s=sync.feed_ttl_s, clock=clock)
        self.instances = InstanceBoard(client, ttl_s=sync.instance_ttl_s, max_instances=sync.max_instances)
        self.turns = TurnLocks(client, hold_s=settings.chat.turn_hold_s, wait_s=settings.chat.turn_wait_s)
        # The API's bearer tokens and the tools' heartbeat chains (vcm.api.auth, vcm.tools.chains).
        self.tokens = AgentTokens(client)
        self.heartbeats = HeartbeatStore(client)
        # Write-behind: appends not yet in the store, tracked by the append script itself.
        self.backlog = SpoolBacklog(client)
        self._track_backlog = not writes_through(settings)
        self._models: dict[str, str] = {}  # agent -> model; immutable after creation
        self._counters: dict[str, TokenCounter] = {}
        self._latest_time = client.register_script(lua.LATEST_MESSAGE_TIME)
        self.timeline = Timeline(settings.context.time, self._latest_message_time)
        self._lock = threading.Lock()
        self._pressure = dumps(render.PRESSURE_TEXT)

    # --- agents -----------------------------------------------------------------------
    def counter(self, model: str) -> TokenCounter:
        with self._lock:
            if model not in self._counters:
                self._counters[model] = TokenCounter(model, self.settings.tokens)
            return self._counters[model]

    def create_agent(
        self,
        agent_id: str,
        *,
        model: str | None = None,
        system_prompt: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        incarnation: str = "",
    ) -> AgentInfo:
        """Create an agent (idempotent for the same configuration; a replay keeps the first
        ``incarnation``)."""
        creation = creation_of(self.settings, self.counter, agent_id, model, system_prompt, tools)
        raw = self._create(
            keys=[keys.key(agent_id, keys.META), keys.key(agent_id, keys.SYSTEM)],
            args=[
                keys.prefix(agent_id),
                creation.fingerprint,
                dumps(creation.config),
                creation.prompt,
                dumps(creation.tools),
                incarnation,
            ],
        )
        replayed = reply(raw)[1]
        self.redis.sadd(keys.AGENTS, agent_id)
        self._models[agent_id] = creation.info.model
        if not replayed:
            self.timeline.created(agent_id)  # nothing appended yet: no read on its first append
        return creation.info

    def _model(self, agent_id: str, token_sha256: str | None = None) -> str:
        model = self._models.get(agent_id)
        if model is None:
            info = self.agent(agent_id) if token_sha256 is None else self._agent_for_token(agent_id, token_sha256)
            model = self._models[agent_id] = info.model
        return model

    # --- messages -----------------------------------------------------------------------
    def append(
        self,
        agent_id: str,
        role: str,
        content: str,
        *,
        name: str | None = None,
        pinned: bool = False,
        tool_call_id: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        actor: str | None = None,
        token_sha256: str | None = None,
        created_at: float | None = None,
    ) -> AppendResult:
        """Count, admit and append one message; begins an eviction batch when crossing flush.

        ``created_at``: when the message was said, for history imported with its own times (its
        date marker, the summary's dates and recall's times follow it); default now. Messages
        stay in the order appended, whatever their times.

        ``actor`` and ``idempotency_key`` travel with the stored message so the cold path, which
        spools it, can write its audit row without the hot path paying for a store write.

        With ``token_sha256`` (the digest of the caller's agent token) the append happens only if
        that is still the agent's token, checked inside the same Lua call (UNAUTHORIZED otherwise):
        the HTTP API's auth costs no round trip of its own."""
        validation.agent_id(agent_id)
        content, tool_calls, tool_call_id, meta = validation.message(
            role, content, self.settings.budget.max_content_chars, author=name, pinned=pinned, meta=metadata,
            call_id=tool_call_id, calls=tool_calls,
        )  # fmt: skip
        validation.idempotency_key(idempotency_key)
        now = self.clock()
        said = validation.created_at(created_at, now)
        counter = self.counter(self._model(agent_id, token_sha256))
        at = now if said is None else said
        # When it was said (vcm.hotpath.timeline), counted with it: the prompt shows both. Tool
        # results and text-less tool calls carry none (the next message with text does).
        dated = role != "tool" and bool(content)
        mark = self.timeline.marker(agent_id, at) if dated else ""
        tokens = counter.message(marked(mark, content), name=name, tool_calls=tool_calls)
        body: dict[str, Any] = {"role": role, "content": content, "tokens": tokens, "pinned": pinned}
        if name:
            body["name"] = name
        if tool_call_id:
            body["tool_call_id"] = tool_call_id
        if tool_calls:
            body["tool_calls"] = list(tool_calls)
        if meta:
            body["metadata"] = meta
        # Only keyed calls can be replayed, so only they pay for a fingerprint; it holds the count
        # without the marker, so a retry on another day is the same write.
        fp = ""
        if said is not None:  # a dated write: a retry must give the same time
            body["created_at"] = round(said, 6)
        if idempotency_key:
            plain = counter.message(content, name=name, tool_calls=tool_calls) if mark else tokens
            fp = fingerprint({"op": "append", **body, "tokens": plain})
        body["created_at"] = round(at, 6)
        if said is not None:
            body["appended_at"] = round(now, 6)
        body["kind"] = "message"
        if mark:
            body["marker"] = mark
        # After the fingerprint: the same keyed write from another caller is still a replay.
        if actor:
            body["actor"] = actor
        if idempotency_key:
            body["idempotency_key"] = idempotency_key
        script_keys = [
            keys.key(agent_id, keys.META),
            keys.key(agent_id, keys.FIFO),
            keys.key(agent_id, keys.MESSAGES),
            keys.key(agent_id, keys.BATCHES),
            keys.key(agent_id, keys.PLACEHOLDERS),
            keys.idempotency(agent_id, idempotency_key or ""),
            keys.key(agent_id, keys.UNSPOOLED),
        ]
        args: list[Any] = [
            keys.prefix(agent_id),
            idempotency_key or "",
            fp,
            self.settings.idempotency_ttl_s,
            dumps(body),
            tokens,
            "1" if pinned else "0",
            self._pressure,
            num(now),
            "1" if self._track_backlog else "0",
        ]
        if token_sha256 is None:
            raw = self._append(keys=script_keys, args=args)
        else:  # lua.TOKEN_GUARD: the token's key and digest go last
            raw = self._append_as_agent(keys=[*script_keys, keys.key(agent_id, keys.TOKEN)], args=[*args, token_sha256])
        data, replayed = reply(raw)
        extra = json.loads(raw[2]) if len(raw) > 2 else {}
        backlog = extra.get("backlog")
        if dated and not replayed:
            self.timeline.appended(agent_id, at, dated=said is not None)
        stored = None if replayed else Message.from_json({**body, "id": data["message_id"], "seq": data["seq"]})
        return AppendResult(
            message=stored,
            message_id=data["message_id"],
            seq=int(data["seq"]),
            tokens=int(data["tokens"]),
            total=int(data["total"]),
            action=data["action"],
            batch=BatchInfo.from_json(data.get("batch")),
            pressure_message_id=data.get("pressure_message_id"),
            target_unreachable=bool(data.get("target_unreachable")),
            replayed=replayed,
            gauges=Gauges(*(int(v) for v in data["gauges"])) if "gauges" in data else None,
            backlog=None if backlog is None else Backlog(int(backlog[0]), float(backlog[1])),
            incarnation=str(extra["incarnation"]) if "incarnation" in extra else None,
            # The record as Redis keeps it (fingerprint, result): the store's copy needs no read.
            record=(fp, as_str(raw[1])) if idempotency_key and not replayed else None,
        )

    # --- eviction batches -----------------------------------------------------------------
    def summary_tokens(self, agent_id: str, text: str) -> int:
        return self.counter(self._model(agent_id)).message(render.summary(text))

    def finish_eviction(
        self, agent_id: str, batch_id: int, summary_text: str, *, incarnation: str | None = None
    ) -> FinishResult:
        """Step 3: install the committed summary, drop the batch, and take its messages off the
        placeholder the pending batches share (gone when it was the last).

        Idempotent by batch id; batches must finish in order (``CONFLICT`` otherwise); with the
        ``incarnation`` the job began with, a re-created agent answers ``NOT_FOUND``.
        """
        validation.agent_id(agent_id)
        if not isinstance(batch_id, int) or batch_id < 1:
            raise ValidationError("batch_id must be a positive integer", field="batch_id")
        summary_text = validation.text(
            summary_text, "summary", self.settings.budget.max_content_chars, allow_empty=True
        )
        tokens = self.summary_tokens(agent_id, summary_text)
        fence = [] if incarnation is None else [incarnation]  # absent: finish without the check
        raw = self._finish(
            keys=[
                keys.key(agent_id, keys.META),
                keys.key(agent_id, keys.FIFO),
                keys.key(agent_id, keys.MESSAGES),
                keys.key(agent_id, keys.BATCHES),
                keys.key(agent_id, keys.PLACEHOLDERS),
                keys.key(agent_id, keys.SUMMARY),
                keys.evicting(agent_id, batch_id),
                keys.key(agent_id, keys.UNSPOOLED),
            ],
            args=[keys.prefix(agent_id), batch_id, summary_text, tokens, self._pressure, num(self.clock()), *fence],
        )
        return _finished(*reply(raw))

    def replace_summary(self, agent_id: str, batch_id: int, summary_text: str) -> FinishResult:
        """Replace the summary the hot state holds, while it is still ``batch_id``'s (CONFLICT
        otherwise), deciding on the counters after as an installed summary does."""
        validation.agent_id(agent_id)
        summary_text = validation.text(
            summary_text, "summary", self.settings.budget.max_content_chars, allow_empty=True
        )
        tokens = self.summary_tokens(agent_id, summary_text)
        raw = self._replace_summary(
            keys=[keys.key(agent_id, k) for k in (keys.META, keys.FIFO, keys.MESSAGES, keys.BATCHES)]
            + [keys.key(agent_id, keys.PLACEHOLDERS), keys.key(agent_id, keys.SUMMARY)],
            args=[keys.prefix(agent_id), int(batch_id), summary_text, tokens, self._pressure, num(self.clock())],
        )
        return _finished(*reply(raw))

    def evict_oldest(
        self, agent_id: str, count: int, *, idempotency_key: str | None = None
    ) -> tuple[int, BatchInfo | None]:
        """Begin a batch of the oldest ``count`` unpinned messages now (the ``evict_fifo`` tool).

        More of the oldest are taken when ``count`` messages would free no more tokens than the
        placeholder grows by, so an eviction always lowers the total; ``TokenBudgetExceeded``
        when all unpinned messages together cannot pay for it (see
        ``vcm.hotpath.budget.decide_requested_eviction``).
        Returns the new total and the batch (None when nothing was evictable).
        """
        validation.agent_id(agent_id)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 100_000:
            raise ValidationError("count must be an integer from 1 to 100000", field="count")
        validation.idempotency_key(idempotency_key)
        fp = fingerprint({"op": "evict", "count": count}) if idempotency_key else ""
        raw = self._evict(
            keys=[
                keys.key(agent_id, keys.META),
                keys.key(agent_id, keys.FIFO),
                keys.key(agent_id, keys.MESSAGES),
                keys.key(agent_id, keys.BATCHES),
                keys.key(agent_id, keys.PLACEHOLDERS),
                keys.idempotency(agent_id, idempotency_key or ""),
            ],
            args=[keys.prefix(agent_id), idempotency_key or "", fp, self.settings.idempotency_ttl_s, count],
        )
        data, _ = reply(raw)
        return int(data["total"]), BatchInfo.from_json(data.get("batch"))

    def forget_message(self, agent_id: str, message_id: str) -> dict[str, Any]:
        """Take one message out of the main context, with its tokens (:data:`lua.FORGET_MESSAGE`):
        ``{"removed", "tokens", "pinned", "total"}``, removed false when the context does not hold
        it; CONFLICT when it is in a pending eviction batch."""
        validation.agent_id(agent_id)
        raw = self._forget_message(
            keys=[keys.key(agent_id, k) for k in (keys.META, keys.FIFO, keys.MESSAGES, keys.BATCHES)],
            args=[keys.prefix(agent_id), message_id],
        )
        data, _ = reply(raw)
        return dict(data)

    def reserve_message_id(self, agent_id: str) -> tuple[str, int]:
        """An id in the agent's message sequence for a message that skips the FIFO (write_recall)."""
        self.agent(agent_id)
        seq = int(self.redis.hincrby(keys.key(agent_id, keys.META), "msg_seq", 1))
        return keys.message_id(seq), seq

    # --- rebuild and removal (vcm.durable) ------------------------------------------------------
    def restore(
        self,
        agent_id: str,
        image: AgentImage,
        *,
        model: str | None = None,
        system_prompt: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> FinishResult | None:
        """Re-create a missing agent with its FIFO, blocks, summary and counters in one Lua call
        (:data:`vcm.hotpath.lua.RESTORE_AGENT`): nothing can append in between and reuse an id.
        Returns None when the agent exists already (another process rebuilt it first), else
        what the budget decided on the restored counters (a FIFO over the flush line begins a
        batch, as after a summary install).

        The sequences start at ``image.id_floor``: ids below it may have been handed out before
        the hot state was lost. No batch is pending after a rebuild: messages of a batch that had
        begun but not committed are back in the FIFO."""
        creation = creation_of(self.settings, self.counter, agent_id, model, system_prompt, tools)
        fifo, blocks, meta, summary = restored_counters(creation, image, self.clock())
        raw = self._restore(
            keys=[
                keys.key(agent_id, keys.META),
                keys.key(agent_id, keys.SYSTEM),
                keys.key(agent_id, keys.FIFO),
                keys.key(agent_id, keys.MESSAGES),
                keys.key(agent_id, keys.BLOCKS),
                keys.key(agent_id, keys.SUMMARY),
                keys.key(agent_id, keys.TOKEN),
                keys.key(agent_id, keys.BATCHES),
                keys.key(agent_id, keys.PLACEHOLDERS),
            ],
            args=[
                keys.prefix(agent_id),
                dumps(meta),
                creation.prompt,
                dumps(creation.tools),
                dumps([f"{m.tokens}:{int(m.pinned)}:{m.id}" for m in fifo]),
                dumps([[m.id, dumps(m.as_json())] for m in fifo]),
                dumps([[b.id, dumps(b.as_json())] for b in blocks]),
                dumps(summary),
                image.token_sha256 or "",
                self._pressure,
                num(self.clock()),
            ],
        )
        data, replayed = reply(raw)
        self.redis.sadd(keys.AGENTS, agent_id)
        self._models[agent_id] = creation.info.model
        self.timeline.forget(agent_id)  # a restored FIFO: its newest message is read again
        if replayed:
            return None
        return FinishResult(
            batch_id=0,
            summary_rev=image.summary_batch,
            total=int(data["total"]),
            action=data.get("action", "ok"),
            batch=BatchInfo.from_json(data.get("batch")),
            pressure_message_id=data.get("pressure_message_id"),
            replayed=False,
        )

    def forget(self, agent_id: str, *, keep: Collection[str] = (), keep_prefixes: Collection[str] = ()) -> int:
        """Delete every Redis key of the agent (all share its hash tag, so one SCAN pattern finds
        them on a single node; on a cluster each master is scanned by redis-py) but those named in
        ``keep`` (key names of :mod:`vcm.hotpath.keys`) or starting with one of ``keep_prefixes``
        (``keys.JOB``: every ingestion job). Returns how many."""
        validation.agent_id(agent_id)
        pattern = keys.prefix(agent_id).replace("[", "\\[").replace("*", "\\*").replace("?", "\\?") + "*"
        kept = {keys.key(agent_id, name) for name in keep}
        spared = tuple(keys.key(agent_id, p) for p in keep_prefixes)
        doomed = [
            k
            for k in self.redis.scan_iter(match=pattern, count=1000)
            if k not in kept and not (spared and as_str(k).startswith(spared))
        ]
        removed = 0
        for i in range(0, len(doomed), 500):
            removed += int(self.redis.delete(*doomed[i : i + 500]))
        self.redis.srem(keys.AGENTS, agent_id)
        with self._lock:
            self._models.pop(agent_id, None)
        self.timeline.forget(agent_id)
        return removed

    def _latest_message_time(self, agent_id: str) -> float | None:
        """When the FIFO's newest message was appended (None: an empty FIFO); one round trip."""
        raw = as_str(self._latest_time(keys=[keys.key(agent_id, keys.FIFO), keys.key(agent_id, keys.MESSAGES)]))
        return float(raw) if raw else None


def _finished(data: Mapping[str, Any], replayed: bool) -> FinishResult:
    """A summary install's reply (FINISH_EVICTION, REPLACE_SUMMARY)."""
    return FinishResult(
        batch_id=int(data["batch_id"]),
        summary_rev=int(data["summary_rev"]),
        total=int(data["total"]),
        action=data.get("action", "ok"),
        batch=BatchInfo.from_json(data.get("batch")),
        pressure_message_id=data.get("pressure_message_id"),
        replayed=replayed,
    )
