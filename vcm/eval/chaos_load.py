"""The chaos run's load: agents, appender threads that write through the client and count every
acknowledged write, and the records the checks read (acks, tallies, faults)."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from vcm.errors import VcmError

BIN = Path(sys.executable).parent
HOST = "127.0.0.1"
HOT_DB, BROKER_DB = 0, 1
# Content marker of this run's messages: notices vcm appends itself never carry it.
MARK = "chaos"

# Options echoed in the report.
CONFIG_KEYS = ("duration", "agents", "appenders", "apis", "workers", "pool", "model", "seed", "pause", "no_vectors")

SUBJECTS = ["Alice", "Bob", "Carmen", "Dmitri", "Esther", "Farid", "Greta", "Hiro"]
VERBS = ["moved to", "visited", "wrote about", "asked about", "planned a trip to", "remembered"]
PLACES = ["Porto", "Lyon", "Kyoto", "Recife", "Tallinn", "Accra", "Hobart", "Quito", "Bergen"]
THINGS = ["train ticket", "guest house", "bicycle", "museum pass", "cooking class", "ferry"]


@dataclass(frozen=True)
class Ack:
    agent: str
    key: str
    content: str
    message_id: str
    seq: int
    attempts: int
    replayed: bool
    batch: int | None  # the eviction batch this append's reply says it began
    wait_s: float  # first attempt to acknowledgement
    role: str = "user"
    acked_at: float = 0.0  # time.monotonic() when the acknowledgement arrived


@dataclass
class Tally:
    """What the appenders saw; shared by their threads."""

    acks: list[Ack] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    abandoned: list[dict[str, str]] = field(default_factory=list)
    twin_sends: int = 0
    idempotency_violations: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def error(self, kind: str) -> None:
        with self.lock:
            self.errors[kind] += 1

    def twins(self, a: Ack | None, b: Ack | None) -> None:
        """Two concurrent sends of one key: one message, written once."""
        with self.lock:
            self.twin_sends += 1
            if a is None or b is None:
                return
            if a.message_id != b.message_id or not (a.replayed or b.replayed):
                self.idempotency_violations.append(
                    {
                        "agent": a.agent,
                        "key": a.key,
                        "ids": [a.message_id, b.message_id],
                        "replayed": [a.replayed, b.replayed],
                    }
                )


@dataclass(frozen=True)
class Fault:
    at_s: float  # since the load started
    kind: str  # worker_kill | api_kill | redis_crash | flushdb
    target: str
    detail: str = ""


@dataclass(frozen=True)
class Agent:
    agent_id: str
    token: str


def content_for(key: str, n: int, rng: random.Random) -> str:
    """A unique, sentence-shaped message (~40 tokens), so the extractive summariser has real
    sentences to pick from and evictions come every few dozen appends in a 2k window."""
    s1, s2 = rng.sample(SUBJECTS, 2)
    p1, p2 = rng.sample(PLACES, 2)
    return (
        f"[{MARK} {key}] {s1} {rng.choice(VERBS)} {p1} on day {n} and said the {rng.choice(THINGS)} "
        f"cost {rng.randint(5, 400)} euros. {s2} agreed, and asked about {p2} for the next trip."
    )


def retryable(exc: VcmError) -> bool:
    # 5xx: the API or Redis is down or restarting; 429: back-pressure; TOKEN_BUDGET_EXCEEDED: a
    # refusal that frees up once the cold path installs its summaries (pending batches share one
    # placeholder, so it is rare; retrying it keeps the exactly-once audit meaningful).
    return exc.status >= 500 or exc.status == 429 or str(exc.code) == "TOKEN_BUDGET_EXCEEDED"


class Client(Protocol):
    """What the run needs of a client (:class:`vcm.client.VcmClient`, passed in by the script:
    this layer does not import the client)."""

    def append(
        self, agent_id: str, role: str, content: str, *, idempotency_key: str | None = None
    ) -> dict[str, Any]: ...
    def create_agent(self, agent_id: str, *, model: str | None = None, system_prompt: str = "") -> dict[str, Any]: ...
    def context(self, agent_id: str) -> dict[str, Any]: ...
    def delete_agent(self, agent_id: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


# (base URL, token, timeout in seconds) -> a client.
Connect = Callable[[str, str, float], Client]


class Appender(threading.Thread):
    """Appends keyed messages to one agent until told to stop; each key is retried, on any API,
    until a 2xx acknowledges it (or the settle deadline passes after the stop).

    A share of the keys (``twins``) is sent twice at once, to both APIs, as a client does that
    retries on a timeout while its first request still runs: both replies must name the same
    message, and at most one may say it was not a replay."""

    def __init__(
        self,
        agent: Agent,
        index: int,
        urls: Sequence[str],
        tally: Tally,
        stop: threading.Event,
        give_up_at: list[float],
        *,
        connect: Connect,
        pause_s: float,
        timeout_s: float,
        twins: float,
        seed: int,
    ) -> None:
        super().__init__(name=f"append-{agent.agent_id}-{index}", daemon=True)
        self.agent = agent
        self.index = index
        self.urls = list(urls)
        self.tally = tally
        self.stop = stop
        self.give_up_at = give_up_at  # [monotonic deadline], set by the main thread at the stop
        self.pause_s = pause_s
        self.timeout_s = timeout_s
        self.twins = twins
        self.rng = random.Random(seed)
        self.connect = connect

    def clients(self) -> list[Client]:
        return [self.connect(url, self.agent.token, self.timeout_s) for url in self.urls]

    def run(self) -> None:
        clients = self.clients()
        try:
            n = 0
            while not self.stop.is_set():
                n += 1
                key = f"{self.agent.agent_id}.{self.index}.{n}"
                role = "user" if n % 2 else "assistant"
                self.send(clients, key, role, content_for(key, n, self.rng))
                time.sleep(self.pause_s * self.rng.uniform(0.5, 1.5))
        finally:
            for c in clients:
                c.close()

    def send(self, clients: Sequence[Client], key: str, role: str, content: str) -> None:
        api = self.rng.randrange(len(clients))
        twin: list[Ack | None] = [None]
        helper: threading.Thread | None = None
        if self.rng.random() < self.twins:
            rng = random.Random(self.rng.random())

            def other() -> None:
                # Its own clients: the twin must not wait for the first request's connection.
                own = self.clients()
                try:
                    twin[0] = self.until_acked(own, key, role, content, (api + 1) % len(own), rng)
                finally:
                    for c in own:
                        c.close()

            helper = threading.Thread(target=other, name=f"{self.name}-twin", daemon=True)
            helper.start()
        ack = self.until_acked(clients, key, role, content, api, self.rng)
        if helper is not None:
            helper.join()
            self.tally.twins(ack, twin[0])
            ack = ack or twin[0]
        if ack is not None:
            with self.tally.lock:
                self.tally.acks.append(ack)

    def until_acked(
        self, clients: Sequence[Client], key: str, role: str, content: str, api: int, rng: random.Random
    ) -> Ack | None:
        """The acknowledgement of this key, or None when it was refused or abandoned (recorded)."""
        first = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                body = clients[api].append(self.agent.agent_id, role, content, idempotency_key=key)
            except httpx.TransportError as exc:  # refused, reset mid-request, timed out
                self.tally.error(f"transport:{type(exc).__name__}")
            except VcmError as exc:
                if not retryable(exc):
                    with self.tally.lock:
                        self.tally.rejected.append(
                            {"agent": self.agent.agent_id, "key": key, "status": exc.status, "code": str(exc.code)}
                        )
                    return None
                self.tally.error(f"http:{exc.status}:{exc.code}")
            else:
                batch = body.get("batch")
                return Ack(
                    agent=self.agent.agent_id,
                    key=key,
                    content=content,
                    message_id=str(body["message_id"]),
                    seq=int(body["seq"]),
                    attempts=attempt,
                    replayed=bool(body.get("replayed")),
                    batch=int(batch["id"]) if isinstance(batch, dict) else None,
                    wait_s=time.monotonic() - first,
                    role=role,
                    acked_at=time.monotonic(),
                )
            if self.stop.is_set() and time.monotonic() > self.give_up_at[0]:
                with self.tally.lock:
                    self.tally.abandoned.append({"agent": self.agent.agent_id, "key": key})
                return None
            # Another API next: the one that failed may be the one being restarted.
            api = (api + 1) % len(clients)
            time.sleep(min(0.5, 0.025 * 2 ** min(attempt, 5)) * rng.uniform(0.5, 1.0))
