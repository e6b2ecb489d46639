"""The embedded store's upkeep thread: index work that used to run inside queries.

A query neither trains, catches up, persists nor reloads: it notes that something is due and
wakes this thread (:meth:`IndexUpkeep.notify`), which then, a short debounce later (so a burst
of queries and writes costs one pass):

* reloads the tantivy searcher when the text index's generation moved on
  (:meth:`vcm.store.embedded.textindex.TextIndex.refresh`); queries meanwhile use the loaded
  searcher with the mark it was loaded at and score the longer tail from SQLite;
* runs :meth:`MessageVectorIndexes.maintain` on every message space loaded in this process
  (load, build or retrain, catch up, persist); queries meanwhile search the index as applied
  plus the bounded tail.

It also wakes every ``interval_s`` while the store is open, so rows written by other processes
are indexed even when no query asks. It starts on the first notification: a process that only
writes (a cold-path worker) never builds a message index. FAISS work here uses
``threads`` OpenMP threads (default: all cores but one, so a query always has a core), and the
thread runs at a lower CPU priority (``nice``, Linux: a thread's own; its OpenMP threads inherit
it; :class:`~vcm.store.embedded.background.Wakeable`), so queries come first whenever they want
the cores it is using.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import faiss

from vcm.store.embedded.background import Wakeable
from vcm.store.embedded.messageindex import MessageVectorIndexes

log = logging.getLogger(__name__)

_PASSES_PER_SPACE = 4


class IndexUpkeep(Wakeable):
    def __init__(
        self,
        messages: MessageVectorIndexes,
        reload_text: Callable[[], None],
        *,
        interval_s: float = 1.0,
        debounce_s: float = 0.1,
        threads: int | None = None,
    ) -> None:
        self._messages = messages
        self._reload_text = reload_text
        self._interval_s = interval_s
        self._debounce_s = debounce_s
        self._threads = threads if threads is not None else max(1, (os.cpu_count() or 2) - 1)
        super().__init__("vcm-index-upkeep")

    def run_once(self) -> None:
        """One pass in the caller's thread (the upkeep thread's body; tests and flushes)."""
        try:
            self._reload_text()
        except Exception as exc:  # the text index is checked by health; recall reads the tail
            log.warning("text index reload failed, will retry: %s", exc)
            self.last_error = str(exc)
        for key in self._messages.loaded_keys():
            if self._stop.is_set():
                return
            try:
                for _ in range(_PASSES_PER_SPACE):  # bounded: a busy writer must not starve other spaces
                    if self._stop.is_set() or not self._messages.maintain(key):
                        break
            except Exception as exc:  # keep the thread alive; queries serve the index + tail meanwhile
                log.warning("message index upkeep of %s failed, will retry: %s", key, exc)
                self.last_error = str(exc)
        self.passes += 1

    def _run(self) -> None:
        faiss.omp_set_num_threads(self._threads)  # this thread's OpenMP setting only
        # At a lower priority (Wakeable), index work yields to queries: the first 100 hybrid
        # queries after a 1e6 bulk load, beside the build, p50 / p99 7.9 / 28.6 -> 6.0 / 12.2 ms
        # (scripts/bench_store.py).
        while not self._stop.is_set():
            self._wake.wait(timeout=self._interval_s)
            if self._stop.is_set():
                return
            self._stop.wait(self._debounce_s)
            self._wake.clear()
            self.run_once()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._messages.close()
        super().stop(timeout_s)
