"""The tool executor: runs the nine LLM tools (:mod:`vcm.tools.schemas`) against a MemoryService.

``execute`` never raises for anything the model or the memory can get wrong. Unknown tools, bad
JSON and schema violations (checked with the very schemas the model sees, plus semantic checks)
become a ``VALIDATION_ERROR`` payload and change no memory; coded runtime errors of the hot path
(``VcmError``) and the store (``VcmError``) become ``{"error": {...}}`` payloads the model can
read. Only programming errors and infrastructure failures (Redis down) propagate.

Every result carries token gauges (``context_total``, ``context_free``) and the heartbeat
outcome. Read results come in pages of at most 512 tokens (:mod:`vcm.tools.paging`); paging stops,
saying so, when the context has less than a page free. Any other output larger than a page, or
than the free context, is spooled into recall memory and replaced by a preview and the stored
ids. A failed call asks for a heartbeat whatever its arguments said, so the model can read the
error and correct itself; the governor still bounds the chain.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError
from jsonschema.exceptions import best_match

from vcm import validation
from vcm.errors import ValidationError, VcmError, from_payload
from vcm.hotpath.tokens import TokenCounter
from vcm.obs import audit
from vcm.service import MemoryService
from vcm.store.types import Page, StoredMessage
from vcm.tools import fact_tools, paging, results
from vcm.tools.chains import NOT_GOVERNED, ChainEnd, HeartbeatGovernor, HeartbeatOutcome
from vcm.tools.results import ToolResult
from vcm.tools.schemas import TOOL_NAMES, schema_of
from vcm.types import AgentInfo, BatchInfo, Gauges

# Tokens kept free around a page for the fields the executor adds (gauges, heartbeat, rehydration
# report) and the tool message's framing.
ENVELOPE_TOKENS = 96
_AUDITED_BY_THE_SERVICE = frozenset({"TOKEN_BUDGET_EXCEEDED", "PIN_LIMIT_EXCEEDED"})
# Below this many tokens of room (after the envelope) no result could fit: stop paging at once.
MIN_ROOM = 32
HEARTBEAT_FIELD_TOKENS = 48  # the heartbeat report added to every result (and record_heartbeat's own)
PREVIEW_TOKENS = 64  # of a spooled output
SPOOL_FLOOR = 160  # smaller outputs are never spooled: a preview would not save room
SPOOL_CHUNK_CHARS = 100_000  # per recall note; well under budget.max_content_chars
DEFAULT_LIMIT = 10


@dataclass(frozen=True)
class _Call:
    agent: AgentInfo
    args: dict[str, Any]
    actor: str
    counter: TokenCounter
    govern: bool


@dataclass
class _Reply:
    body: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # envelope fields, outside the page bound
    note: str | None = None  # recorded with the chain end this call's heartbeat decision makes
    # record_heartbeat reports the decision itself: its body is written once the governor decided.
    report: Callable[[HeartbeatOutcome, ChainEnd | None], dict[str, Any]] | None = None


class ToolExecutor:
    """Runs tool calls for agents. Thread-safe; one per process is enough."""

    def __init__(
        self,
        service: MemoryService,
        *,
        clock: Callable[[], float] = time.time,
        page_tokens: int = paging.PAGE_TOKENS,
        cursor_secret: bytes | None = None,
    ) -> None:
        self.service = service
        self.clock = clock
        self.page_tokens = page_tokens
        self.governor = HeartbeatGovernor(service.redis, service.settings.heartbeat, clock=clock)
        self._secret = cursor_secret
        self._validators = {name: Draft202012Validator(schema_of(name)) for name in TOOL_NAMES}
        self._handlers: dict[str, Callable[[_Call], _Reply]] = {
            "store_core": self._store_core,
            "fetch_core": self._fetch_core,
            "append_fifo": self._append_fifo,
            "evict_fifo": self._evict_fifo,
            "write_recall": self._write_recall,
            "search_recall": self._search_recall,
            "search_archival": self._search_archival,
            "ingest_archival": self._ingest_archival,
            "record_heartbeat": self._record_heartbeat,
            "remember_fact": lambda c: self._keyed(c, "remember_fact", fact_tools.remember),
            "recall_fact": lambda c: _Reply(fact_tools.recall(self.service, c.agent.agent_id, c.args)),
            "search_facts": lambda c: _Reply(fact_tools.search(self.service, c.agent.agent_id, c.args)),
            "forget_fact": lambda c: self._keyed(c, "forget_fact", fact_tools.forget),
            "get_state": lambda c: _Reply(fact_tools.get_state(self.service, c.agent.agent_id, c.args)),
            "set_state": lambda c: self._keyed(c, "set_state", fact_tools.set_state),
        }

    # --- entry points ---------------------------------------------------------------------------
    def execute(
        self,
        agent_id: str,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        tool_call_id: str | None = None,
        actor: str | None = None,
        govern: bool = True,
    ) -> ToolResult:
        """Run one tool call. ``govern=False`` leaves the heartbeat decision to the caller (an agent
        loop with several calls in one step governs the step once, with :meth:`govern`).

        ``actor`` names the caller (default ``agent:<id>``); the writes the tool does are audited
        as ``<actor>/tool:<name>`` (:mod:`vcm.obs.audit`)."""
        call_id = tool_call_id or "call_" + uuid.uuid4().hex[:24]
        caller = actor or audit.agent(agent_id)
        actor = audit.tool(caller, name) if name in self._handlers else caller
        try:
            info = self.service.agent(agent_id)
        except VcmError as exc:  # no agent: nothing to govern either
            counter = self.service.counter()
            return self._result(name, call_id, results.error_body(exc.to_dict()), NOT_GOVERNED, counter)
        counter = self.service.counter(info.model)
        requested = False
        try:
            args = self._arguments(name, arguments)
            requested = bool(args["request_heartbeat"])  # a failed call asks for one regardless (see above)
            reply = self._handlers[name](_Call(info, args, actor, counter, govern))
            gauges = self.service.gauges(agent_id)
            reply.body = self._fit(info, name, reply.body, gauges, counter, actor)
            payload = {**reply.body, **reply.extra}
        except VcmError as exc:
            requested = True
            reply = _Reply({})
            payload = results.error_body(exc.to_dict())
            gauges = self.service.gauges(agent_id)
            if exc.code not in _AUDITED_BY_THE_SERVICE:  # budget refusals have their row already
                self.service.record_event(
                    agent_id,
                    "error",
                    {"code": str(exc.code), "tool": name, "tool_call_id": call_id},
                    event_id=f"{agent_id}:error:tool:{call_id}",
                    actor=actor,
                )
        payload["context_total"] = gauges.total
        payload["context_free"] = gauges.free
        if not govern:
            return self._result(
                name, call_id, payload, HeartbeatOutcome(requested, False, 0, None, governed=False), counter
            )
        # Free room once this result is in the context: the next inference needs it. The allowance
        # covers the heartbeat field and a report record_heartbeat has yet to write.
        pending = counter.message(paging.dumps(payload)) + HEARTBEAT_FIELD_TOKENS
        outcome, end = self._govern(agent_id, requested, gauges.free - pending, actor, reply.note)
        if reply.report is not None:
            payload = {**reply.report(outcome, end), **payload}
        return self._result(name, call_id, payload, outcome, counter)

    def govern(self, agent_id: str, requested: bool, *, actor: str | None = None) -> HeartbeatOutcome:
        """Decide one heartbeat request for an agent (records the chain end, if any)."""
        caller = actor or audit.agent(agent_id)
        return self._govern(agent_id, requested, self.service.gauges(agent_id).free, caller)[0]

    def _govern(
        self, agent_id: str, requested: bool, free_tokens: int, actor: str, note: str | None = None
    ) -> tuple[HeartbeatOutcome, ChainEnd | None]:
        outcome, end = self.governor.decide(agent_id, requested=requested, free_tokens=free_tokens)
        if outcome.run and outcome.depth == 1 and outcome.chain_id:  # a chain begins (seed 000's hb_start)
            self.service.record_event(
                agent_id,
                "hb_start",
                {"chain_id": outcome.chain_id, "free_tokens": free_tokens},
                event_id=f"{agent_id}:hb_start:{outcome.chain_id}",
                actor=actor,
            )
        if end is not None:
            payload = end.payload() | ({"note": note} if note else {})
            event_id = (
                f"{agent_id}:heartbeat_end:{end.chain_id}"
                if end.chain_id
                else f"{agent_id}:heartbeat_refused:{uuid.uuid4().hex}"
            )
            self.service.record_event(agent_id, "heartbeat_end", payload, event_id=event_id, actor=actor)
        return outcome, end

    def _result(
        self,
        name: str,
        call_id: str,
        payload: dict[str, Any],
        outcome: HeartbeatOutcome,
        counter: TokenCounter,
    ) -> ToolResult:
        if outcome.governed:
            payload["heartbeat"] = outcome.as_dict()
        content = paging.dumps(payload)
        tokens = counter.message(content)
        message = {"role": "tool", "tool_call_id": call_id, "content": content}
        return ToolResult(name, "error" not in payload, payload, message, tokens, outcome)

    # --- arguments ------------------------------------------------------------------------------
    def _arguments(self, name: str, arguments: Mapping[str, Any] | str) -> dict[str, Any]:
        if name not in self._validators:
            raise ValidationError(
                f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}", field="name", tool=name
            )
        args: Any
        if isinstance(arguments, str):
            try:
                args = json.loads(arguments.strip() or "{}")
            except ValueError as exc:
                raise ValidationError(f"arguments are not valid JSON: {exc}", field="arguments") from None
        elif isinstance(arguments, Mapping):
            args = dict(arguments)
        else:
            raise ValidationError("arguments must be a JSON object", field="arguments")
        if not isinstance(args, dict):
            raise ValidationError("arguments must be a JSON object", field="arguments")
        error = best_match(self._validators[name].iter_errors(args))
        if error is not None:
            where = _field_of(error, args)
            raise ValidationError(f"{where}: {error.message}", field=where, tool=name)
        _check_finite(args, "arguments")
        return args

    # --- working blocks ---------------------------------------------------------------------------
    def _store_core(self, call: _Call) -> _Reply:
        a, agent = call.args, call.agent.agent_id
        block_id, key, rev = a["block_id"], a["idempotency_key"], a.get("_rev")
        if a.get("delete"):
            if rev is None:
                raise ValidationError("deleting a block needs its _rev (from fetch_core)", field="_rev")
            if "content" in a:
                raise ValidationError("delete takes no content; send either delete or content", field="content")
            res = self.service.delete_block(agent, block_id, rev, idempotency_key=key, actor=call.actor)
            return _Reply(_replayed({"block_id": block_id, "deleted": True, "_rev": None}, res.replayed))
        content = a.get("content")
        if content is None:
            raise ValidationError("content is required to create or edit a block", field="content")
        justification = str(a.get("justification", "")).strip()
        if results.VCM_MARK in content and not justification:
            raise ValidationError(
                f"this content carries text vcm wrote into your context ({results.VCM_MARK} ...); say why it "
                "belongs in a working block with justification, or write it in your own words",
                field="justification",
            )
        role, pinned = a.get("role"), a.get("pinned")
        if rev is not None and (role is None or pinned is None):
            current = self.service.get_block(agent, block_id)  # an edit keeps what it does not change
            role = current.role if role is None else role
            pinned = current.pinned if pinned is None else pinned
        res = self.service.put_block(
            agent,
            block_id,
            content,
            role=role or "working",
            pinned=bool(pinned),
            expected_rev=rev,
            metadata={"justification": justification} if justification else None,
            idempotency_key=key,
            actor=call.actor,
            justification=justification or None,
        )
        body = {"block_id": res.block_id, "_rev": res.rev, "tokens": res.tokens, "action": res.action}
        return _Reply(_replayed(body | _batch(res.batch), res.replayed))

    def _fetch_core(self, call: _Call) -> _Reply:
        agent, block_id = call.agent.agent_id, call.args.get("block_id")
        budget = self._page_budget(agent)
        cursor = call.args.get("cursor")
        if isinstance(budget, dict):
            return _Reply(budget | {"next_cursor": cursor})
        bound = paging.scope(agent, "core", block_id)
        if block_id is not None:
            blocks = [self.service.get_block(agent, validation.block_id(block_id))]
        else:
            after = self._position(cursor, bound).store_cursor if cursor else None
            blocks = [b for b in self.service.list_blocks(agent) if after is None or b.id > after]
        # Keyset paging by block id: blocks created meanwhile sort in or out, never repeat.
        afters = [paging.Position(b.id) for b in blocks[:-1]] + [None]
        return _Reply(self._page("core", [results.block_item(b) for b in blocks], afters, None, budget, bound, call))

    # --- conversation -------------------------------------------------------------------------------
    def _append_fifo(self, call: _Call) -> _Reply:
        a = call.args
        if a["role"] == "tool":
            raise ValidationError(
                "role tool is reserved for tool results, which answer a tool call; use assistant or system",
                field="role",
            )
        res = self.service.append(
            call.agent.agent_id,
            a["role"],
            a["content"],
            pinned=bool(a.get("pinned", False)),
            idempotency_key=a["idempotency_key"],
            actor=call.actor,
        )
        body = {"message_id": res.message_id, "tokens": res.tokens, "action": res.action}
        if res.pressure_message_id:
            body["memory_pressure"] = True
        return _Reply(_replayed(body | _batch(res.batch), res.replayed))

    def _evict_fifo(self, call: _Call) -> _Reply:
        a = call.args
        _, batch = self.service.evict(
            call.agent.agent_id, a["count"], idempotency_key=a["idempotency_key"], actor=call.actor
        )
        if batch is None:
            return _Reply({"evicted": 0, "note": "nothing to evict: the queue holds only pinned or no messages"})
        return _Reply({"evicted": batch.count, "batch_id": batch.id, "tokens_freed": batch.tokens})

    def _keyed(self, call: _Call, name: str, run: Callable[..., dict[str, Any]]) -> _Reply:
        """A structured-memory write under its idempotency key: a retry answers as the first call
        did (its body is kept with the key) and changes nothing."""
        a = call.args
        request = {k: v for k, v in a.items() if k not in ("idempotency_key", "request_heartbeat")}
        agent_id = call.agent.agent_id
        first, replayed = self.service.claim(agent_id, a["idempotency_key"], name, request, {"pending": True})
        if replayed and "body" in first:
            return _Reply(_replayed(dict(first["body"]), True))
        body = run(self.service, call.agent.agent_id, a, call.actor)
        self.service.settle(call.agent.agent_id, a["idempotency_key"], name, request, {"body": body})
        return _Reply(body)

    def _write_recall(self, call: _Call) -> _Reply:
        a = call.args
        msg = self.service.write_recall(
            call.agent.agent_id,
            a["content"],
            role=a.get("role", "assistant"),
            idempotency_key=a["idempotency_key"],
            actor=call.actor,
        )
        return _Reply({"message_id": msg.message_id, "tokens": msg.tokens, "stored_in": "recall"})

    # --- searches -------------------------------------------------------------------------------------
    def _search_recall(self, call: _Call) -> _Reply:
        a, agent = call.args, call.agent.agent_id
        since, until = a.get("since"), a.get("until")
        if since is not None and until is not None and since >= until:
            raise ValidationError("since must be before until", field="since")
        budget = self._page_budget(agent)
        if isinstance(budget, dict):  # the cursor stays valid: repeat the call once there is room
            return _Reply(budget | {"next_cursor": a.get("cursor")})
        mode = a.get("mode", "hybrid")
        bound = paging.scope(agent, "recall", a["query"], mode, since, until)
        used: list[str] = []

        def fetch(cursor: str | None, n: int) -> Page[Any]:
            found = self.service.search_recall(
                agent, a["query"], limit=n, cursor=cursor, since=since, until=until, mode=mode
            )
            used.append(found.mode)
            return found.page

        start = self._position(a.get("cursor"), bound)
        cands = paging.walk(
            fetch,
            start,
            a.get("limit", DEFAULT_LIMIT),
            cost=lambda hit: call.counter.text(paging.dumps(results.recall_item(hit))),
            budget=budget,
        )
        rendered = [results.recall_item(c.item) | self._taint(c.item.message.content) for c in cands]
        extra_fields = {"mode": used[-1] if used else mode}
        body = self._page("recall", rendered, [c.after for c in cands], start, budget, bound, call, extra_fields)
        reply = _Reply(body)
        if a.get("rehydrate"):
            taken = [c.item.message for c in cands[: len(body["results"])]]
            reply.extra = self._rehydrate(call, taken)
        return reply

    def _rehydrate(self, call: _Call, messages: list[StoredMessage]) -> dict[str, Any]:
        """Append found messages to the FIFO tail as recalled system messages (idempotent per message).

        Each append goes through the budget like any other: it may begin an eviction batch, or be
        refused with TOKEN_BUDGET_EXCEEDED (reported; earlier appends stay, and a retry skips them).
        """
        agent = call.agent.agent_id
        in_context = set(self.service.fifo_ids(agent))
        appended: list[str] = []
        skipped: list[str] = []
        tainted: list[str] = []
        for m in messages:
            if m.message_id in in_context:
                skipped.append(m.message_id)
                continue
            verdict = self.service.scan(m.content)
            meta: dict[str, Any] = {"kind": "rehydrated", "recalled_id": m.message_id}
            if verdict.tainted:
                meta["taint_reasons"] = list(verdict.reasons)
                tainted.append(m.message_id)
            try:
                self.service.append(
                    agent,
                    "system",
                    results.recalled_text(m.message_id, m.role, m.created_at, m.content, tainted=verdict.tainted),
                    metadata=meta,
                    idempotency_key=f"rehydrate:{m.message_id}",
                    actor=call.actor,
                )
            except VcmError as exc:
                out = {"rehydrated": appended, "already_in_context": skipped, "rehydrate_error": exc.to_dict()}
                return out | ({"tainted": tainted} if tainted else {})
            appended.append(m.message_id)
        return {"rehydrated": appended, "already_in_context": skipped} | ({"tainted": tainted} if tainted else {})

    def _search_archival(self, call: _Call) -> _Reply:
        a, agent = call.args, call.agent.agent_id
        filters = a.get("filters")
        budget = self._page_budget(agent)
        if isinstance(budget, dict):
            return _Reply(budget | {"next_cursor": a.get("cursor")})
        bound = paging.scope(agent, "archival", a["query"], filters)

        def fetch(cursor: str | None, n: int) -> Page[Any]:
            return self.service.search_archival(agent, a["query"], k=n, filters=filters, cursor=cursor).page

        start = self._position(a.get("cursor"), bound)
        cands = paging.walk(
            fetch,
            start,
            a.get("k", DEFAULT_LIMIT),
            cost=lambda hit: call.counter.text(paging.dumps(results.archival_item(hit))),
            budget=budget,
        )
        rendered = [results.archival_item(c.item) | self._taint(c.item.chunk.text) for c in cands]
        return _Reply(self._page("archival", rendered, [c.after for c in cands], start, budget, bound, call))

    def _taint(self, text: str) -> dict[str, Any]:
        """``tainted``/``taint_reasons`` for retrieved text that reads like instructions; the
        model sees the mark next to the text, and store_core refuses it without a justification."""
        return self.service.mark(text)

    # --- paging helpers -------------------------------------------------------------------------------
    def _page_budget(self, agent_id: str) -> int | dict[str, Any]:
        """Tokens a page may take now (a page, or what is free when that is less), or the
        stop-paging reply when not even a small result would fit."""
        free = self.service.gauges(agent_id).free
        room = min(self.page_tokens, free - ENVELOPE_TOKENS)
        if room < MIN_ROOM:
            return self._no_room(free)
        return room

    def _no_room(self, free: int) -> dict[str, Any]:
        return {
            "results": [],
            "stopped": "context_full",
            "free_tokens": free,
            "page_tokens": self.page_tokens,
            "note": f"only {free} tokens of your context are free, too few for this result; free room first "
            "(evict_fifo, or save and drop working blocks), then repeat the call",
        }

    def _position(self, cursor: str | None, bound: bytes) -> paging.Position:
        if cursor is None:
            return paging.START
        return paging.decode_cursor(cursor, secret=self._cursor_secret(), bound_to=bound)

    def _page(
        self,
        kind: str,
        rendered: list[dict[str, Any]],
        afters: list[paging.Position | None],
        start: paging.Position | None,
        budget: int,
        bound: bytes,
        call: _Call,
        fields: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        secret = self._cursor_secret()
        text_field = results.TEXT_FIELD[kind]
        key = "blocks" if kind == "core" else "results"

        def body(items: list[dict[str, Any]], nxt: paging.Position | None, tokens: int) -> dict[str, Any]:
            cursor = None if nxt is None else paging.encode_cursor(nxt, secret=secret, bound_to=bound)
            return {key: items, "next_cursor": cursor, **(fields or {}), "page_tokens": tokens}

        def measure(items: list[dict[str, Any]], nxt: paging.Position | None) -> int:
            return call.counter.text(paging.dumps(body(items, nxt, 999)))  # 999: as wide as any real count

        def shrink(item: dict[str, Any], excess: int) -> dict[str, Any]:
            text = str(item[text_field])
            return item | {
                text_field: paging.truncate(text, excess, call.counter),
                "truncated": True,
                "full_tokens": call.counter.text(text),
            }

        tight = budget < self.page_tokens - ENVELOPE_TOKENS  # i.e. less than a page is free
        try:
            packed = paging.pack(rendered, afters, start=start, budget=budget, measure=measure, shrink=shrink)
        except ValueError:  # not even a truncated item fits the room left (only when less than a page is)
            packed = None
        if packed is None or (tight and packed.items and packed.items[0].get("truncated")):
            # Less than a page is free and the next item does not fit it whole: refuse, rather than
            # hand back a stub the context has no room to follow up on. Same cursor: repeat later.
            free = self.service.gauges(call.agent.agent_id).free
            return self._no_room(free) | {"next_cursor": call.args.get("cursor")}
        return body(packed.items, packed.next, packed.tokens)

    def _cursor_secret(self) -> bytes:
        return self._secret if self._secret is not None else self.service.cursor_secret()

    # --- archival ingest ----------------------------------------------------------------------------
    def _ingest_archival(self, call: _Call) -> _Reply:
        """Queues the document and returns its job; the document is searchable once the job is
        done. The same key and document replay the first job; another document under the key is
        IDEMPOTENCY_MISMATCH (both kept by the service, as for every entry point)."""
        a, agent = call.args, call.agent.agent_id
        job = self.service.ingest_archival(
            agent,
            a["text"],
            doc_id=a.get("doc_id"),
            source=a.get("source", ""),
            metadata=a.get("metadata"),
            actor=call.actor,
            idempotency_key=a["idempotency_key"],
        )
        # Compact for the model: the job's identity and progress, and the result's counts flattened
        # in when done.
        body: dict[str, Any] = {"job_id": job.job_id, "doc_id": job.doc_id, "status": job.status}
        if job.status == "done":
            body |= {k: v for k, v in (job.result or {}).items() if k not in body}
        elif job.status == "failed":  # the job ran inline and failed: report it as this call's error
            raise from_payload(job.error or {"code": "INTERNAL_ERROR", "message": "ingestion failed"})
        else:
            body |= {"chunks_done": job.chunks_done, "chunks_total": job.chunks_total}
            body["note"] = "queued for the ingest workers; search_archival finds it once status is done"
        return _Reply(body)

    # --- heartbeat ------------------------------------------------------------------------------------
    def _record_heartbeat(self, call: _Call) -> _Reply:
        if not call.govern:  # the caller governs this step; report the chain as it stands
            state = self.governor.state(call.agent.agent_id)
            return _Reply({"chain_id": state.chain_id or None, "depth": state.depth, "recorded": False})

        def report(outcome: HeartbeatOutcome, end: ChainEnd | None) -> dict[str, Any]:
            body: dict[str, Any] = {"chain_id": outcome.chain_id, "depth": outcome.depth, "run": outcome.run}
            if end is not None:
                body["chain_end"] = end.payload()
            return body

        return _Reply({}, note=call.args.get("note"), report=report)

    # --- oversized outputs --------------------------------------------------------------------------------
    def _fit(
        self, info: AgentInfo, name: str, body: dict[str, Any], gauges: Gauges, counter: TokenCounter, actor: str
    ) -> dict[str, Any]:
        """``body`` itself, or, when it exceeds a page or the free context, a preview and the ids of
        the recall notes that now hold it in full."""
        text = paging.dumps(body)
        tokens = counter.text(text)
        room = min(self.page_tokens, gauges.free - ENVELOPE_TOKENS)
        if tokens <= max(room, SPOOL_FLOOR):
            return body
        replayed = body.get("replayed", False)
        text = paging.dumps({k: v for k, v in body.items() if k != "replayed"})  # a replay spools the same notes
        digest = hashlib.sha256(f"{info.agent_id}\n{name}\n{text}".encode()).hexdigest()[:32]
        ids = []
        for i in range(0, len(text), SPOOL_CHUNK_CHARS):
            note = self.service.write_recall(
                info.agent_id,
                text[i : i + SPOOL_CHUNK_CHARS],
                role="tool",
                idempotency_key=f"spool:{digest}:{i // SPOOL_CHUNK_CHARS}",
                actor=actor,
            )
            ids.append(note.message_id)
        stub = {
            "spooled": True,
            "message_ids": ids,
            "tokens": tokens,
            "preview": paging.preview(text, PREVIEW_TOKENS, counter),
            "note": f"the full output ({tokens} tokens) did not fit your context; it is stored in recall "
            "memory under message_ids (search_recall finds it)",
        }
        return _replayed(stub, replayed)


# --- small pure helpers -----------------------------------------------------------------------------------
def _field_of(error: SchemaError, args: Mapping[str, Any]) -> str:
    """The argument a schema error is about, as the model named it."""
    if error.validator == "required" and not error.absolute_path:
        missing = [p for p in error.validator_value if p not in args]
        return str(missing[0]) if missing else "arguments"
    if error.validator == "additionalProperties" and not error.absolute_path:
        known = set(error.schema.get("properties", {})) if isinstance(error.schema, Mapping) else set()
        extra = sorted(k for k in args if k not in known)
        return str(extra[0]) if extra else "arguments"
    return ".".join(str(p) for p in error.absolute_path) or "arguments"


def _check_finite(value: Any, where: str) -> None:
    """JSON allows NaN and Infinity as Python reads it; no tool argument means them."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"{where} must be a finite number", field=where)
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_finite(v, str(k) if where == "arguments" else f"{where}.{k}")
    elif isinstance(value, list):
        for v in value:
            _check_finite(v, where)


def _replayed(body: dict[str, Any], replayed: bool) -> dict[str, Any]:
    return body | {"replayed": True} if replayed else body


def _batch(batch: BatchInfo | None) -> dict[str, Any]:
    """An eviction the write began (the context crossed flush)."""
    if batch is None:
        return {}
    return {"evicted": {"batch_id": batch.id, "messages": batch.count, "tokens": batch.tokens}}
