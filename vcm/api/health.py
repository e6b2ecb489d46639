"""What ``/healthz`` answers: the last probe of Redis and the store, kept in memory.

A liveness probe is asked every few seconds by every orchestrator, load balancer and benchmark;
probing Redis and the store on each ask made it cost more than an append (a PING plus the
store's own health query). So the report is cached: a request older than ``max_age_s`` after the
last probe starts one new probe in a background thread (one at a time) and is answered with the
report at hand. No answer comes from a report older than ``stale_after_s``: when nobody asked for
that long (an idle server, probed every 10-15 s by compose) the request probes itself, as the
very first one does; when the probe in flight has not come back for that long (a Redis that
stopped answering) the answer is ``ok: false``, so a hung dependency is not hidden behind an old
answer. ``/readyz`` probes on every request, for callers
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
        self._refreshing_since: float | None = None  # when the background probe in flight started

    def cached(self) -> dict[str, Any] | None:
        """The report at hand; starts a background refresh when it is old. None when the caller
        must probe now (:meth:`refresh`): nothing probed yet, or the report is ``stale_after_s``
        old with no probe hanging (the server was idle)."""
        with self._lock:
            now = self._clock()
            report, age, since = self._report, now - self._at, self._refreshing_since
            if report is None:
                return None
            if age <= self.max_age_s:
                return report
            if age > self.stale_after_s:
                # Too old to answer with. A probe in flight all this while hangs; with none in
                # flight the server was idle, and the caller probes now.
                return {**report, "ok": False} if since is not None else None
            if since is None:
                self._refreshing_since = now
                threading.Thread(target=self._refresh_quietly, name="vcm-health", daemon=True).start()
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
                self._refreshing_since = None
