"""A thread that sleeps until woken: the embedded store's background work (the text indexer,
the index upkeep) runs on one each, started by the first wake-up so a process that never needs
the work never starts it."""

from __future__ import annotations

import threading


class Wakeable:
    """Starts :meth:`_run` on a daemon thread named ``name`` at the first :meth:`notify` (and again
    in a forked child, which inherits the attribute but not the thread); :meth:`stop` ends it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self.passes = 0
        self.last_error: str | None = None

    def notify(self) -> None:
        """Something is due: run a pass soon, off the caller's thread."""
        if self._stop.is_set():
            return
        with self._thread_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:  # pragma: no cover - each subclass has its own loop
        raise NotImplementedError

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        with self._thread_lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
