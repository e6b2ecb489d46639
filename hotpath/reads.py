"""Reads of the hot state (and the sweeper's watermark): agents, blocks, batches, the FIFO, gauges
and the one-transaction snapshot a context is assembled from. No Lua script: each is one command,
pipeline or MULTI/EXEC. :class:`~vcm.hotpath.state.HotState` adds the mutations."""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from vcm import validation
from vcm.errors import NotFound
from vcm.hotpath import keys
from vcm.hotpath.codec import as_str, entry_id, require_token
from vcm.types import AgentInfo, Block, Gauges, Message


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
    def info(self) -> AgentInfo:
        """The agent as :meth:`HotReads.agent` reads it, from the same hash."""
        return AgentInfo(
            self.agent_id, self.meta["model"], int(self.meta["window"]), int(self.meta["max"]), int(self.meta["system"])
        )

    @property
    def placeholder(self) -> tuple[int, int] | None:
        """The one placeholder the main context shows for all pending batches: (message count,
        tokens), or None when no batch is pending. The count is summed from the batches' own
        counts; the tokens are the stored ``ph`` counter, which the scripts keep equal to the
        cost of that one rendering."""
        if not self.placeholders:
            return None
        return sum(count for _, count, _ in self.placeholders), self.counter("ph")


class HotReads:
    """What the hot state answers without changing anything an agent holds."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    def agent(self, agent_id: str) -> AgentInfo:
        validation.agent_id(agent_id)
        vals = self.redis.hmget(keys.key(agent_id, keys.META), ["model", "window", "max", "system"])
        if vals[0] is None:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        model, window, max_tokens, system = (as_str(v) for v in vals)
        return AgentInfo(agent_id, model, int(window), int(max_tokens), int(system))

    def incarnation(self, agent_id: str) -> str:
        """The incarnation the agent was created with ("" for one created before incarnations);
        NOT_FOUND when the agent is missing. The cold path reads it before and after it reads its
        work, and its store writes check it (:class:`~vcm.errors.AgentFenced`)."""
        validation.agent_id(agent_id)
        found = self.redis.hmget(keys.key(agent_id, keys.META), ["model", "incarnation"])
        if found[0] is None:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        return as_str(found[1]) if found[1] is not None else ""

    def agents(self) -> list[str]:
        return sorted(as_str(a) for a in self.redis.smembers(keys.AGENTS))

    def _agent_for_token(self, agent_id: str, token_sha256: str) -> AgentInfo:
        """The agent, read in the same round trip as its bearer token's digest, which must equal
        ``token_sha256``: UNAUTHORIZED comes first, so a caller without the agent's token cannot
        learn whether the agent exists."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(keys.key(agent_id, keys.TOKEN))
        pipe.hmget(keys.key(agent_id, keys.META), ["model", "window", "max", "system"])
        stored, vals = pipe.execute()
        require_token(stored, token_sha256)
        if vals[0] is None:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        model, window, max_tokens, system = (as_str(v) for v in vals)
        return AgentInfo(agent_id, model, int(window), int(max_tokens), int(system))

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

    def pending_batches(self, agent_id: str) -> list[int]:
        # Without withscores, ZRANGE replies members only; redis-py's return type cannot say so.
        members = cast(list[str], self.redis.zrange(keys.key(agent_id, keys.BATCHES), 0, -1))
        return [int(as_str(b)) for b in members]

    def read_batch(self, agent_id: str, batch_id: int) -> list[Message]:
        """The messages of a pending batch, oldest first (step 2 reads these)."""
        ids = self.redis.lrange(keys.evicting(agent_id, batch_id), 0, -1)
        if not ids:
            raise NotFound(f"no pending eviction batch {batch_id}", batch_id=batch_id)
        raws = self.redis.hmget(keys.key(agent_id, keys.MESSAGES), ids)
        return [Message.from_json(json.loads(r)) for r in raws if r is not None]

    def summary_skipped(self, agent_id: str, batch_id: int, first_message_id: str) -> bool:
        """Whether the batch was begun with ``summarize=false`` (:meth:`skip_summary`)."""
        flag = self.redis.get(keys.skip_summary(agent_id, batch_id))
        return flag is not None and as_str(flag) == first_message_id

    def skip_summary(self, agent_id: str, batch_id: int, first_message_id: str) -> None:
        """Mark a begun batch to leave the summary as it is; a plain key beside the batch (not
        in its Lua-kept record), set before the batch is dispatched and dropped once it finished
        (:meth:`summary_done`), with a TTL for a batch that never finishes. It holds the batch's
        oldest message id, so a flag left behind (a reset mid-batch) never marks another batch
        of the same number: message ids are never reused."""
        self.redis.set(keys.skip_summary(agent_id, batch_id), first_message_id, ex=keys.SKIP_SUMMARY_TTL_S)

    def summary_done(self, agent_id: str, batch_id: int) -> None:
        self.redis.delete(keys.skip_summary(agent_id, batch_id))

    def summary(self, agent_id: str) -> tuple[str, int, int, int]:
        """(text, tokens, rev, last batch id folded in)."""
        data = self.redis.hgetall(keys.key(agent_id, keys.SUMMARY))
        return (
            as_str(data.get("text", "")),
            int(data.get("tokens", 0)),
            int(data.get("rev", 0)),
            int(data.get("batch_id", 0)),
        )

    def cursor_secret(self) -> bytes:
        """The key of the MACs on result cursors: one per deployment (created by whichever process
        asks first), so any API or worker process can read a cursor another one issued."""
        self.redis.set(keys.CURSOR_SECRET, secrets.token_hex(32), nx=True)
        return bytes.fromhex(as_str(self.redis.get(keys.CURSOR_SECRET)))

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
            require_token(replies.pop(0), token_sha256)
        meta, system, fifo, msgs, blocks, summary, ph = replies
        if not meta:
            raise NotFound(f"unknown agent {agent_id!r}; create it first", agent_id=agent_id)
        messages = [Message.from_json(json.loads(msgs[entry_id(e)])) for e in fifo]
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
            out[bid] = [as_str(m) for m in self.redis.lrange(keys.evicting(agent_id, bid), 0, -1)]
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
        return [entry_id(e) for e in self.redis.lrange(keys.key(agent_id, keys.FIFO), 0, -1)]

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

    def exists(self, agent_id: str) -> bool:
        validation.agent_id(agent_id)
        return bool(self.redis.exists(keys.key(agent_id, keys.META)))
