"""Queues and which task goes where. One worker pool per queue (docs/architecture.md,
"Scale-out"), so long ingestion never delays an eviction that is holding an agent's window."""

from __future__ import annotations

from typing import Any

from kombu import Queue  # type: ignore[attr-defined]

from vcm.workers import names

HOT = "hot"  # evictions: short, latency-sensitive (a placeholder sits in the window until done)
COLD = "cold"  # write-behind spooling, drift follow-ups
INGEST = "ingest"  # embeddings and archival ingestion: long, CPU-heavy
# The sweeper, retention expiry and dead-letter records: few and short, but they are what repairs
# a backlog (re-driving stuck batches, missed spools), so they must never wait behind one.
MAINTENANCE = "maintenance"
QUEUES = (HOT, COLD, INGEST, MAINTENANCE)

ROUTES: dict[str, dict[str, Any]] = {
    names.EVICT: {"queue": HOT},
    names.SPOOL: {"queue": COLD},
    names.SPOOL_MANY: {"queue": COLD},
    names.SWEEP: {"queue": MAINTENANCE},
    names.SWEEP_CONFIRM: {"queue": MAINTENANCE},
    names.EXPIRE: {"queue": MAINTENANCE},
    names.SNAPSHOT: {"queue": MAINTENANCE},
    names.CONSOLIDATE: {"queue": MAINTENANCE},
    names.DEAD_LETTER: {"queue": MAINTENANCE},
    "tasks.drift*": {"queue": COLD},
    names.INGEST: {"queue": INGEST},
    names.REEMBED: {"queue": INGEST},
    "tasks.ingest*": {"queue": INGEST},
    "tasks.embed*": {"queue": INGEST},
}


def queues() -> tuple[Queue, ...]:
    return tuple(Queue(name, routing_key=name) for name in QUEUES)  # type: ignore[no-untyped-call]
