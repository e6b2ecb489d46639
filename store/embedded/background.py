"""A thread that sleeps until woken: the embedded store's background work (the text indexer,
the index upkeep) runs on one each, started by the first wake-up so a process that never needs
the work never starts it. Both run at a lower CPU priority (:data:`NICE` more than the thread
that first woke them, a request's), so where queries want the cores the work is using, the work
gets about a tenth of a core (the scheduler's weight for nice 10 is 110 against 1024)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading

NICE = 10  # how much lower a background thread's CPU priority is than its starter's


class Wakeable:
    """Starts :meth:`_run` on a daemon thread named ``name`` at the first :meth:`notify` (and again
    in a forked child, which inherits the attribute but not the thread); :meth:`stop` ends it."""

    def __init__(self, name: str, *, nice: int = NICE) -> None:
        self._name = name
        self._nice = nice
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
                self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
                self._thread.start()
        self._wake.set()

    def _main(self) -> None:
        # Before any work: threads the work starts (tantivy's writer threads, FAISS's OpenMP
        # ones) inherit the priority from this thread.
        lower_priority(self._nice)
        self._run()

    def _run(self) -> None:  # pragma: no cover - each subclass has its own loop
        raise NotImplementedError

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        with self._thread_lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)


def lower_priority(nice: int) -> None:
    """Raise the calling thread's nice value by ``nice`` (Linux, where it is the thread's own;
    elsewhere a thread id is not a process id, and nothing is changed)."""
    if sys.platform != "linux" or nice <= 0:
        return
    me = threading.get_native_id()
    with contextlib.suppress(OSError):  # a sandbox that refuses it: run at the process's priority
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + nice))
