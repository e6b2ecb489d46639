"""Per-agent hot state in Redis: every mutation is one Lua call (see :mod:`vcm.hotpath.lua`)."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from vcm import validation
from vcm.errors import (
    ConfigError,
    NotFound,
    TokenBudgetExceeded,
    Unauthorized,
    ValidationError,
    error_class,
)
from vcm.hotpath import keys, lua, render
from vcm.hotpath.budget import Budget
from vcm.hotpath.changes import ChangeFeed
from vcm.hotpath.instances import InstanceBoard
from vcm.hotpath.jobs import JobBoard
from vcm.hotpath.tokens import TokenCounter
from vcm.hotpath.turns import TurnLocks
from vcm.settings import Settings
from vcm.types import (
    AgentImage,
    AgentInfo,
    AppendResult,
    BatchInfo,
    Block,
    BlockResult,
    FinishResult,
    Gauges,
    Message,
)


def _fingerprint(payload: Mapping[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _num(value: float) -> str:
    return repr(round(value, 6))


def _text(value: bytes | str | None) -> str:
    """A reply of the client (made with ``decode_responses=True``) as ``str``; bytes only reach here
    from a client made without it, which the typing of redis-py cannot rule out."""
    if value is None:
        return ""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _entry_id(entry: bytes | str) -> str:
    """The message id of a FIFO entry (``<tokens>:<pinned>:<id>``, see :mod:`vcm.hotpath.keys`)."""
    return _text(entry).split(":", 2)[2]


def _require_token(stored: bytes | str | None, token_sha256: str) -> None:
    """UNAUTHORIZED unless ``stored`` (an agent's token digest as Redis keeps it) is ``token_sha256``."""
    if not hmac.compare_digest(_text(stored).encode(), token_sha256.encode()):
        raise Unauthorized("invalid bearer token")


def _reply(raw: Sequence[str]) -> tuple[dict[str, Any], bool]:
    status, body = raw[0], raw[1]
    data = json.loads(body)
    if status == "error":
        code = data.pop("code")
        message = data.pop("message")
        raise error_class(code)(message, **data)
    return data, status == "replayed"


@dataclass(frozen=True)
class Snapshot:
    """Everything needed to assemble one agent's main context, read atomically."""

    agent_id: str
    meta: dict[str, str]
    system_prompt: str
    tools: list[dict[str, Any]]
    fifo: list[Message]
    blocks: list[Block]
    summary_text: str
    summary_tokens: int
    # Per pending batch: (batch id, message count, tokens it added to the placeholder on begin).
    placeholders: list[tuple[int, int, int]]

    def counter(self, name: str) -> int:
        return int(self.meta.get(name, 0))

    @property
    def placeholder(self) -> tuple[int, int] | None:
        """The one placeholder the main context shows for all pending batches: (message count,
        tokens), or None when no batch is pending. The count is summed from the batches' own
        counts; the tokens are the stored ``ph`` counter, which the scripts keep equal to the
        cost of that one rendering."""
        if not self.placeholders:
            return None
        return sum(count for _, count, _ in self.placeholders), self.counter("ph")


@dataclass(frozen=True)
class _Creation:
    config: dict[str, Any]
    fingerprint: str
    prompt: str
    tools: list[dict[str, Any]]
    info: AgentInfo


class HotState:
    """The hot path's Redis state for all agents. Thread-safe; one per process is enough."""

    def __init__(self, client: redis.Redis, settings: Settings, *, clock: Callable[[], float] = time.time) -> None:
        self.redis = client
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
        # Archival ingestion jobs; a record outlives its last change as long as an idempotency key.
        self.jobs = JobBoard(client, settings.idempotency_ttl_s)
        # What client instances of an agent follow and report (vcm.replicas).
        sync = settings.sync
        self.changes = ChangeFeed(client, maxlen=sync.feed_maxlen, ttl_s=sync.feed_ttl_s, clock=clock)
        self.instances = InstanceBoard(client, ttl_s=sync.instance_ttl_s, max_instances=sync.max_instances)
        self.turns = TurnLocks(client, hold_s=settings.chat.turn_hold_s, wait_s=settings.chat.turn_wait_s)
        self._models: dict[str, str] = {}  # agent -> model; immutable after creation
        self._counters: dict[str, TokenCounter] = {}
        self._lock = threading.Lock()
        self._pressure = _json(render.PRESSURE_TEXT)

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
    ) -> AgentInfo:
        """Create an agent (idempotent for the same configuration)."""
        creation = self._creation(agent_id, model, system_prompt, tools)
        raw = self._create(
            keys=[keys.key(agent_id, keys.META), keys.key(agent_id, keys.SYSTEM)],
            args=[
                keys.prefix(agent_id),
                creation.fingerprint,
                _json(creation.config),
                creation.prompt,
                _json(creation.tools),
            ],
        )
        _reply(raw)
        self.redis.sadd(keys.AGENTS, agent_id)
        self._models[agent_id] = creation.info.model
        return creation.info

    def _creation(
        self, agent_id: str, model: str | None, system_prompt: str, tools: Sequence[Mapping[str, Any]]
    ) -> _Creation:
        """An agent's budget configuration, validated (shared by creation and rebuild)."""
        validation.agent_id(agent_id)
        model = model or self.settings.default_model
        try:
            window = self.settings.window_for(model)
        except ConfigError as exc:
            raise ValidationError(exc.message, field="model") from None
        prompt = validation.text(
            system_prompt, "system_prompt", self.settings.budget.max_content_chars, allow_empty=True
        )
        tool_list = [dict(t) for t in tools]
        counter = self.counter(model)
        system = counter.message(prompt) + counter.tools(tool_list) + counter.reply_priming
        budget = Budget.for_window(window, self.settings.budget)
        ph_base = counter.message(render.placeholder(0)) - 1
        fixed = system + budget.pinned_cap + budget.summary_cap + ph_base + 4
        if fixed > budget.max_tokens:
            raise TokenBudgetExceeded(
                f"the system prompt and tools take {system} tokens; with the pinned and summary "
                f"caps that leaves no room in a {window}-token window",
                required_headroom=fixed - budget.max_tokens,
                max_tokens=budget.max_tokens,
            )
        config = {
            "window": budget.window,
            "max": budget.max_tokens,
            "warn": budget.warning_at,
            "flush": budget.flush_at,
            "target": budget.target,
            "pin_cap": budget.pinned_cap,
            "sum_cap": budget.summary_cap,
            "ph_base": ph_base,
            "pressure_tokens": counter.message(render.PRESSURE_TEXT),
            "system": system,
            "model": model,
        }
        fp = _fingerprint({"config": config, "prompt": prompt, "tools": tool_list})
        info = AgentInfo(agent_id, model, budget.window, budget.max_tokens, system)
        return _Creation(config, fp, prompt, tool_list, info)

    def agent(self, agent_id: str) -> AgentInfo:
        validation.agent_id(agent_id)
        vals = self.redis.hmget(keys.key(agent_id, keys.META), ["model", "window", "max", "system"])
        if vals[0] is None:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        model, window, max_tokens, system = (_text(v) for v in vals)
        return AgentInfo(agent_id, model, int(window), int(max_tokens), int(system))

    def agents(self) -> list[str]:
        return sorted(_text(a) for a in self.redis.smembers(keys.AGENTS))

    def _model(self, agent_id: str, token_sha256: str | None = None) -> str:
        model = self._models.get(agent_id)
        if model is None:
            info = self.agent(agent_id) if token_sha256 is None else self._agent_for_token(agent_id, token_sha256)
            model = self._models[agent_id] = info.model
        return model

    def _agent_for_token(self, agent_id: str, token_sha256: str) -> AgentInfo:
        """The agent, read in the same round trip as its bearer token's digest, which must equal
        ``token_sha256``: UNAUTHORIZED comes first, so a caller without the agent's token cannot
        learn whether the agent exists."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(keys.key(agent_id, keys.TOKEN))
        pipe.hmget(keys.key(agent_id, keys.META), ["model", "window", "max", "system"])
        stored, vals = pipe.execute()
        _require_token(stored, token_sha256)
        if vals[0] is None:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        model, window, max_tokens, system = (_text(v) for v in vals)
        return AgentInfo(agent_id, model, int(window), int(max_tokens), int(system))

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
    ) -> AppendResult:
        """Count, admit and append one message; begins an eviction batch when crossing flush.

        ``actor`` and ``idempotency_key`` travel with the stored message so the cold path, which
        spools it, can write its audit row without the hot path paying for a store write.

        With ``token_sha256`` (the digest of the caller's agent token) the append happens only if
        that is still the agent's token, checked inside the same Lua call (UNAUTHORIZED otherwise):
        the HTTP API's auth costs no round trip of its own."""
        validation.agent_id(agent_id)
        validation.role(role)
        # An assistant message that only calls tools has no text; it still belongs in the context.
        content = validation.text(
            content, "content", self.settings.budget.max_content_chars, allow_empty=bool(tool_calls)
        )
        # The whole message is size-checked before its tokens are counted (counting is the cost).
        tool_calls = validation.tool_calls(tool_calls, self.settings.budget.max_content_chars - len(content))
        tool_call_id = validation.tool_call_id(role, tool_call_id)
        validation.name(name)
        validation.flag(pinned, "pinned")
        validation.idempotency_key(idempotency_key)
        meta = validation.metadata(metadata)
        counter = self.counter(self._model(agent_id, token_sha256))
        tokens = counter.message(content, name=name, tool_calls=tool_calls)
        body: dict[str, Any] = {"role": role, "content": content, "tokens": tokens, "pinned": pinned}
        if name:
            body["name"] = name
        if tool_call_id:
            body["tool_call_id"] = tool_call_id
        if tool_calls:
            body["tool_calls"] = list(tool_calls)
        if meta:
            body["metadata"] = meta
        # Only keyed calls can be replayed, so only they pay for a fingerprint.
        fp = _fingerprint({"op": "append", **body}) if idempotency_key else ""
        now = self.clock()
        body["created_at"] = round(now, 6)
        body["kind"] = "message"
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
        ]
        args: list[Any] = [
            keys.prefix(agent_id),
            idempotency_key or "",
            fp,
            self.settings.idempotency_ttl_s,
            _json(body),
            tokens,
            "1" if pinned else "0",
            self._pressure,
            _num(now),
        ]
        if token_sha256 is None:
            raw = self._append(keys=script_keys, args=args)
        else:  # lua.TOKEN_GUARD: the token's key and digest go last
            raw = self._append_as_agent(keys=[*script_keys, keys.key(agent_id, keys.TOKEN)], args=[*args, token_sha256])
        data, replayed = _reply(raw)
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
        )

    # --- working blocks -------------------------------------------------------------------
    def put_block(
        self,
        agent_id: str,
        block_id: str,
        content: str,
        *,
        role: str = "working",
        pinned: bool = False,
        expected_rev: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> BlockResult:
        """Create (``expected_rev=None``) or replace a block; every edit presents its ``_rev``."""
        validation.agent_id(agent_id)
        validation.block_id(block_id)
        content = validation.text(content, "content", self.settings.budget.max_content_chars)
        if not isinstance(role, str) or not validation.NAME.match(role):
            raise ValidationError("block role must be 1-64 of letters, digits, '_', '-'", field="role")
        validation.flag(pinned, "pinned")
        validation.idempotency_key(idempotency_key)
        if expected_rev is not None and (not isinstance(expected_rev, str) or not expected_rev):
            raise ValidationError("_rev must be a non-empty string", field="_rev")
        meta = validation.metadata(metadata)
        counter = self.counter(self._model(agent_id))
        tokens = counter.message(render.block(block_id, role, content, pinned))
        body: dict[str, Any] = {"role": role, "content": content, "tokens": tokens, "pinned": pinned}
        if meta:
            body["metadata"] = meta
        fp = _fingerprint({"op": "put_block", "block": block_id, "rev": expected_rev, **body})
        return self._block_call(
            agent_id, block_id, expected_rev or "", body, tokens, pinned, False, fp, idempotency_key
        )

    def delete_block(
        self, agent_id: str, block_id: str, expected_rev: str, *, idempotency_key: str | None = None
    ) -> BlockResult:
        validation.agent_id(agent_id)
        validation.block_id(block_id)
        validation.idempotency_key(idempotency_key)
        if not isinstance(expected_rev, str) or not expected_rev:
            raise ValidationError("deleting a block needs its _rev", field="_rev")
        fp = _fingerprint({"op": "delete_block", "block": block_id, "rev": expected_rev})
        return self._block_call(
            agent_id, block_id, expected_rev, {"deleted": True}, 0, False, True, fp, idempotency_key
        )

    def _block_call(
        self,
        agent_id: str,
        block_id: str,
        expected_rev: str,
        body: Mapping[str, Any],
        tokens: int,
        pinned: bool,
        delete: bool,
        fp: str,
        idempotency_key: str | None,
    ) -> BlockResult:
        now = self.clock()
        raw = self._put_block(
            keys=[
                keys.key(agent_id, keys.META),
                keys.key(agent_id, keys.BLOCKS),
                keys.key(agent_id, keys.FIFO),
                keys.key(agent_id, keys.MESSAGES),
                keys.key(agent_id, keys.BATCHES),
                keys.key(agent_id, keys.PLACEHOLDERS),
                keys.idempotency(agent_id, idempotency_key or ""),
            ],
            args=[
                keys.prefix(agent_id),
                idempotency_key or "",
                fp,
                self.settings.idempotency_ttl_s,
                block_id,
                expected_rev,
                _json(body),
                tokens,
                "1" if pinned else "0",
                "1" if delete else "0",
                self._pressure,
                _num(now),
            ],
        )
        data, replayed = _reply(raw)
        return BlockResult(
            block_id=data["block_id"],
            rev=data.get("rev"),
            tokens=int(data["tokens"]),
            total=int(data["total"]),
            action=data["action"],
            deleted=bool(data["deleted"]),
            batch=BatchInfo.from_json(data.get("batch")),
            pressure_message_id=data.get("pressure_message_id"),
            replayed=replayed,
            previous=Block.from_json(json.loads(raw[2])) if len(raw) > 2 and raw[2] else None,
        )

    def get_block(self, agent_id: str, block_id: str) -> Block:
        validation.agent_id(agent_id)
        validation.block_id(block_id)
        raw = self.redis.hget(keys.key(agent_id, keys.BLOCKS), block_id)
        if raw is None:
            self.agent(agent_id)
            raise NotFound(f"block {block_id!r} does not exist", block_id=block_id)
        return Block.from_json(json.loads(raw))

    def list_blocks(self, agent_id: str) -> list[Block]:
        self.agent(agent_id)
        raw = self.redis.hgetall(keys.key(agent_id, keys.BLOCKS))
        return sorted((Block.from_json(json.loads(v)) for v in raw.values()), key=lambda b: b.id)

    # --- eviction batches -----------------------------------------------------------------
    def pending_batches(self, agent_id: str) -> list[int]:
        # Without withscores, ZRANGE replies members only; redis-py's return type cannot say so.
        members = cast(list[str], self.redis.zrange(keys.key(agent_id, keys.BATCHES), 0, -1))
        return [int(_text(b)) for b in members]

    def read_batch(self, agent_id: str, batch_id: int) -> list[Message]:
        """The messages of a pending batch, oldest first (step 2 reads these)."""
        ids = self.redis.lrange(keys.evicting(agent_id, batch_id), 0, -1)
        if not ids:
            raise NotFound(f"no pending eviction batch {batch_id}", batch_id=batch_id)
        raws = self.redis.hmget(keys.key(agent_id, keys.MESSAGES), ids)
        return [Message.from_json(json.loads(r)) for r in raws if r is not None]

    def summary(self, agent_id: str) -> tuple[str, int, int, int]:
        """(text, tokens, rev, last batch id folded in)."""
        data = self.redis.hgetall(keys.key(agent_id, keys.SUMMARY))
        return (
            _text(data.get("text", "")),
            int(data.get("tokens", 0)),
            int(data.get("rev", 0)),
            int(data.get("batch_id", 0)),
        )

    def summary_tokens(self, agent_id: str, text: str) -> int:
        return self.counter(self._model(agent_id)).message(render.summary(text))

    def finish_eviction(self, agent_id: str, batch_id: int, summary_text: str) -> FinishResult:
        """Step 3: install the committed summary, drop the batch, and take its messages off the
        placeholder the pending batches share (gone when it was the last).

        Idempotent by batch id; batches must finish in order (``CONFLICT`` otherwise).
        """
        validation.agent_id(agent_id)
        if not isinstance(batch_id, int) or batch_id < 1:
            raise ValidationError("batch_id must be a positive integer", field="batch_id")
        summary_text = validation.text(
            summary_text, "summary", self.settings.budget.max_content_chars, allow_empty=True
        )
        tokens = self.summary_tokens(agent_id, summary_text)
        raw = self._finish(
            keys=[
                keys.key(agent_id, keys.META),
                keys.key(agent_id, keys.FIFO),
                keys.key(agent_id, keys.MESSAGES),
                keys.key(agent_id, keys.BATCHES),
                keys.key(agent_id, keys.PLACEHOLDERS),
                keys.key(agent_id, keys.SUMMARY),
                keys.evicting(agent_id, batch_id),
            ],
            args=[keys.prefix(agent_id), batch_id, summary_text, tokens, self._pressure, _num(self.clock())],
        )
        data, replayed = _reply(raw)
        return FinishResult(
            batch_id=int(data["batch_id"]),
            summary_rev=int(data["summary_rev"]),
            total=int(data["total"]),
            action=data.get("action", "ok"),
            batch=BatchInfo.from_json(data.get("batch")),
            pressure_message_id=data.get("pressure_message_id"),
            replayed=replayed,
        )

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
        fp = _fingerprint({"op": "evict", "count": count}) if idempotency_key else ""
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
        data, _ = _reply(raw)
        return int(data["total"]), BatchInfo.from_json(data.get("batch"))

    def claim(
        self, agent_id: str, idempotency_key: str, op: str, request: Mapping[str, Any], result: Mapping[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """Record ``result`` as the outcome of ``op`` under ``idempotency_key``, atomically.

        Returns ``(result, False)`` on the key's first use and ``(first result, True)`` when the
        same request comes again; a different request under the key raises IdempotencyMismatch.
        The record has the format the Lua mutations use (``<fingerprint>\n<result JSON>``, one
        namespace per agent), so one key cannot mean two things across operations.
        """
        validation.agent_id(agent_id)
        validation.idempotency_key(idempotency_key)
        fp = _fingerprint({"op": op, **request})
        raw = self._claim(
            keys=[keys.idempotency(agent_id, idempotency_key)],
            args=[keys.prefix(agent_id), fp, self.settings.idempotency_ttl_s, _json(dict(result))],
        )
        return _reply(raw)

    def settle(
        self, agent_id: str, idempotency_key: str, op: str, request: Mapping[str, Any], result: Mapping[str, Any]
    ) -> None:
        """Replace a claimed key's recorded result with the operation's final one (same
        fingerprint), so that retries answer with it (:meth:`claim` records what is known first)."""
        fp = _fingerprint({"op": op, **request})
        record = f"{fp}\n{_json(dict(result))}"
        self.redis.set(keys.idempotency(agent_id, idempotency_key), record, ex=self.settings.idempotency_ttl_s)

    def cursor_secret(self) -> bytes:
        """The key of the MACs on result cursors: one per deployment (created by whichever process
        asks first), so any API or worker process can read a cursor another one issued."""
        self.redis.set(keys.CURSOR_SECRET, secrets.token_hex(32), nx=True)
        return bytes.fromhex(_text(self.redis.get(keys.CURSOR_SECRET)))

    def reserve_message_id(self, agent_id: str) -> tuple[str, int]:
        """An id in the agent's message sequence for a message that skips the FIFO (write_recall)."""
        self.agent(agent_id)
        seq = int(self.redis.hincrby(keys.key(agent_id, keys.META), "msg_seq", 1))
        return f"m{seq}", seq

    # --- reads ----------------------------------------------------------------------------
    def gauges(self, agent_id: str) -> Gauges:
        """The main context's token gauges from the counters alone (one HMGET, no message reads);
        equal to ``context.assemble(snapshot).gauges``."""
        validation.agent_id(agent_id)
        fields = ["window", "max", "system", "working", "summary", "ph", "fifo", "pinned_blocks", "pinned_fifo"]
        vals = self.redis.hmget(keys.key(agent_id, keys.META), fields)
        if vals[0] is None:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        n = dict(zip(fields, (int(v or 0) for v in vals), strict=True))
        return Gauges(
            window=n["window"],
            max_tokens=n["max"],
            system=n["system"],
            working=n["working"],
            summary=n["summary"],
            placeholders=n["ph"],
            fifo=n["fifo"],
            pinned=n["pinned_blocks"] + n["pinned_fifo"],
        )

    def snapshot(self, agent_id: str, *, token_sha256: str | None = None) -> Snapshot:
        """One MULTI/EXEC round trip, so the parts are mutually consistent.

        With ``token_sha256`` the agent's token digest is read in the same transaction and must
        equal it (UNAUTHORIZED, before NOT_FOUND, otherwise): auth costs no round trip of its own."""
        validation.agent_id(agent_id)
        pipe = self.redis.pipeline(transaction=True)
        if token_sha256 is not None:
            pipe.get(keys.key(agent_id, keys.TOKEN))
        pipe.hgetall(keys.key(agent_id, keys.META))
        pipe.hgetall(keys.key(agent_id, keys.SYSTEM))
        pipe.lrange(keys.key(agent_id, keys.FIFO), 0, -1)
        pipe.hgetall(keys.key(agent_id, keys.MESSAGES))
        pipe.hgetall(keys.key(agent_id, keys.BLOCKS))
        pipe.hgetall(keys.key(agent_id, keys.SUMMARY))
        pipe.hgetall(keys.key(agent_id, keys.PLACEHOLDERS))
        replies = pipe.execute()
        if token_sha256 is not None:
            _require_token(replies.pop(0), token_sha256)
        meta, system, fifo, msgs, blocks, summary, ph = replies
        if not meta:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        messages = [Message.from_json(json.loads(msgs[_entry_id(e)])) for e in fifo]
        placeholders = []
        for bid, value in ph.items():
            count, tokens = value.split("|")
            placeholders.append((int(bid), int(count), int(tokens)))
        return Snapshot(
            agent_id=agent_id,
            meta=meta,
            system_prompt=system.get("prompt", ""),
            tools=json.loads(system.get("tools", "[]")),
            fifo=messages,
            blocks=sorted((Block.from_json(json.loads(v)) for v in blocks.values()), key=lambda b: b.id),
            summary_text=summary.get("text", ""),
            summary_tokens=int(summary.get("tokens", 0)),
            placeholders=sorted(placeholders),
        )

    def batch_message_ids(self, agent_id: str) -> dict[int, list[str]]:
        """Pending batches and their message ids (for audits and property tests)."""
        out: dict[int, list[str]] = {}
        for bid in self.pending_batches(agent_id):
            out[bid] = [_text(m) for m in self.redis.lrange(keys.evicting(agent_id, bid), 0, -1)]
        return out

    def get_messages(self, agent_id: str, message_ids: Sequence[str]) -> list[Message]:
        """Messages still held in Redis (FIFO or a pending batch), in the order asked.

        A message missing here has left Redis with a finished batch, after its store commit.
        """
        if not message_ids:
            return []
        raws = self.redis.hmget(keys.key(agent_id, keys.MESSAGES), list(message_ids))
        return [Message.from_json(json.loads(r)) for r in raws if r is not None]

    def fifo_ids(self, agent_id: str) -> list[str]:
        """The FIFO's message ids, oldest first (its entries only: no message is read)."""
        validation.agent_id(agent_id)
        return [_entry_id(e) for e in self.redis.lrange(keys.key(agent_id, keys.FIFO), 0, -1)]

    def reconciled_seq(self, agent_id: str) -> int:
        """The sweeper's watermark: every FIFO message up to this seq was found in the store."""
        validation.agent_id(agent_id)
        return int(self.redis.get(keys.key(agent_id, keys.RECONCILED)) or 0)

    def set_reconciled_seq(self, agent_id: str, seq: int) -> None:
        validation.agent_id(agent_id)
        self.redis.set(keys.key(agent_id, keys.RECONCILED), int(seq))

    def fifo_near(
        self, agent_id: str, message_ids: Sequence[str], *, before: int, after: int, head: int = 0
    ) -> list[Message]:
        """FIFO messages up to ``before`` places before and ``after`` places after any of
        ``message_ids``, and the ``head`` oldest ones, oldest first.

        The cold path's context reads: the FIFO's entries are short ids, its messages can fill a
        128k window, so this reads the ids and fetches only the messages it keeps, where a
        :meth:`snapshot` would fetch them all. A message that leaves the FIFO in between is
        skipped (it is then in a pending batch or the store)."""
        ids = self.fifo_ids(agent_id)
        wanted = set(message_ids)
        keep = set(range(min(max(head, 0), len(ids))))
        for i, message_id in enumerate(ids):
            if message_id in wanted:
                keep.update(range(max(0, i - max(before, 0)), min(len(ids), i + max(after, 0) + 1)))
        return self.get_messages(agent_id, [ids[i] for i in sorted(keep)])

    def agents_with_pending_batches(self) -> dict[str, list[int]]:
        """For the sweeper: every agent's pending batch ids (scans the agents set)."""
        out: dict[str, list[int]] = {}
        for agent_id in self.agents():
            pending = self.pending_batches(agent_id)
            if pending:
                out[agent_id] = pending
        return out

    # --- rebuild and removal (vcm.durable) ------------------------------------------------------
    def exists(self, agent_id: str) -> bool:
        validation.agent_id(agent_id)
        return bool(self.redis.exists(keys.key(agent_id, keys.META)))

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
        creation = self._creation(agent_id, model, system_prompt, tools)
        fifo = sorted(image.fifo, key=lambda m: m.seq)
        blocks = list(image.blocks)
        meta: dict[str, Any] = {
            **creation.config,
            "config_fp": creation.fingerprint,
            "working": sum(b.tokens for b in blocks),
            "pinned_blocks": sum(b.tokens for b in blocks if b.pinned),
            "fifo": sum(m.tokens for m in fifo),
            "pinned_fifo": sum(m.tokens for m in fifo if m.pinned),
            "summary": image.summary_tokens if image.summary_text else 0,
            "ph": 0,
            "ph_count": 0,
            "msg_seq": image.id_floor,
            "batch_seq": image.id_floor,
            "finished_batch": image.id_floor,
            "rev_seq": max([image.id_floor, *(int(b.rev) for b in blocks if b.rev.isdigit())]),
            "appended": len(fifo),
            "evicted": 0,
        }
        total = int(creation.config["system"]) + meta["working"] + meta["summary"] + meta["fifo"]
        # Warned already if over the line: the context it restores carried its notice.
        meta["warned"] = int(total >= int(creation.config["warn"]))
        summary = (
            {
                "text": image.summary_text,
                "tokens": image.summary_tokens,
                "rev": image.summary_batch,
                "batch_id": image.summary_batch,
                "updated_at": _num(self.clock()),
            }
            if image.summary_text
            else {}
        )
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
                _json(meta),
                creation.prompt,
                _json(creation.tools),
                _json([f"{m.tokens}:{int(m.pinned)}:{m.id}" for m in fifo]),
                _json([[m.id, _json(m.as_json())] for m in fifo]),
                _json([[b.id, _json(b.as_json())] for b in blocks]),
                _json(summary),
                image.token_sha256 or "",
                self._pressure,
                _num(self.clock()),
            ],
        )
        data, replayed = _reply(raw)
        self.redis.sadd(keys.AGENTS, agent_id)
        self._models[agent_id] = creation.info.model
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

    def forget(self, agent_id: str, *, keep: Collection[str] = ()) -> int:
        """Delete every Redis key of the agent (all share its hash tag, so one SCAN pattern finds
        them on a single node; on a cluster each master is scanned by redis-py) but those named in
        ``keep`` (key names of :mod:`vcm.hotpath.keys`). Returns how many."""
        validation.agent_id(agent_id)
        pattern = keys.prefix(agent_id).replace("[", "\\[").replace("*", "\\*").replace("?", "\\?") + "*"
        kept = {keys.key(agent_id, name) for name in keep}
        doomed = [k for k in self.redis.scan_iter(match=pattern, count=1000) if k not in kept]
        removed = 0
        for i in range(0, len(doomed), 500):
            removed += int(self.redis.delete(*doomed[i : i + 500]))
        self.redis.srem(keys.AGENTS, agent_id)
        with self._lock:
            self._models.pop(agent_id, None)
        return removed
