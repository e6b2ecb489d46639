"""The chaos run's counting rules and its two added cases (``scripts/chaos.py``).

* :func:`classify`: where each acknowledged append ended: *kept* (stored, or in the FIFO),
  *pending* (still in a pending eviction batch in Redis: the cold path has not drained, which is
  not a loss), *lost within the contract* (gone, but acknowledged inside the loss window of a
  fault that may take it: write-behind's window before a hot-state ``FLUSHDB``, the AOF's fsync
  second before a Redis crash) or *lost*.
* :class:`Retrier`: after the load, every acknowledged key is sent again: a kept one must replay
  its first answer, one lost within the window appends once; never a second copy.
* :class:`DeleteCycles`: delete an agent while its eviction is in flight, re-create the id at once
  and append to the new agent; afterwards :func:`cross_agent_rows` counts what of the old agent
  the new one holds (messages, facts, summaries, context).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from vcm.errors import VcmError
from vcm.eval.chaos_load import MARK, Ack, Agent, Client, Connect, retryable

# Words only a deleted agent's messages carry: any row of the re-created agent holding one of
# them came from the deleted one.
OLD_MARK = "chaos-old"
OLD_WORDS = ("Oldrik", "Vetusta")


# --- counting -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LossWindow:
    """How long before a fault an acknowledged append may be lost within the contract."""

    flushdb_s: float  # write-behind's window (write_behind_max_s) plus slack for the store write
    redis_crash_s: float  # the AOF's fsync interval (1 s), within the window, plus slack
    # An append in flight when the fault hit: written to Redis before it, acknowledged just after.
    in_flight_s: float = 0.5


@dataclass
class Classified:
    kept: int = 0
    pending: list[Ack] = field(default_factory=list)
    lost_within_window: list[Ack] = field(default_factory=list)
    lost: list[Ack] = field(default_factory=list)


def classify(
    acks: Iterable[Ack],
    *,
    stored: Mapping[str, Mapping[str, str]],
    fifo: Mapping[str, Mapping[str, str]],
    pending: Mapping[str, Mapping[str, str]],
    faults: Sequence[tuple[float, str]],
    window: LossWindow,
) -> Classified:
    """Each ack by where its (message id, content) is: ``stored``, ``fifo`` and ``pending`` map
    agent -> message id -> content (pending: messages of eviction batches still in Redis);
    ``faults`` are (monotonic time, kind) of the faults that may lose data (``flushdb``,
    ``redis_crash``)."""
    out = Classified()
    for ack in acks:
        if (
            stored.get(ack.agent, {}).get(ack.message_id) == ack.content
            or fifo.get(ack.agent, {}).get(ack.message_id) == ack.content
        ):
            out.kept += 1
        elif pending.get(ack.agent, {}).get(ack.message_id) == ack.content:
            out.pending.append(ack)
        elif any(-window.in_flight_s <= at - ack.acked_at <= _reach(kind, window) for at, kind in faults):
            out.lost_within_window.append(ack)
        else:
            out.lost.append(ack)
    return out


def _reach(kind: str, window: LossWindow) -> float:
    if kind == "flushdb":
        return window.flushdb_s
    if kind == "redis_crash":
        return window.redis_crash_s
    return -1.0


def twin_violations(violations: Iterable[Mapping[str, Any]], classified: Classified) -> tuple[list[Any], list[Any]]:
    """Twin sends that got two messages, split: those where one of the two was lost within the
    window (its key went with it, so the other send appended it once: the contract) and the rest."""
    lost = {(a.agent, a.message_id) for a in classified.lost_within_window}
    within = [v for v in violations if any((v.get("agent"), i) in lost for i in v.get("ids", ()))]
    return [v for v in violations if v not in within], within


@dataclass(frozen=True)
class Retried:
    ack: Ack
    replayed: bool
    message_id: str | None  # None: refused or abandoned


def retry_outcomes(retried: Iterable[Retried], classified: Classified) -> dict[str, int]:
    """How the retries of acknowledged keys answered: a kept message's key must replay (a
    ``duplicated_by_retry`` otherwise), a lost one's appends once (``reappended``)."""
    lost = {(a.agent, a.key) for a in [*classified.lost, *classified.lost_within_window]}
    out = {"sent": 0, "replayed": 0, "reappended": 0, "duplicated_by_retry": 0, "wrong_id": 0, "failed": 0}
    for r in retried:
        out["sent"] += 1
        if r.message_id is None:
            out["failed"] += 1
        elif (r.ack.agent, r.ack.key) in lost:
            out["reappended" if not r.replayed else "replayed"] += 1
        elif not r.replayed:
            out["duplicated_by_retry"] += 1
        elif r.message_id != r.ack.message_id:
            out["wrong_id"] += 1
        else:
            out["replayed"] += 1
    return out


# --- retrying every acknowledged key ------------------------------------------------------------
class Retrier:
    """Sends every acknowledged key once more (same content, role and key), one thread per agent,
    each request retried on transport errors and 5xx until answered or ``deadline_s`` passes."""

    def __init__(self, agents: Sequence[Agent], urls: Sequence[str], connect: Connect, timeout_s: float) -> None:
        self.tokens = {a.agent_id: a.token for a in agents}
        self.urls = list(urls)
        self.connect = connect
        self.timeout_s = timeout_s
        self.results: list[Retried] = []
        self._lock = threading.Lock()

    def run(self, acks: Sequence[Ack], deadline_s: float) -> list[Retried]:
        by_agent: dict[str, list[Ack]] = {}
        for ack in acks:
            by_agent.setdefault(ack.agent, []).append(ack)
        give_up = time.monotonic() + deadline_s
        threads = [
            threading.Thread(target=self._agent, args=(agent, mine, give_up), daemon=True)
            for agent, mine in by_agent.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(1.0, give_up - time.monotonic()) + self.timeout_s)
        return list(self.results)

    def _agent(self, agent_id: str, acks: Sequence[Ack], give_up: float) -> None:
        clients = [self.connect(url, self.tokens[agent_id], self.timeout_s) for url in self.urls]
        try:
            for i, ack in enumerate(acks):
                body = persist(appending(ack.agent, ack.role, ack.content, ack.key), clients, give_up, start=i)
                result = Retried(
                    ack,
                    bool(body.get("replayed")) if body else False,
                    str(body["message_id"]) if body else None,
                )
                with self._lock:
                    self.results.append(result)
        finally:
            for c in clients:
                c.close()


def appending(agent_id: str, role: str, content: str, key: str) -> Callable[[Client], dict[str, Any]]:
    """One keyed append, to send through :func:`persist`."""

    def call(client: Client) -> dict[str, Any]:
        return client.append(agent_id, role, content, idempotency_key=key)

    return call


def persist(
    call: Callable[[Client], dict[str, Any]], clients: Sequence[Client], give_up: float, *, start: int = 0
) -> dict[str, Any] | None:
    """``call`` on one client after another until one answers (None: refused, or ``give_up``
    passed); transport errors, 5xx and 429 are retried."""
    attempt = 0
    while True:
        client = clients[(start + attempt) % len(clients)]
        attempt += 1
        try:
            return call(client)
        except httpx.TransportError:
            pass
        except VcmError as exc:
            if not retryable(exc):
                return None
        if time.monotonic() > give_up:
            return None
        time.sleep(min(0.5, 0.025 * 2 ** min(attempt, 5)))


# --- delete during an eviction ------------------------------------------------------------------
@dataclass
class Cycle:
    agent_id: str
    old_appends: int = 0
    batch_after: int | None = None  # the old agent's append that began an eviction batch
    delay_s: float = 0.0  # from that append to the delete
    deleted: bool = False
    recreated: bool = False
    new_acks: list[Ack] = field(default_factory=list)
    token: str = ""
    cross_agent_rows: int = 0  # texts of the deleted agent its successor holds (counted at the end)


class DeleteCycles:
    """For each cycle: create an agent, append until an eviction batch begins (its commit is then
    in flight in a worker), wait a random delay, delete the agent, re-create the same id at once
    and append ``new_appends`` keyed messages to the new agent (acknowledged ones are returned to
    the run's loss and duplicate checks)."""

    def __init__(
        self,
        run_id: str,
        urls: Sequence[str],
        admin_token: str,
        connect: Connect,
        *,
        model: str,
        rng: random.Random,
        timeout_s: float,
        max_delay_s: float = 2.5,
        new_appends: int = 8,
    ) -> None:
        self.run_id = run_id
        self.urls = list(urls)
        self.admin_token = admin_token
        self.connect = connect
        self.model = model
        self.rng = rng
        self.timeout_s = timeout_s
        self.max_delay_s = max_delay_s
        self.new_appends = new_appends

    def run(self, cycles: int, deadline_s: float) -> list[Cycle]:
        give_up = time.monotonic() + deadline_s
        admins = [self.connect(url, self.admin_token, self.timeout_s) for url in self.urls]
        try:
            return [self._cycle(admins, i, give_up) for i in range(cycles)]
        finally:
            for c in admins:
                c.close()

    def _cycle(self, admins: Sequence[Client], i: int, give_up: float) -> Cycle:
        cycle = Cycle(f"chaos-{self.run_id}-del{i}")
        aid = cycle.agent_id
        body = persist(
            lambda c: c.create_agent(aid, model=self.model, system_prompt="You are a travel assistant."),
            admins,
            give_up,
        )
        if body is None or not body.get("token"):  # refused, or a replayed creation (no token)
            return cycle
        clients = [self.connect(url, str(body["token"]), self.timeout_s) for url in self.urls]
        try:
            began_at = None
            for n in range(1, 400):
                text = old_content(aid, n)
                reply = persist(appending(aid, "user", text, f"{aid}.old.{n}"), clients, give_up)
                if reply is None:
                    break
                cycle.old_appends = n
                if isinstance(reply.get("batch"), dict):
                    cycle.batch_after, began_at = n, time.monotonic()
                    break
        finally:
            for c in clients:
                c.close()
        if began_at is not None:
            time.sleep(self.rng.uniform(0.0, self.max_delay_s))
            cycle.delay_s = round(time.monotonic() - began_at, 3)
        cycle.deleted = persist(lambda c: c.delete_agent(aid), admins, give_up) is not None
        again = persist(
            lambda c: c.create_agent(aid, model=self.model, system_prompt="You are a travel assistant."),
            admins,
            give_up,
        )
        if again is None or not again.get("token"):
            return cycle
        cycle.recreated, cycle.token = True, str(again["token"])
        clients = [self.connect(url, cycle.token, self.timeout_s) for url in self.urls]
        try:
            for n in range(1, self.new_appends + 1):
                key, role = f"{aid}.new.{n}", "user" if n % 2 else "assistant"
                text = f"[{MARK} {key}] Nadia booked the ferry to Bergen on day {n} for {20 + n} euros."
                started = time.monotonic()
                reply = persist(appending(aid, role, text, key), clients, give_up)
                if reply is None:
                    continue
                cycle.new_acks.append(
                    Ack(aid, key, text, str(reply["message_id"]), int(reply["seq"]), 1, bool(reply.get("replayed")),
                        None, time.monotonic() - started, role=role, acked_at=time.monotonic())
                )  # fmt: skip
        finally:
            for c in clients:
                c.close()
        return cycle


def old_content(agent_id: str, n: int) -> str:
    """A deleted agent's message: its marker and words no other message of the run uses."""
    return (
        f"[{OLD_MARK} {agent_id}.{n}] {OLD_WORDS[0]} moved to {OLD_WORDS[1]} on day {n} and said the "
        f"guest house cost {100 + n} euros. {OLD_WORDS[0]} asked about {OLD_WORDS[1]} for the next trip."
    )


def holds_old(text: str) -> bool:
    return OLD_MARK in text or any(w in text for w in OLD_WORDS)


def cross_agent_rows(texts: Mapping[str, Iterable[str]]) -> dict[str, int]:
    """Per place (messages, facts, summaries, context, ...), the texts of a re-created agent that
    came from the deleted one."""
    return {place: sum(1 for t in found if holds_old(t)) for place, found in texts.items()}
