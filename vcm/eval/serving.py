"""Starting ``vcm serve`` for a benchmark: a free loopback port, and waiting until it answers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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


@contextmanager
def vcm_serve(
    vcm: Path, store_dir: Path, *, admin_token: str, env: Mapping[str, str], log: Path, cwd: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``vcm serve`` on a free loopback port with a SQLite store in ``store_dir``, the caller's
    ``env`` over a clean one (no ``VCM_*`` of the caller's), until it answers; stopped with
    SIGINT (killed after 20 s) on the way out. Yields the process and its URL."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VCM_")}
    clean.update(
        {
            "VCM_API__ADMIN_TOKEN": admin_token,
            "VCM_STORE_URL": f"sqlite:///{store_dir / 'vcm.db'}",
            "VCM_LOG_LEVEL": "WARNING",
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            **env,
        }
    )
    store_dir.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(vcm), "serve", "--host", "127.0.0.1", "--port", str(port)], env=clean, stdout=out, stderr=out, cwd=cwd
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url, log=log)
        yield proc, url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-2000:]
    except OSError:
        return f"(no log at {log})"
