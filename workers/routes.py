"""Queues and which task goes where. One worker pool per queue (ARCHITECTURE.md §9), so long
ingestion never delays an eviction that is holding an agent's window."""

from __future__ import annotations

from typing import Any

from kombu import Queue  # type: ignore[attr-defined]

from vcm.tasks import names

HOT = "hot"  # evictions: short, latency-sensitive (a placeholder sits in the window until done)
COLD = "cold"  # write-behind spooling, drift follow-ups, maintenance
INGEST = "ingest"  # embeddings and archival ingestion: long, CPU-heavy
QUEUES = (HOT, COLD, INGEST)

ROUTES: dict[str, dict[str, Any]] = {
    names.EVICT: {"queue": HOT},
    names.SPOOL: {"queue": COLD},
    names.SWEEP: {"queue": COLD},
    names.SWEEP_CONFIRM: {"queue": COLD},
    names.EXPIRE: {"queue": COLD},
    names.DEAD_LETTER: {"queue": COLD},
    "tasks.drift*": {"queue": COLD},
    names.INGEST: {"queue": INGEST},
    names.REEMBED: {"queue": INGEST},
    "tasks.ingest*": {"queue": INGEST},
    "tasks.embed*": {"queue": INGEST},
}


def queues() -> tuple[Queue, ...]:
    return tuple(Queue(name, routing_key=name) for name in QUEUES)  # type: ignore[no-untyped-call]
