"""What ``/healthz`` answers: the last probe of Redis and the store, kept in memory.

A liveness probe is asked every few seconds by every orchestrator, load balancer and benchmark;
probing Redis and the store on each ask made it cost more than an append (a PING plus the
store's own health query). So the report is cached: a request older than ``max_age_s`` after the
last probe starts one new probe in a background thread (one at a time) and is answered with the
report at hand; only the very first request waits for a probe. A probe that hangs (a Redis that
stopped answering) shows as ``ok: false`` once the report is ``stale_after_s`` old, so a hung
dependency is not hidden behind an old answer. ``/readyz`` probes on every request, for callers
that need the state of this instant.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Probe = Callable[[], dict[str, Any]]


class HealthCache:
    def __init__(
        self,
        probe: Probe,
        *,
        max_age_s: float = 1.0,
        stale_after_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self.max_age_s = max_age_s
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._report: dict[str, Any] | None = None
        self._at = 0.0
        self._refreshing = False

    def cached(self) -> dict[str, Any] | None:
        """The report at hand (None before the first probe); starts a refresh when it is old."""
        with self._lock:
            report, age = self._report, self._clock() - self._at
            if report is not None and age > self.max_age_s and not self._refreshing:
                self._refreshing = True
                threading.Thread(target=self._refresh_quietly, name="vcm-health", daemon=True).start()
        if report is not None and age > self.stale_after_s:
            return {**report, "ok": False}
        return report

    def refresh(self) -> dict[str, Any]:
        """Probe now, keep the report, and return it."""
        report = self._probe()
        with self._lock:
            self._report, self._at = report, self._clock()
        return report

    def _refresh_quietly(self) -> None:
        try:
            self.refresh()
        except Exception:  # the probe reports failures itself; this is a bug, the next ask retries
            log.exception("health probe failed")
        finally:
            with self._lock:
                self._refreshing = False
