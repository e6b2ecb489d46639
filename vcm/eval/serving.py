"""Starting ``vcm serve`` for a benchmark: a free loopback port, and waiting until it answers."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_healthy(proc: subprocess.Popen[bytes], url: str, *, log: Path, timeout_s: float = 120.0) -> None:
    """Return once ``GET {url}/healthz`` answers 200; raise if the process exits first or the
    time runs out (the message ends with the log's tail)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"vcm serve exited ({proc.returncode}): {_tail(log)}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"vcm serve did not answer within {timeout_s:.0f} s: {_tail(log)}")
        time.sleep(0.2)


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-2000:]
    except OSError:
        return f"(no log at {log})"
