"""What every part of the façade shares: the tiers, the ports and the rules each write obeys.

One :class:`Core` per :class:`~vcm.service.MemoryService`. The parts (messages, blocks, facts, ...)
hold it and call it with real signatures, so mypy checks every call between them. It owns:

* the **tiers and ports**: hot state, store, durability, settings, the cold-path dispatcher, the
  query embedder and the clock (the last three replaceable at run time: tests and entry points
  swap them on a live service);
* the **agent lookup with rebuild** (:meth:`Core.hot_call`): a hot-state call for an agent Redis
  lost but the store knows rebuilds it and runs again;
* **idempotency claims**, in the hot state's one record format;
* **audit rows** and **change-feed publishes**, which never fail the write they describe;
* the **poisoning scan** and the **policy guard** that facts and state writes share;
* **query vectors**, cached for the few texts one prompt build asks for repeatedly, and embedded
  together when a build knows them all up front;
* **one agent read per build** (:meth:`Core.one_agent_read`): inside it, :meth:`Core.agent`
  answers from the first read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar

from vcm import poisoning
from vcm.dispatch import Dispatcher
from vcm.durable import Durability
from vcm.errors import IdempotencyMismatch, NotFound, PinLimitExceeded, PolicyRefused, TokenBudgetExceeded, Unauthorized
from vcm.facts import guard
from vcm.hotpath.state import HotState, claim_record
from vcm.hotpath.tokens import TokenCounter
from vcm.obs import audit, footprint, metrics
from vcm.service.writebehind import WriteBehindBound
from vcm.store.audit_names import EventKind, audit_id
from vcm.store.port import MemoryStore
from vcm.store.types import AgentRecord, IdempotencyRecord, MemoryEvent
from vcm.types import AgentInfo, BatchInfo, Gauges

P = ParamSpec("P")
R = TypeVar("R")
log = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Any]  # texts -> array of unit vectors (n, dim)

# Query vectors a service keeps (see Core.vector_of).
QUERY_VECTORS = 64
# Poisoning marks a service keeps, by text: a prompt build scans every recalled message it may
# show (20 by default), and consecutive builds recall many of the same messages.
MARKS = 4096
# Agents read in the current context's Core.one_agent_read scope, by (core, agent id): their hot
# state and their store record; None outside one. A context variable, so concurrent requests on
# threads never share a read.
_AGENT_READS: ContextVar[dict[tuple[int, str], AgentInfo] | None] = ContextVar("vcm_agent_reads", default=None)
_RECORD_READS: ContextVar[dict[tuple[int, str], AgentRecord] | None] = ContextVar("vcm_record_reads", default=None)


class Core:
    def __init__(
        self,
        hot: HotState,
        store: MemoryStore,
        dispatcher: Dispatcher,
        *,
        embed: Embed | None = None,
        recall_version: Callable[[], str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hot = hot
        self.store = store
        self.dispatcher = dispatcher
        self.embed = embed
        # The version the workers embed messages under (model and context mode): recall compares
        # query vectors only with those. Without it the store picks the agent's most used version,
        # which after a model change belongs to the old model.
        self.recall_version = recall_version
        self.clock = clock
        self.settings = hot.settings
        self.taint = poisoning.Filter.of(self.settings.poisoning)
        self._cursor_secret: bytes | None = None
        # The store is the source of truth for agents; Redis is rebuilt from it (vcm.durable).
        self.durable = Durability(hot, store)
        # Write-behind's loss window, bounded by writing the backlog through (vcm.service.writebehind).
        self.behind = None if self.durable.write_through else WriteBehindBound(hot, store)
        # Vectors of recent query texts: one prompt build searches facts twice and recall once
        # with the same text, and a model call costs 15-70 ms where the lookup costs nothing.
        self._vectors: OrderedDict[tuple[int, str], list[float]] = OrderedDict()
        self._marks: OrderedDict[tuple[int, str], dict[str, Any]] = OrderedDict()

    # --- agents and their hot state ---------------------------------------------------------------
    def agent(self, agent_id: str) -> AgentInfo:
        """The agent (NOT_FOUND when neither tier knows it); every part checks it first. Inside
        :meth:`one_agent_read`, the first read's answer."""
        reads = _AGENT_READS.get()
        if reads is None:
            return self.hot_call(agent_id, self.hot.agent, agent_id)
        key = (id(self), agent_id)
        found = reads.get(key)
        if found is None:
            found = reads[key] = self.hot_call(agent_id, self.hot.agent, agent_id)
        return found

    def agent_seen(self, info: AgentInfo) -> None:
        """Inside :meth:`one_agent_read`, ``info`` (read with the agent's hot context) answers
        :meth:`agent` unless the scope has read the agent already."""
        reads = _AGENT_READS.get()
        if reads is not None:
            reads.setdefault((id(self), info.agent_id), info)

    def agent_record(self, agent_id: str) -> AgentRecord:
        """The agent's store record (NOT_FOUND when the store has none). Inside
        :meth:`one_agent_read`, the first read's answer."""
        reads = _RECORD_READS.get()
        if reads is None:
            return self.store.get_agent(agent_id)
        key = (id(self), agent_id)
        found = reads.get(key)
        if found is None:
            found = reads[key] = self.store.get_agent(agent_id)
        return found

    @contextmanager
    def one_agent_read(self) -> Iterator[None]:
        """A scope in which each agent is read once from the hot state and once from the store:
        a prompt build's parts each check the agent (six reads, each a Redis round trip, 1-3 ms
        of a build in all) and read its user and domain (four store reads), and nothing a build
        reads of it changes within the build."""
        if _AGENT_READS.get() is not None:  # an enclosing scope's reads hold
            yield
            return
        token = _AGENT_READS.set({})
        records = _RECORD_READS.set({})
        try:
            yield
        finally:
            _RECORD_READS.reset(records)
            _AGENT_READS.reset(token)

    def hot_call(self, agent_id: str, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """A hot-state call for one agent; when the agent is missing from Redis (restart in
        embedded mode, a flushed or replaced Redis) but known to the store, its hot state is
        rebuilt and the call made again. UNAUTHORIZED counts as missing when the token is checked
        in the call itself: a flushed Redis lost the token's hash too."""
        try:
            return call(*args, **kwargs)
        except (NotFound, Unauthorized):
            # Not rebuilt here, but present now: another request (or process) rebuilt it first,
            # between the failed call and this look (a FLUSHDB under concurrent requests).
            if not self.rebuild(agent_id) and not self.hot.exists(agent_id):
                raise
        return call(*args, **kwargs)

    def rebuild(self, agent_id: str) -> bool:
        """Rebuild the agent's hot state from the store if Redis lost it (vcm.durable); a batch
        the rebuilt FIFO needs (it was over the flush line) is handed to the cold path."""
        rebuilt = self.durable.rebuild(agent_id)
        if rebuilt is None:
            return False
        if rebuilt.pressure_message_id:
            self.durable.appended(agent_id, [rebuilt.pressure_message_id], 0)
        if rebuilt.batch is not None:
            self.batch_begun(agent_id, rebuilt.batch, rebuilt.total, False, "system")
            metrics.flush("rebuild")
        return True

    def counter(self, model: str | None = None) -> TokenCounter:
        """The token counter of a model (default: the settings' default model)."""
        return self.hot.counter(model or self.settings.default_model)

    def batch_begun(
        self,
        agent_id: str,
        batch: BatchInfo,
        total: int,
        unreachable: bool,
        actor: str,
        idempotency_key: str | None = None,
    ) -> None:
        """Hand a begun eviction batch to the cold path and record its flush row."""
        self.dispatcher.evict(agent_id, batch.id)
        row = audit.flush_event(
            agent_id,
            batch.id,
            messages=batch.count,
            tokens=batch.tokens,
            total_after=total,
            actor=actor,
            created_at=self.clock(),
            idempotency_key=idempotency_key,
        )
        self.write_event(row)
        payload = {"batch_id": batch.id, "messages": batch.count, "tokens": batch.tokens, "total_after": total}
        if unreachable:
            # The unevictable parts (system, blocks, pinned, summary) alone exceed the target.
            self.event(
                agent_id,
                EventKind.TARGET_UNREACHABLE,
                payload,
                actor,
                event_id=audit_id(agent_id, "unreachable", batch.id),
            )

    def gauges_seen(self, agent_id: str, gauges: Gauges) -> None:
        m = self.settings.metrics
        metrics.context(agent_id, gauges, per_agent=m.per_agent, max_agents=m.max_agent_series)

    # --- idempotency ------------------------------------------------------------------------------
    def claim(
        self, agent_id: str, idempotency_key: str, op: str, request: Mapping[str, Any], result: Mapping[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """An entry point's own idempotent operation: the first result under the key, and whether
        this is a replay (the hot state's one record format; IDEMPOTENCY_MISMATCH on reuse).

        The store is the source of truth for the record, Redis its cache: a key new to Redis is
        looked up in the store (Redis may have lost it: a restart, a flush, a failover) and the
        store's record wins; a new record is written to the store before this returns, so the
        operation it guards is never acknowledged without it."""
        self.agent(agent_id)
        first, replayed = self.hot.claim(agent_id, idempotency_key, op, request, result)
        if replayed:
            return first, True
        fp, text = claim_record(op, request, result)
        kept = self.store.get_idempotency(agent_id, idempotency_key)
        if kept is None:
            self.durable.keep_record(agent_id, idempotency_key, fp, text)
            return first, False
        # Redis had lost it: put the store's record back in place of the one just claimed.
        self.hot.install_idempotency(
            agent_id, [(idempotency_key, kept.fingerprint, kept.result, kept.expires_at)], replace=True
        )
        if kept.fingerprint != fp:
            raise IdempotencyMismatch("this idempotency key was already used for a different request; use a new key")
        return dict(json.loads(kept.result)), True

    def release(self, agent_id: str, idempotency_key: str, op: str, request: Mapping[str, Any]) -> None:
        """Forget a claim whose operation was refused before it changed anything (bad input, a
        policy refusal, a revision conflict), so a corrected retry under the same key is not
        IDEMPOTENCY_MISMATCH: the store's copy is replaced by an expired one (never read back,
        removed by ``expire_idempotency``), then Redis's is deleted."""
        fp = claim_record(op, request, {})[0]
        expired = self.clock() - 1.0
        self.store.put_idempotency([IdempotencyRecord(agent_id, idempotency_key, fp, "{}", expired)])
        self.hot.release(agent_id, idempotency_key)

    def settle(
        self, agent_id: str, idempotency_key: str, op: str, request: Mapping[str, Any], result: Mapping[str, Any]
    ) -> None:
        """Record the final result of a claimed keyed operation (retries answer with it): in the
        store first, then in its Redis cache."""
        self.durable.keep_record(agent_id, idempotency_key, *claim_record(op, request, result))
        self.hot.settle(agent_id, idempotency_key, op, request, result)

    def cursor_secret(self) -> bytes:
        """The key of the MACs on result cursors, shared by every process of the deployment."""
        if self._cursor_secret is None:
            self._cursor_secret = self.hot.cursor_secret()
        return self._cursor_secret

    # --- audit and the change feed ----------------------------------------------------------------
    def event(
        self,
        agent_id: str,
        kind: EventKind,
        payload: Mapping[str, Any],
        actor: str,
        *,
        event_id: str,
        idempotency_key: str | None = None,
        change: footprint.Footprint | None = None,
    ) -> None:
        """One audit row, idempotent by ``event_id``; a store failure is logged, never raised."""
        self.write_event(
            audit.event(
                agent_id,
                kind,
                change,
                actor=actor,
                event_id=event_id,
                idempotency_key=idempotency_key,
                created_at=self.clock(),
                details=payload,
            )
        )

    def audit(self, agent_id: str, kind: EventKind, payload: Mapping[str, Any], actor: str) -> None:
        """An audit row of an operation with no natural id of its own."""
        # Unique per call (two identical rows in one clock tick are still two events).
        digest = hashlib.sha256(f"{kind}{sorted(payload.items())!r}{time.perf_counter_ns()}".encode()).hexdigest()[:24]
        self.event(agent_id, kind, payload, actor, event_id=f"{agent_id}:{kind}:{digest}")

    def write_event(self, row: MemoryEvent) -> None:
        try:
            self.store.append_event(row)
        except Exception:  # the write it describes already happened; an audit gap must not fail it
            log.exception("could not record %s event for %s", row.kind, row.agent_id)

    @contextmanager
    def refusals_audited(self, agent_id: str, op: str, actor: str, idempotency_key: str | None) -> Iterator[None]:
        """A write the budget refused leaves an ``error`` row (seed 000: budget violations are
        logged to memory_events) with the code and the numbers, never the content; a retry under
        the same key adds no second row."""
        try:
            yield
        except (TokenBudgetExceeded, PinLimitExceeded) as exc:
            numbers = {k: v for k, v in exc.details.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            suffix = idempotency_key or uuid.uuid4().hex
            self.event(
                agent_id,
                EventKind.ERROR,
                {"code": str(exc.code), "op": op, **numbers},
                actor,
                event_id=f"{agent_id}:error:{op}:{hashlib.sha256(suffix.encode()).hexdigest()[:24]}",
                idempotency_key=idempotency_key,
            )
            raise

    def changed(self, agent_id: str, kind: str, key: str, version: str | int | None, op: str = "put") -> None:
        """Publish one change of the agent's memory to its feed (after the write itself)."""
        try:
            self.hot.changes.publish(agent_id, kind, key, None if version is None else str(version), op)
        except Exception:  # the write happened; caches catch up at their next sync or expiry
            metrics.change_feed_failed()
            log.warning("could not publish a %s change of %s to its feed", kind, agent_id, exc_info=True)
            return
        metrics.change_published(kind)

    # --- retrieved text and policy ----------------------------------------------------------------
    def mark(self, text: str) -> dict[str, Any]:
        """``tainted`` / ``taint_reasons`` for retrieved text that reads like instructions to the
        model: the model sees the mark next to the text, and ``put_block`` refuses such text
        without a justification."""
        key = (id(self.taint), text)
        found = self._marks.get(key)
        if found is None:
            found = self._marks[key] = self.taint.scan(text).fields()
            _trim(self._marks, MARKS)
        else:
            with contextlib.suppress(KeyError):  # evicted by another request's thread meanwhile
                self._marks.move_to_end(key)
        return {k: list(v) if isinstance(v, list) else v for k, v in found.items()}  # callers may edit theirs

    def scan(self, text: str) -> poisoning.Verdict:
        return self.taint.scan(text)

    def guard(
        self, agent_id: str, op: str, text: str, justification: str | None, actor: str, **ids: Any
    ) -> tuple[str, ...]:
        """The policy guard of facts and state writes: PII, secrets and instruction-like text are
        refused (POLICY_REFUSED) unless a justification of substance says why; either way an
        audit row says what was decided. Returns the reasons a justification overrode (none:
        the text passed)."""
        verdict = guard.check(text, self.settings.facts.pii, self.taint.scan(text).reasons)
        if not verdict.refused:
            return ()
        if justification is not None and not poisoning.justification_problem(justification):
            self.audit(
                agent_id,
                EventKind.GUARD_OVERRIDE,
                {"op": op, "reasons": list(verdict.reasons), "justification": justification[:1000], **ids},
                actor,
            )
            return verdict.reasons
        metrics.guard_refused(op)
        self.audit(
            agent_id,
            EventKind.FACT_DECISION,
            {"decision": "REFUSED", "op": op, "reasons": list(verdict.reasons), **ids},
            actor,
        )
        raise PolicyRefused(
            f"the policy guard refused this {op.replace('_', ' ')}: {', '.join(verdict.reasons)}; "
            "give a justification to store it anyway",
            reasons=list(verdict.reasons),
        )

    # --- query vectors ----------------------------------------------------------------------------
    def vector_of(self, text: str) -> list[float]:
        """The embedding of one text, from the last few asked for when it is among them."""
        assert self.embed is not None
        key = (id(self.embed), text)  # a swapped embedder never answers from the old one's vectors
        found = self._vectors.get(key)
        if found is None:
            found = [float(x) for x in self.embed([text])[0]]
            self._vectors[key] = found
            _trim(self._vectors, QUERY_VECTORS)
        return found

    def vectors_of(self, texts: Sequence[str]) -> None:
        """Embed those of ``texts`` not cached yet in one model call, into the cache
        :meth:`vector_of` reads: a prompt build knows its texts up front, and two short texts
        embed in one padded batch in about 80 % of the time of two calls (MiniLM, ONNX Runtime)."""
        assert self.embed is not None
        missing = list(dict.fromkeys(t for t in texts if (id(self.embed), t) not in self._vectors))
        if not missing:
            return
        for text, vector in zip(missing, self.embed(missing), strict=True):
            self._vectors[(id(self.embed), text)] = [float(x) for x in vector]
        _trim(self._vectors, QUERY_VECTORS)

    def embedding(self, text: str) -> list[float] | None:
        """The text's vector for a memory write, or None without an embedder or when it fails."""
        if self.embed is None:
            return None
        try:
            return self.vector_of(text)
        except Exception:  # an embedder failure must not fail a memory write: text still dedups
            return None


def _trim(cache: OrderedDict[Any, Any], limit: int) -> None:
    """Drop the oldest entries past ``limit``. Request threads share a service's caches: each
    OrderedDict operation is atomic, but another thread may empty the cache between two."""
    while len(cache) > limit:
        try:
            cache.popitem(last=False)
        except KeyError:
            return
