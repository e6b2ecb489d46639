"""The tool executor: runs the nine LLM tools (:mod:`vcm.tools.schemas`) against a MemoryService.

``execute`` never raises for anything the model or the memory can get wrong. Unknown tools, bad
JSON and schema violations (checked with the very schemas the model sees, plus semantic checks)
become a ``VALIDATION_ERROR`` payload and change no memory; coded runtime errors of the hot path
(``VcmError``) and the store (``VcmError``) become ``{"error": {...}}`` payloads the model can
read. Only programming errors and infrastructure failures (Redis down) propagate.

Every result carries token gauges (``context_total``, ``context_free``) and the heartbeat
outcome. Read results come in pages of at most 512 tokens (:mod:`vcm.tools.paging`), smaller
when less is free. A result that fits the free room (all of it, gauges and heartbeat report
included) is served whole, never refused for room; one that does not, or any other output larger
than a page, is spooled into recall memory and replaced by a preview and the stored ids (seed
000). ``request_heartbeat`` may be left out (false), and seed 000's searches call it
``heartbeat``. A failed call asks for a heartbeat whatever its arguments said, so the model can read the
error and correct itself; the governor still bounds the chain.

The tools themselves live by kind: writes in :mod:`vcm.tools.write_handlers`, searches in
:mod:`vcm.tools.search_handlers`, paging and spooling in :mod:`vcm.tools.pager`, the call and
reply types in :mod:`vcm.tools.calls`; this module dispatches, checks arguments and governs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from vcm import jsontext, validation
from vcm.errors import ValidationError, VcmError
from vcm.hotpath.tokens import TokenCounter
from vcm.obs import audit
from vcm.service import MemoryService
from vcm.store.audit_names import EventKind, audit_id
from vcm.tools import fact_tools, paging, results
from vcm.tools.calls import (
    HEARTBEAT_FIELD_TOKENS,
    Reply,
    ToolCall,
    check_finite,
    field_of,
)
from vcm.tools.chains import NOT_GOVERNED, ChainEnd, HeartbeatGovernor, HeartbeatOutcome
from vcm.tools.results import ToolResult
from vcm.tools.schemas import TOOL_NAMES, schema_of
from vcm.tools.search_handlers import SearchHandlers
from vcm.tools.write_handlers import WriteHandlers
from vcm.types import AgentInfo

_AUDITED_BY_THE_SERVICE = frozenset({"TOKEN_BUDGET_EXCEEDED", "PIN_LIMIT_EXCEEDED"})


def _optional_heartbeat(schema: dict[str, Any]) -> dict[str, Any]:
    return schema | {"required": [r for r in schema.get("required", []) if r != "request_heartbeat"]}


class ToolExecutor(WriteHandlers, SearchHandlers):
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
        self.governor = HeartbeatGovernor(service.hot.heartbeats, service.settings.heartbeat, clock=clock)
        self._secret = cursor_secret
        # request_heartbeat is optional here (absent: false), as over MCP: a call written against
        # seed 000's signatures does not send it.
        self._validators = {name: Draft202012Validator(_optional_heartbeat(schema_of(name))) for name in TOOL_NAMES}
        self._handlers: dict[str, Callable[[ToolCall], Reply]] = {
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
            "recall_fact": lambda c: Reply(fact_tools.recall(self.service, c.agent.agent_id, c.args)),
            "search_facts": lambda c: Reply(fact_tools.search(self.service, c.agent.agent_id, c.args)),
            "forget_fact": lambda c: self._keyed(c, "forget_fact", fact_tools.forget),
            "get_state": lambda c: Reply(fact_tools.get_state(self.service, c.agent.agent_id, c.args)),
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
        idempotency_key: str | None = None,
    ) -> ToolResult:
        """Run one tool call. ``govern=False`` leaves the heartbeat decision to the caller (an agent
        loop with several calls in one step governs the step once, with :meth:`govern`).

        ``actor`` names the caller (default ``agent:<id>``); the writes the tool does are audited
        as ``<actor>/tool:<name>`` (:mod:`vcm.obs.audit`).

        ``idempotency_key`` is a key the caller's transport carries besides the arguments (the
        HTTP ``Idempotency-Key`` header): it becomes the call's ``idempotency_key`` argument when
        the tool takes one, and is ignored otherwise. It is the caller's, not the model's, so one
        that is malformed or disagrees with the arguments' raises VALIDATION_ERROR instead of
        becoming a result."""
        arguments = self._with_key(name, arguments, idempotency_key)
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
            # seed 000's searches name it heartbeat; a failed call asks for one regardless (see above)
            requested = bool(args.get("request_heartbeat") or args.get("heartbeat"))
            reply = self._handlers[name](ToolCall(info, args, actor, counter, govern))
            gauges = self.service.gauges(agent_id)
            reply.body = self._fit(info, name, reply.body, counter, actor)
            payload = {**reply.body, **reply.extra}
        except VcmError as exc:
            requested = True
            reply = Reply({})
            payload = results.error_body(exc.to_dict())
            gauges = self.service.gauges(agent_id)
            if exc.code not in _AUDITED_BY_THE_SERVICE:  # budget refusals have their row already
                self.service.record_event(
                    agent_id,
                    EventKind.ERROR,
                    {"code": str(exc.code), "tool": name, "tool_call_id": call_id},
                    event_id=audit_id(agent_id, "error", "tool", call_id),
                    actor=actor,
                )
        payload["context_total"] = gauges.total
        payload["context_free"] = gauges.free
        if not govern:
            outcome = HeartbeatOutcome(requested, False, 0, None, governed=False)
            payload = self._within_free(info, name, reply, payload, outcome, counter, actor)
            return self._result(name, call_id, payload, outcome, counter)
        # Free room once this result is in the context: the next inference needs it. The allowance
        # covers the heartbeat field and a report record_heartbeat has yet to write.
        pending = counter.message(paging.dumps(payload)) + HEARTBEAT_FIELD_TOKENS
        outcome, end = self._govern(agent_id, requested, gauges.free - pending, actor, reply.note)
        if reply.report is not None:
            payload = {**reply.report(outcome, end), **payload}
        payload = self._within_free(info, name, reply, payload, outcome, counter, actor)
        return self._result(name, call_id, payload, outcome, counter)

    def _within_free(
        self,
        info: AgentInfo,
        name: str,
        reply: Reply,
        payload: dict[str, Any],
        outcome: HeartbeatOutcome,
        counter: TokenCounter,
        actor: str,
    ) -> dict[str, Any]:
        """The payload when the whole result (heartbeat report included) fits the free room;
        otherwise its body spooled into recall, when that makes it smaller (seed 000)."""
        free = payload["context_free"]
        if "error" in payload or not reply.body or reply.body.get("spooled"):
            return payload

        def size(p: dict[str, Any]) -> int:
            return counter.message(paging.dumps(p | ({"heartbeat": outcome.as_dict()} if outcome.governed else {})))

        full = size(payload)
        if full <= free:
            return payload
        envelope = {k: v for k, v in payload.items() if k not in reply.body}
        spooled = {**self._spool(info, name, reply.body, counter, actor), **envelope}
        return spooled if size(spooled) < full else payload

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
                EventKind.HB_START,
                {"chain_id": outcome.chain_id, "free_tokens": free_tokens},
                event_id=audit_id(agent_id, "hb_start", outcome.chain_id),
                actor=actor,
            )
        if end is not None:
            payload = end.payload() | ({"note": note} if note else {})
            event_id = (
                f"{agent_id}:heartbeat_end:{end.chain_id}"
                if end.chain_id
                else f"{agent_id}:heartbeat_refused:{uuid.uuid4().hex}"
            )
            self.service.record_event(agent_id, EventKind.HEARTBEAT_END, payload, event_id=event_id, actor=actor)
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
    @staticmethod
    def _with_key(
        name: str, arguments: Mapping[str, Any] | str, idempotency_key: str | None
    ) -> Mapping[str, Any] | str:
        """The arguments with the caller's idempotency key in them, for a tool that takes one."""
        if idempotency_key is None or name not in TOOL_NAMES:
            return arguments
        if "idempotency_key" not in schema_of(name)["properties"]:
            return arguments
        if isinstance(arguments, str):
            try:
                parsed = jsontext.loads(arguments.strip() or "{}")
            except ValueError:
                return arguments  # the call reports the bad JSON as its result
            if not isinstance(parsed, dict):
                return arguments
            arguments = parsed
        if not isinstance(arguments, Mapping):
            return arguments
        merged = dict(arguments)
        merged["idempotency_key"] = validation.one_key(idempotency_key, merged.get("idempotency_key"))
        return merged

    def _arguments(self, name: str, arguments: Mapping[str, Any] | str) -> dict[str, Any]:
        if name not in self._validators:
            raise ValidationError(
                f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}", field="name", tool=name
            )
        args: Any
        if isinstance(arguments, str):
            try:
                args = jsontext.loads(arguments.strip() or "{}")
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
            where = field_of(error, args)
            raise ValidationError(f"{where}: {error.message}", field=where, tool=name)
        check_finite(args, "arguments")
        return args

    # --- heartbeat ------------------------------------------------------------------------------------
    def _record_heartbeat(self, call: ToolCall) -> Reply:
        """Seed 000's result: chain_depth, duration_ms and, once the chain ended,
        terminated_reason; vcm's chain_id, depth, run and chain_end beside them."""
        note = call.args.get("state", call.args.get("note"))
        agent = call.agent.agent_id
        if not call.govern:  # the caller governs this step; report the chain as it stands
            state = self.governor.state(agent)
            return Reply(
                {
                    "chain_id": state.chain_id or None,
                    "depth": state.depth,
                    "recorded": False,
                    "chain_depth": state.depth,
                    "duration_ms": self._chain_ms(state.started_at if state.chain_id else None),
                }
            )

        def report(outcome: HeartbeatOutcome, end: ChainEnd | None) -> dict[str, Any]:
            body: dict[str, Any] = {"chain_id": outcome.chain_id, "depth": outcome.depth, "run": outcome.run}
            body["chain_depth"] = outcome.depth
            if end is not None:
                body["chain_end"] = end.payload()
                body["duration_ms"] = round(end.duration_s * 1000)
                body["terminated_reason"] = end.reason
            else:
                state = self.governor.state(agent)
                body["duration_ms"] = self._chain_ms(state.started_at if state.chain_id else None)
            return body

        return Reply({}, note=note, report=report)

    def _chain_ms(self, started_at: float | None) -> int:
        return 0 if started_at is None else max(0, round((self.clock() - started_at) * 1000))
