"""A small agent loop: inference over the assembled context, tool calls through the executor,
heartbeats through the governor.

One turn: the user message is appended to the FIFO; then, per step, the assembled context and
the tool schemas go to the chat endpoint. An answer without tool calls ends the turn. Tool calls
are appended (the assistant message, then each tool result) so the context stays true, run
through :class:`~vcm.tools.executor.ToolExecutor`, and their ``request_heartbeat`` decides whether
inference runs again: one governor decision per step, however many calls the step made. The turn
ends when the governor ends the chain (depth, duration, tokens, rate), when the model stops
asking, or at ``max_steps`` (a safety net above the governor's depth). A chain still open when
the turn ends is closed (recorded as ``explicit_yield``: the agent side stopped asking), so no
chain leaks into the next turn.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from vcm import validation
from vcm.errors import ValidationError, VcmError
from vcm.facts.capture import TagFilter, shown
from vcm.llm import ChatClient, ChatError, Completion, ToolCall
from vcm.obs import audit
from vcm.service import MemoryService
from vcm.tools.chains import HeartbeatOutcome
from vcm.tools.executor import ToolExecutor
from vcm.tools.heartbeat import EndReason
from vcm.tools.results import ToolResult
from vcm.tools.schemas import tool_schemas

__all__ = ["AgentLoop", "ChatClient", "ChatError", "Claimed", "TurnResult", "wire_messages"]

log = logging.getLogger(__name__)

Stop = Literal["answer", "yield", "heartbeat_end", "max_steps"]
# The operation a keyed turn's idempotency record is kept under, and what the key of its user
# message adds to the turn's key.
CHAT_TURN = "chat_turn"
USER_KEY_SUFFIX = ":user"


@dataclass(frozen=True)
class TurnResult:
    final: str | None  # the model's last text without its memory tags (None when it only called tools)
    steps: int  # inference calls made
    stop: Stop  # why the turn ended
    heartbeat_end: EndReason | None  # how the heartbeat chain ended, if one ran
    depth: int  # heartbeats run in this turn
    tool_results: list[ToolResult] = field(default_factory=list)
    # Token usage the endpoint reported, summed over the turn's steps (keys as the endpoint sent).
    usage: dict[str, int] = field(default_factory=dict)
    replayed: bool = False  # the recorded result of an earlier turn under the same idempotency key

    def as_dict(self) -> dict[str, Any]:
        return {
            "final": self.final,
            "steps": self.steps,
            "stop": self.stop,
            "heartbeat_end": self.heartbeat_end,
            "depth": self.depth,
            "tool_results": [r.as_dict() for r in self.tool_results],
            "usage": dict(self.usage),
        }

    @classmethod
    def of(cls, d: Mapping[str, Any], *, replayed: bool) -> TurnResult:
        """The result :meth:`as_dict` wrote (a keyed turn's record read back)."""
        return cls(
            d["final"], int(d["steps"]), d["stop"], d["heartbeat_end"], int(d["depth"]),
            [ToolResult.of(r) for r in d["tool_results"]], {str(k): int(v) for k, v in d["usage"].items()}, replayed,
        )  # fmt: skip


@dataclass(frozen=True)
class Claimed:
    """A turn's claim of its idempotency key (:meth:`AgentLoop.claim`)."""

    key: str
    request: dict[str, Any]  # what a retry under the key must repeat
    replay: TurnResult | None  # the first turn's result: answer it, run nothing

    @property
    def user_key(self) -> str:
        """The key the turn's user message is appended under: a turn that failed after the append
        and is retried does not append the message twice."""
        return self.key + USER_KEY_SUFFIX


# What a streamed turn yields as it goes: {"type": "delta", "content": text} for each piece of
# the model's text (memory tags taken out), {"type": "tool_result", ...ToolResult.as_dict()} after each tool call ran.
TurnEvent = dict[str, Any]


class AgentLoop:
    def __init__(
        self,
        service: MemoryService,
        executor: ToolExecutor,
        client: ChatClient,
        *,
        model: str | None = None,
        max_steps: int | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        actor: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        """``model`` is the name sent to the endpoint (default: the agent's model). Create agents
        with ``tools=tool_schemas()`` so their budget counts the schemas this loop sends."""
        self.service = service
        self.executor = executor
        self.client = client
        self.model = model
        # The first step plus every heartbeat the governor can allow, plus one for the closing answer.
        self.max_steps = max_steps or service.settings.heartbeat.max_depth + 2
        self.tools = list(tools) if tools is not None else tool_schemas()
        self.actor = actor  # None: audited as agent:<id> (vcm.obs.audit)
        self.options = dict(options or {})

    def _actor(self, agent_id: str) -> str:
        return self.actor or audit.agent(agent_id)

    def claim(self, agent_id: str, user_message: str, *, name: str | None, idempotency_key: str) -> Claimed:
        """Claim ``idempotency_key`` for the turn ``user_message`` starts; call it holding the
        agent's turn (:meth:`MemoryService.turn`) and pass the claim to :meth:`turn`.

        A key whose turn finished answers that turn's result (``replay``): the model is not
        called and nothing is appended again. A key claimed by a turn that never finished (its
        process died, or it failed) is taken over: the caller holds the agent's turn, so that
        turn no longer runs, and the user message it appended is not appended again. The key
        used for another message or name is IDEMPOTENCY_MISMATCH."""
        key = validation.idempotency_key(idempotency_key)
        assert key is not None
        if len(key) + len(USER_KEY_SUFFIX) > validation.MAX_IDEMPOTENCY_KEY:
            limit = validation.MAX_IDEMPOTENCY_KEY - len(USER_KEY_SUFFIX)
            raise ValidationError(
                f"a chat turn's idempotency_key is at most {limit} characters (its user message is kept under "
                f"the key plus {USER_KEY_SUFFIX!r})",
                field="idempotency_key",
            )
        request = {"message": user_message, "name": name}
        first, replayed = self.service.claim(agent_id, key, CHAT_TURN, request, {"pending": True})
        replay = TurnResult.of(first["result"], replayed=True) if replayed and "result" in first else None
        return Claimed(key, request, replay)

    def run_turn(
        self,
        agent_id: str,
        user_message: str,
        *,
        name: str | None = None,
        user: str | None = None,
        claimed: Claimed | None = None,
    ) -> TurnResult:
        turn = self.turn(agent_id, user_message, name=name, user=user, stream=False, claimed=claimed)
        while True:
            try:
                next(turn)
            except StopIteration as done:
                result: TurnResult = done.value
                return result

    def turn(
        self,
        agent_id: str,
        user_message: str,
        *,
        name: str | None = None,
        user: str | None = None,
        stream: bool = True,
        claimed: Claimed | None = None,
    ) -> Generator[TurnEvent, None, TurnResult]:
        """One turn, yielding the model's text as it streams and each tool result; returns the
        turn's result. Every step's prompt is the built context (vcm.service.context): relevant
        memory for the user's message rides along without a tool call.

        ``claimed`` (:meth:`claim`): a replay returns the recorded result and yields nothing;
        otherwise the turn's result is recorded under the key when it ends, and a turn that fails
        with a coded error or the model's failure gives the key up for its retry."""
        if claimed is not None and claimed.replay is not None:
            return claimed.replay
        try:
            result = yield from self._turn(agent_id, user_message, name, user, stream, claimed)
        except (VcmError, ChatError):
            if claimed is not None:
                self._release(agent_id, claimed)
            raise
        if claimed is not None:
            self.service.settle(agent_id, claimed.key, CHAT_TURN, claimed.request, {"result": result.as_dict()})
        return result

    def _release(self, agent_id: str, claimed: Claimed) -> None:
        try:
            self.service.release(agent_id, claimed.key, CHAT_TURN, claimed.request)
        except Exception:  # Redis or the store away: the turn's own error is the answer, and
            # an unreleased claim is taken over by the retry anyway
            log.warning("could not release the chat turn key of %s", agent_id, exc_info=True)

    def _turn(
        self,
        agent_id: str,
        user_message: str,
        name: str | None,
        user: str | None,
        stream: bool,
        claimed: Claimed | None,
    ) -> Generator[TurnEvent, None, TurnResult]:
        model = self.model or self.service.agent(agent_id).model
        key = claimed.user_key if claimed is not None else None
        self.service.append(agent_id, "user", user_message, name=name, actor="user", idempotency_key=key)
        done: list[ToolResult] = []
        usage: dict[str, int] = {}
        steps, depth, chain_open = 0, 0, False
        final: str | None = None
        try:
            while steps < self.max_steps:
                context = self.service.build_context(agent_id, query=user_message, user=user or name)
                messages = wire_messages(context.messages)
                if stream:
                    completion = yield from self._streamed(model, messages)
                else:
                    completion = self.client.complete(model=model, messages=messages, tools=self.tools, **self.options)
                _add_usage(usage, completion)
                steps += 1
                # The reply as written goes to memory (its tags become facts and state); the
                # reader gets it without them.
                written = completion.content
                final = shown(written) if written is not None else None
                if not completion.tool_calls:
                    # Memory refuses an empty message: a reply that is only tags is not kept.
                    if written and final and final.strip():
                        self.service.append(agent_id, "assistant", self._storable(written), actor=self._actor(agent_id))
                    return self._end(agent_id, "answer", final, steps, depth, done, chain_open, usage)
                before = len(done)
                outcome = self._run_calls(agent_id, completion, done)
                for result in done[before:]:
                    yield {"type": "tool_result", **result.as_dict()}
                chain_open = outcome.run
                if not outcome.run:
                    stop: Stop = "heartbeat_end" if outcome.ended else "yield"
                    return TurnResult(final, steps, stop, outcome.ended, depth, done, usage)
                depth = outcome.depth
            return self._end(agent_id, "max_steps", final, steps, depth, done, chain_open, usage)
        except BaseException:
            if chain_open:  # an aborted turn must not leave its chain to the next one
                self.executor.govern(agent_id, False, actor=self._actor(agent_id))
            raise

    def _streamed(self, model: str, messages: list[dict[str, Any]]) -> Generator[TurnEvent, None, Completion]:
        chunks = self.client.stream(model=model, messages=messages, tools=self.tools, **self.options)
        tags = TagFilter()  # memory tags never reach the reader, even cut across pieces
        while True:
            try:
                chunk = next(chunks)
            except StopIteration as end:
                rest = tags.end()
                if rest:
                    yield {"type": "delta", "content": rest}
                completion: Completion = end.value
                return completion
            choices = chunk.get("choices") or []
            delta = choices[0].get("delta") if choices and isinstance(choices[0], Mapping) else None
            text = delta.get("content") if isinstance(delta, Mapping) else None
            if isinstance(text, str) and text:
                text = tags.feed(text)
                if text:
                    yield {"type": "delta", "content": text}

    def _run_calls(self, agent_id: str, completion: Completion, done: list[ToolResult]) -> HeartbeatOutcome:
        calls = completion.tool_calls
        self.service.append(
            agent_id,
            "assistant",
            self._storable(completion.content or ""),
            tool_calls=[c.wire() for c in calls],
            actor=self._actor(agent_id),
        )
        single = len(calls) == 1
        step: list[ToolResult] = []
        for call in calls:
            result = self._execute(agent_id, call, govern=single)
            self.service.append(
                agent_id, "tool", str(result.message["content"]), tool_call_id=call.id, actor=self._actor(agent_id)
            )
            step.append(result)
        done.extend(step)
        if single:
            return step[0].heartbeat
        return self.executor.govern(agent_id, any(r.heartbeat.requested for r in step), actor=self._actor(agent_id))

    def _storable(self, written: str) -> str:
        """The model's words as memory keeps them (the reader has them as written)."""
        return validation.storable(written, self.service.hot.settings.budget.max_content_chars)

    def _execute(self, agent_id: str, call: ToolCall, *, govern: bool) -> ToolResult:
        return self.executor.execute(
            agent_id, call.name, call.arguments, tool_call_id=call.id, actor=self._actor(agent_id), govern=govern
        )

    def _end(
        self,
        agent_id: str,
        stop: Stop,
        final: str | None,
        steps: int,
        depth: int,
        done: list[ToolResult],
        chain_open: bool,
        usage: dict[str, int],
    ) -> TurnResult:
        ended: EndReason | None = None
        if chain_open:
            ended = self.executor.govern(agent_id, False, actor=self._actor(agent_id)).ended
        return TurnResult(final, steps, stop, ended, depth, done, usage)


def _add_usage(total: dict[str, int], completion: Completion) -> None:
    usage = completion.raw.get("usage") if isinstance(completion.raw, Mapping) else None
    if isinstance(usage, Mapping):
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value


def wire_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The context as a chat-completions request must hold it. Pure.

    The FIFO is true to what happened, but eviction and vcm's own notices can break the pairing
    the API insists on (every tool message right after the assistant message that called it,
    every call answered): a memory-pressure notice may land between a call and its result, an
    eviction may take a call but leave its result. Notices are moved after the results, orphaned
    results become system notes, unanswered calls are dropped from their assistant message.
    """
    out: list[dict[str, Any]] = []
    deferred: list[dict[str, Any]] = []
    pending: set[str] = set()
    caller = -1  # index in `out` of the assistant message whose calls are pending

    def settle() -> None:
        nonlocal caller
        if pending and caller >= 0:
            msg = out[caller]
            kept = [c for c in msg.get("tool_calls", []) if c.get("id") not in pending]
            if kept:
                msg["tool_calls"] = kept
            else:
                msg.pop("tool_calls", None)
                if not str(msg.get("content") or "").strip():
                    msg["content"] = "[vcm] (tool calls whose results are no longer in context)"
        pending.clear()
        caller = -1
        out.extend(deferred)
        deferred.clear()

    for original in messages:
        m = dict(original)
        role = m.get("role")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id in pending:
                out.append(m)
                pending.discard(str(call_id))
                if not pending:
                    settle()
            else:
                note = {"role": "system", "content": f"[vcm] Result of an earlier tool call:\n{m.get('content', '')}"}
                (deferred if pending else out).append(note)
            continue
        if pending and role == "system":
            deferred.append(m)
            continue
        settle()
        out.append(m)
        calls = m.get("tool_calls")
        if role == "assistant" and calls:
            m["tool_calls"] = [dict(c) for c in calls]
            pending.update(str(c.get("id")) for c in calls)
            caller = len(out) - 1
    settle()
    return out
