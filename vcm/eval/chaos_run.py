"""The chaos run: its phases (agents, load under faults, drain), the checks of every acknowledged
write and of the audit trail, and the report (``scripts/chaos.py``)."""

from __future__ import annotations

import contextlib
import math
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import redis

from vcm.errors import VcmError
from vcm.eval.chaos_cases import (
    Cycle,
    DeleteCycles,
    LossWindow,
    Retrier,
    classify,
    cross_agent_rows,
    retry_outcomes,
    twin_violations,
)
from vcm.eval.chaos_load import HOST, MARK, Ack, Agent, Appender
from vcm.eval.chaos_processes import ChaosProcesses
from vcm.eval.processes import wait_until
from vcm.hotpath.state import HotState
from vcm.store import open_store
from vcm.store.port import MemoryStore
from vcm.store.types import FactQuery, MemoryEvent


class ChaosRun(ChaosProcesses):
    """One chaos run: processes, load, faults, drain, checks, report."""

    # --- phases -----------------------------------------------------------------------------------
    def create_agents(self) -> None:
        with contextlib.closing(self.connect(f"http://{HOST}:{self.api_ports[0]}", self.admin_token, 30)) as admin:
            for i in range(self.args.agents):
                agent_id = f"chaos-{self.run_id}-a{i}"
                body = admin.create_agent(agent_id, model=self.args.model, system_prompt="You are a travel assistant.")
                self.agents.append(Agent(agent_id, str(body["token"])))

    def load(self) -> None:
        stop = threading.Event()
        give_up_at = [math.inf]
        urls = [f"http://{HOST}:{p}" for p in self.api_ports]
        threads = [
            Appender(
                agent,
                j,
                urls,
                self.tally,
                stop,
                give_up_at,
                connect=self.connect,
                pause_s=self.args.pause,
                timeout_s=self.args.request_timeout,
                twins=self.args.twins,
                seed=self.rng.randrange(2**32),
            )
            for agent in self.agents
            for j in range(self.args.appenders)
        ]
        plan = self.schedule()
        self.t0 = time.monotonic()
        for t in threads:
            t.start()
        end = self.t0 + self.args.duration
        while time.monotonic() < end:
            if plan and time.monotonic() - self.t0 >= plan[0][0]:
                self.inject(plan.pop(0)[1])
            self.supervise()
            time.sleep(0.1)
        self.load_s = time.monotonic() - self.t0
        # Keys in flight keep retrying (everything is up again) until acknowledged or the deadline.
        give_up_at[0] = time.monotonic() + self.args.settle
        stop.set()
        for t in threads:
            t.join(max(0.0, give_up_at[0] - time.monotonic()) + self.args.request_timeout + 1)
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            print(f"chaos: appenders still running after the settle deadline: {stuck}", file=sys.stderr)

    def drain(self, hot: HotState, store: MemoryStore) -> tuple[bool, float, dict[str, Any]]:
        """Wait until no batch is pending and every message the hot path ever numbered is stored."""
        started = time.monotonic()
        state: dict[str, Any] = {}

        def drained() -> bool:
            self.supervise()
            state.clear()
            try:
                return self._drained(hot, store, state)
            except (redis.exceptions.RedisError, VcmError) as exc:  # a store busy timeout, say
                state["error"] = repr(exc)
                return False

        try:
            wait_until(drained, self.args.drain_timeout, "the cold path drained", 1.0)
            ok = True
        except TimeoutError:
            ok = False
        return ok, time.monotonic() - started, dict(state)

    def _drained(self, hot: HotState, store: MemoryStore, state: dict[str, Any]) -> bool:
        """No batch pending and every message of every FIFO stored. (Not "every id up to the
        sequence": a FLUSHDB loses ids for good, and a rebuilt agent continues above its floor.)"""
        for agent in self.agents:
            pending = hot.pending_batches(agent.agent_id)
            ids = hot.fifo_ids(agent.agent_id)
            stored = {m.message_id for m in store.get_messages(agent.agent_id, ids)}
            unspooled = [i for i in ids if i not in stored]
            if pending or unspooled:
                state[agent.agent_id] = {"pending_batches": pending, "unspooled": len(unspooled)}
        return not state

    # --- checks -----------------------------------------------------------------------------------
    def check(
        self, store: MemoryStore, fifo_ids: dict[str, dict[str, str]], pending: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        acks = self.tally.acks
        by_agent: dict[str, list[Ack]] = defaultdict(list)
        for ack in acks:
            by_agent[ack.agent].append(ack)
        duplicated: list[dict[str, Any]] = []
        audit: dict[str, Any] = {
            "committed_batches": 0,
            "missing_flush_rows": 0,
            "missing_evict_rows": 0,
            "duplicated_flush_rows": 0,
            "duplicated_evict_rows": 0,
            "orphan_rows": 0,
            "missing_flush_batches": {},
            "missing_flush_causes": Counter(),
            "flush_writers": Counter(),
            "dead_letters": 0,
        }
        ack_keys: Counter[tuple[str, str]] = Counter((a.agent, a.key) for a in acks)
        twice_acked = [f"{agent}/{key}" for (agent, key), n in ack_keys.items() if n > 1]
        stored_by: dict[str, dict[str, str]] = {}
        for agent in self.agents:
            aid = agent.agent_id
            stored_all = list(_all_messages(store, aid))
            stored_by[aid] = {m.message_id: m.content for m in stored_all}
            # content -> ids, over the store and the FIFO; ids listed twice by the store
            ids_of: dict[str, set[str]] = defaultdict(set)
            for m in stored_all:
                if m.content.startswith(f"[{MARK} "):
                    ids_of[m.content].add(m.message_id)
            for mid, text in fifo_ids.get(aid, {}).items():
                if text.startswith(f"[{MARK} "):
                    ids_of[text].add(mid)
            for text, ids in ids_of.items():
                if len(ids) > 1:
                    duplicated.append({"agent": aid, "ids": sorted(ids), "content": text[:80]})
            for mid, n in Counter(m.message_id for m in stored_all).items():
                if n > 1:
                    duplicated.append({"agent": aid, "ids": [mid], "stored_times": n})
            self._check_audit(store, aid, by_agent.get(aid, []), audit)
        audit["missing_flush_causes"] = dict(audit["missing_flush_causes"])
        audit["flush_writers"] = dict(audit["flush_writers"])
        base = self.t0
        faults = [(base + f.at_s, f.kind) for f in self.faults if f.kind in ("flushdb", "redis_crash")]
        found = classify(acks, stored=stored_by, fifo=fifo_ids, pending=pending, faults=faults, window=self.window())
        return {
            "classified": found,
            "lost": [_lost(a, stored_by) for a in found.lost],
            "duplicated": duplicated,
            "audit": audit,
            "twice_acknowledged_keys": twice_acked,
            "twins": twin_violations(self.tally.idempotency_violations, found),
            "retries": retry_outcomes(self.retried, found),
            "cross_agent": self.cross_agent(store, fifo_ids),
        }

    def window(self) -> LossWindow:
        """The contract's loss window before a FLUSHDB (write-behind's, ``write_behind_max_s``;
        unbounded when that bound is off) and a Redis crash (the AOF's 1 s fsync), with slack."""
        a = self.args
        flush = a.write_behind_max_s + a.window_slack if a.write_behind_max_s > 0 else math.inf
        return LossWindow(flush, min(1.0, flush) + a.window_slack, a.window_slack)

    def cross_agent(self, store: MemoryStore, fifo_ids: dict[str, dict[str, str]]) -> dict[str, int]:
        """What of each deleted agent its re-created successor holds, summed over the cycles."""
        out: Counter[str] = Counter()
        for cycle in self.cycles:
            aid = cycle.agent_id
            summary = store.get_summary(aid)
            texts = {
                "messages": [m.content for m in _all_messages(store, aid)],
                "facts": [f.value for f in store.query_facts(aid, FactQuery(statuses=None))],
                "summary": [summary.text] if summary else [],
                "summary_versions": [v.text for v in store.summary_versions(aid, limit=1000)],
                "context": [*fifo_ids.get(aid, {}).values(), self.hot_summaries.get(aid, "")],
            }
            rows = cross_agent_rows(texts)
            cycle.cross_agent_rows = sum(rows.values())
            out.update(rows)
        return dict(out)

    def _check_audit(self, store: MemoryStore, aid: str, acks: list[Ack], audit: dict[str, Any]) -> None:
        committed = store.committed_batches(aid)
        events = list(_all_events(store, aid, ["flush", "evict"]))
        per: dict[str, Counter[int]] = {"flush": Counter(), "evict": Counter()}
        for e in events:
            per[e.kind][int(e.payload.get("batch_id", -1))] += 1
            if e.kind == "flush":
                # api:agent:<id> (the request that began it) or worker:evict_batch (a summary
                # install began it, or the commit wrote the row its beginner never did)
                audit["flush_writers"]["api" if e.actor.startswith("api:") else e.actor] += 1
        audit["committed_batches"] += len(committed)
        audit["dead_letters"] += len(list(_all_events(store, aid, ["dead_letter"])))
        begun_by = {a.batch: a.replayed for a in acks if a.batch is not None}
        missing_flush: list[int] = []
        for b in committed:
            for kind in ("flush", "evict"):
                n = per[kind][b]
                if n == 0:
                    audit[f"missing_{kind}_rows"] += 1
                elif n > 1:
                    audit[f"duplicated_{kind}_rows"] += n - 1
            if per["flush"][b] == 0:
                missing_flush.append(b)
                # How the batch was begun, as far as the acknowledgements tell: a reply that
                # said "replayed" carried a batch the first (lost) reply began; no reply at all
                # names it when a summary install began it (or its request was never answered).
                if b in begun_by:
                    cause = "append_replayed" if begun_by[b] else "append_answered"
                else:
                    cause = "summary_install_or_unanswered_request"
                audit["missing_flush_causes"][cause] += 1
        if missing_flush:
            audit["missing_flush_batches"][aid] = missing_flush
        done = set(committed)
        audit["orphan_rows"] += sum(n for kind in per for b, n in per[kind].items() if b not in done)

    def worker_tasks(self) -> dict[str, int]:
        """Tasks each worker process finished (its INFO log), to see which ones did the work."""
        return {
            path.stem: path.read_text(errors="replace").count(" succeeded in ")
            for path in sorted(self.logdir.glob("worker-*.log"))
        }

    def log_errors(self) -> tuple[dict[str, int], dict[str, list[str]]]:
        """ERROR lines and tracebacks per process slot, over all its generations, and the first
        few distinct ERROR lines of each (without their timestamps) as evidence."""
        counts: Counter[str] = Counter()
        examples: dict[str, list[str]] = defaultdict(list)
        for path in sorted(self.logdir.glob("*.log")):
            slot = path.name.split(".")[0]
            for line in path.read_text(errors="replace").splitlines():
                if "ERROR" in line or line.startswith("Traceback"):
                    counts[slot] += 1
                text = line.split("] ", 1)[-1][:300]
                if "ERROR" in line and text not in examples[slot] and len(examples[slot]) < 5:
                    examples[slot].append(text)
        return dict(sorted(counts.items())), {k: v for k, v in examples.items() if v}

    def after_load(self) -> None:
        """Every acknowledged key sent again (``--retry-acked``), then the delete-during-eviction
        cycles (``--delete-cycles``), whose re-created agents join the run's checks."""
        urls = [f"http://{HOST}:{p}" for p in self.api_ports]
        started = time.monotonic()
        if self.args.retry_acked:
            retrier = Retrier(self.agents, urls, self.connect, self.args.request_timeout)
            self.retried = retrier.run(list(self.tally.acks), self.args.settle)
        self.phase_s["retry"] = time.monotonic() - started
        started = time.monotonic()
        if self.args.delete_cycles:
            cycles = DeleteCycles(
                self.run_id, urls, self.admin_token, self.connect, model=self.args.model, rng=self.rng,
                timeout_s=self.args.request_timeout, max_delay_s=self.args.delete_max_delay,
            )  # fmt: skip
            self.cycles = cycles.run(self.args.delete_cycles, self.args.startup_timeout)
            for cycle in self.cycles:
                if cycle.recreated:
                    self.agents.append(Agent(cycle.agent_id, cycle.token))
                    self.tally.acks.extend(cycle.new_acks)
        self.phase_s["delete_cycles"] = time.monotonic() - started

    # --- all of it ------------------------------------------------------------------------------
    def execute(self) -> dict[str, Any]:
        started = time.monotonic()
        self.start_all()
        setup_s = time.monotonic() - started
        self.create_agents()
        self.load()
        self.after_load()
        try:
            # Restarted workers need not be warm to drain: their first task waits for the model.
            self.wait_ready(self.args.startup_timeout, warm=False, heal=True)
        except TimeoutError:  # go on: the drain and the checks say what that cost
            self.not_ready = self.readiness()
            print(f"chaos: not all processes came back after the load: {self.not_ready}", file=sys.stderr)
        hot = HotState(self.redis_client(), self.settings)
        store = open_store(self.settings.store_url)
        try:
            drained, drain_s, undrained = self.drain(hot, store)
        finally:
            store.close()
        fifo_ids = {a.agent_id: {m.id: m.content for m in hot.snapshot(a.agent_id).fifo} for a in self.agents}
        pending = {a.agent_id: _pending_messages(hot, a.agent_id) for a in self.agents}
        self.hot_summaries = {c.agent_id: hot.snapshot(c.agent_id).summary_text for c in self.cycles if c.recreated}
        # The store is read after the run, with no process left writing to it.
        for child in [*self.apis, *self.workers, self.beat]:
            self.sup.kill(child)
        store = open_store(self.settings.store_url)
        try:
            found = self.check(store, fifo_ids, pending)
        finally:
            store.close()
        return self.report(found, drained, drain_s, undrained, setup_s, time.monotonic() - started)

    def report(
        self,
        found: dict[str, Any],
        drained: bool,
        drain_s: float,
        undrained: dict[str, Any],
        setup_s: float,
        total_s: float,
    ) -> dict[str, Any]:
        acks = self.tally.acks
        waits = sorted(a.wait_s for a in acks)
        audit = found["audit"]
        faults = Counter(f.kind for f in self.faults)
        log_counts, log_examples = self.log_errors()
        classified = found["classified"]
        window = self.window()
        out: dict[str, Any] = {
            "acknowledged": len(acks),
            "lost": len(found["lost"]),
            "lost_within_window": len(classified.lost_within_window),
            "pending_at_end": len(classified.pending),
            "duplicated": len(found["duplicated"]),
            "retries": found["retries"],
            "cross_agent_rows": sum(found["cross_agent"].values()),
            "cross_agent_by_place": found["cross_agent"],
            "delete_cycles": [_cycle(c) for c in self.cycles],
            "window_s": {"flushdb": window.flushdb_s, "redis_crash": window.redis_crash_s, "after": window.in_flight_s},
            "drain": {
                "drained": drained,
                "seconds": round(drain_s, 1),
                "pending_batches": sum(
                    len(v.get("pending_batches", [])) for v in undrained.values() if isinstance(v, dict)
                ),
                "unspooled": sum(int(v.get("unspooled", 0)) for v in undrained.values() if isinstance(v, dict)),
            },
            **{k: audit[k] for k in ("missing_flush_rows", "missing_evict_rows")},
            **{k: audit[k] for k in ("duplicated_flush_rows", "duplicated_evict_rows")},
            "committed_batches": audit["committed_batches"],
            "drained": drained,
            "faults": {k: faults.get(k, 0) for k in ("worker_kill", "api_kill", "redis_crash", "flushdb")},
            "unexpected_exits": len(self.unexpected),
            "appends_per_s": round(len(acks) / self.load_s, 1) if self.load_s else 0.0,
            "replayed_acks": sum(a.replayed for a in acks),
            "retried_acks": sum(a.attempts > 1 for a in acks),
            "ack_wait_s": {
                "p50": round(statistics.median(waits), 3) if waits else None,
                "p99": round(waits[min(len(waits) - 1, int(0.99 * len(waits)))], 3) if waits else None,
                "max": round(waits[-1], 3) if waits else None,
            },
            "errors_seen": dict(self.tally.errors.most_common()),
            "rejected": len(self.tally.rejected),
            "abandoned": len(self.tally.abandoned),
            "twice_acknowledged_keys": len(found["twice_acknowledged_keys"]),
            "twin_sends": self.tally.twin_sends,
            "idempotency_violations": len(found["twins"][0]),
            "twin_sends_lost_within_window": len(found["twins"][1]),
            "orphan_audit_rows": audit["orphan_rows"],
            "dead_letters": audit["dead_letters"],
            "missing_flush_causes": audit["missing_flush_causes"],
            "flush_writers": audit["flush_writers"],
            "missing_flush_batches": audit["missing_flush_batches"],
            "undrained": undrained,
            "not_ready_after_load": self.not_ready,
            "timing_s": {
                "setup": round(setup_s, 1),
                "load": round(self.load_s, 1),
                "retry": round(self.phase_s.get("retry", 0.0), 1),
                "delete_cycles": round(self.phase_s.get("delete_cycles", 0.0), 1),
                "drain": round(drain_s, 1),
                "total": round(total_s, 1),
            },
            "config": {
                k: getattr(self.args, k)
                for k in (
                    "duration",
                    "agents",
                    "appenders",
                    "apis",
                    "workers",
                    "pool",
                    "model",
                    "seed",
                    "pause",
                    "no_vectors",
                    "flushdbs",
                    "write_behind_max_s",
                    "write_behind_max_messages",
                    "delete_cycles",
                )
            },
            "fault_log": [asdict(f) for f in self.faults],
            "unexpected_exit_log": self.unexpected,
            "log_errors": log_counts,
            "log_error_examples": log_examples,
            "worker_tasks": self.worker_tasks(),
            "lost_examples": found["lost"][:20],
            "lost_within_window_examples": [_lost(a, {}) for a in classified.lost_within_window[:20]],
            "duplicated_examples": found["duplicated"][:20],
            "rejected_examples": self.tally.rejected[:20],
            "idempotency_violation_examples": found["twins"][0][:20],
            "workdir": str(self.workdir),
        }
        out["ok"] = drained and not any(
            out[k]
            for k in (
                "lost",
                "duplicated",
                "missing_flush_rows",
                "missing_evict_rows",
                "duplicated_flush_rows",
                "duplicated_evict_rows",
                "twice_acknowledged_keys",
                "idempotency_violations",
                "cross_agent_rows",
            )
        )
        out["ok"] = out["ok"] and not (out["retries"]["duplicated_by_retry"] or out["retries"]["wrong_id"])
        return out

    def cleanup(self) -> None:
        self.sup.kill_all()
        for child in [self.redis_child, *self.apis, *self.workers, self.beat]:
            if child.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(5)


def _all_messages(store: MemoryStore, agent_id: str) -> Iterator[Any]:
    after = -1
    while True:
        page = store.list_messages(agent_id, after_seq=after, limit=1000)
        yield from page
        if len(page) < 1000:
            return
        after = page[-1].seq


def _all_events(store: MemoryStore, agent_id: str, kinds: list[str]) -> Iterator[MemoryEvent]:
    cursor: str | None = None
    while True:
        page = store.query_events(agent_id, kinds, limit=1000, cursor=cursor)
        yield from page.items
        cursor = page.next_cursor
        if cursor is None:
            return


def _pending_messages(hot: HotState, agent_id: str) -> dict[str, str]:
    """The messages of the agent's eviction batches still in Redis, by id."""
    ids = [m for batch in hot.batch_message_ids(agent_id).values() for m in batch]
    return {m.id: m.content for m in hot.get_messages(agent_id, ids)}


def _lost(ack: Ack, stored: dict[str, dict[str, str]]) -> dict[str, Any]:
    held = stored.get(ack.agent, {}).get(ack.message_id)
    return {"agent": ack.agent, "key": ack.key, "message_id": ack.message_id, "stored_under_id": held and held[:80]}


def _cycle(c: Cycle) -> dict[str, Any]:
    return {
        "agent": c.agent_id,
        "old_appends": c.old_appends,
        "batch_after": c.batch_after,
        "delay_s": c.delay_s,
        "deleted": c.deleted,
        "recreated": c.recreated,
        "new_acknowledged": len(c.new_acks),
        "cross_agent_rows": c.cross_agent_rows,
    }
