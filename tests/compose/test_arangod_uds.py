"""compose/arangod-uds, the arangodb service's entrypoint, run for real by `sh` with a stand-in for
the image's /entrypoint.sh: the stand-in records how it was called, creates the Unix socket as
arangod would (mode 0777 & ~umask) and waits for arangod-uds to make it 0660."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.compose import stack

SCRIPT = stack.COMPOSE_DIR / "arangod-uds"
COMPOSE_SOCKET = "unix:///run/arangodb/arangod.sock"

# Stand-in for /entrypoint.sh: binds the socket named by --server.endpoint, then reports what it saw.
FAKE_ENTRYPOINT = """#!{python}
import json, os, socket, stat, sys, time
args = sys.argv[1:]
pairs = [a.split("=", 1)[1] for a in args if a.startswith("--server.endpoint=")]
pairs += [b for a, b in zip(args, args[1:]) if a == "--server.endpoint"]
path = pairs[0].removeprefix("unix://")
record = {{"argv": args, "pid": os.getpid(), "stale_before_bind": os.path.lexists(path)}}
os.umask(0o022)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(1)
record["mode_at_bind"] = stat.S_IMODE(os.stat(path).st_mode)
deadline = time.monotonic() + 10
while stat.S_IMODE(os.stat(path).st_mode) != 0o660 and time.monotonic() < deadline:
    time.sleep(0.05)
record["mode"] = stat.S_IMODE(os.stat(path).st_mode)
record["dir_mode"] = stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)
with open(os.environ["STUB_LOG"], "w") as fh:
    json.dump(record, fh)
"""


@dataclass
class Run:
    returncode: int
    stderr: str
    record: dict[str, Any] | None  # None: the entrypoint never ran
    pid: int


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="vcm-uds-"))  # AF_UNIX paths must stay short
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Any]:
    entrypoint = tmp_path / "entrypoint.sh"
    entrypoint.write_text(FAKE_ENTRYPOINT.format(python=sys.executable))
    entrypoint.chmod(0o755)
    log = tmp_path / "entrypoint.json"

    err = tmp_path / "stderr"

    def go(*args: str) -> Run:
        log.unlink(missing_ok=True)
        env = {"PATH": "/usr/bin:/bin", "STUB_LOG": str(log), "ARANGOD_UDS_ENTRYPOINT": str(entrypoint)}
        # stderr to a file: the background helper keeps it open until the socket is there
        with err.open("w") as fh, subprocess.Popen(["sh", str(SCRIPT), *args], env=env, stderr=fh) as proc:
            proc.wait(timeout=30)
        record = json.loads(log.read_text()) if log.exists() else None
        return Run(proc.returncode, err.read_text(), record, proc.pid)

    yield go


def _compose_command(socket: Path) -> list[str]:
    """The arangodb service's command, with its socket moved to ``socket``."""
    cmd = stack.interpolate(stack.command(stack.services()["arangodb"]), stack.env_example())
    assert f"--server.endpoint={COMPOSE_SOCKET}" in cmd
    return [c.replace(COMPOSE_SOCKET, f"unix://{socket}") for c in cmd]


def test_the_compose_command_starts_arangod_with_a_0660_socket_in_a_0700_directory(run: Any, socket_dir: Path) -> None:
    socket = socket_dir / "arangod.sock"
    socket.write_text("stale")  # left by the last run in the socket volume
    cmd = _compose_command(socket)
    result = run(*cmd)
    assert result.returncode == 0, result.stderr
    record = result.record
    assert record is not None
    assert record["argv"] == cmd  # the image's entrypoint gets the arguments unchanged
    assert record["pid"] == result.pid, "arangod-uds must exec the entrypoint (signals reach arangod)"
    assert record["stale_before_bind"] is False
    assert record["mode_at_bind"] == 0o755  # what arangod leaves, and arangod-uds fixes
    assert record["mode"] == 0o660
    assert record["dir_mode"] == 0o700
    assert stat.S_ISSOCK(os.lstat(socket).st_mode)


def test_the_endpoint_may_be_given_as_two_arguments(run: Any, socket_dir: Path) -> None:
    socket = socket_dir / "arangod.sock"
    result = run("--vector-index=true", "--server.endpoint", f"unix://{socket}")
    assert result.returncode == 0, result.stderr
    assert result.record is not None and result.record["mode"] == 0o660


@pytest.mark.parametrize(
    "endpoints",
    [
        ["tcp://127.0.0.1:8529"],
        ["tcp://0.0.0.0:8529"],
        ["ssl://127.0.0.1:8530"],
        ["http://127.0.0.1:8529"],
        ["http+tcp://127.0.0.1:8529"],
        ["unix://relative.sock"],
        ["unix:///tmp/vcm-a.sock", "tcp://127.0.0.1:8529"],
        ["unix:///tmp/vcm-a.sock", "unix:///tmp/vcm-b.sock"],
        [],
    ],
)
def test_anything_but_one_unix_endpoint_is_refused_before_arangod_starts(
    endpoints: list[str], run: Any, socket_dir: Path
) -> None:
    args = ["--vector-index=true", *(f"--server.endpoint={e}" for e in endpoints)]
    result = run(*args)
    assert result.returncode == 64
    assert result.record is None  # the image's entrypoint never ran
    assert "arangod-uds:" in result.stderr


def test_an_endpoint_option_without_a_value_is_refused(run: Any) -> None:
    result = run("--vector-index=true", "--server.endpoint")
    assert result.returncode == 64 and result.record is None


def test_arangod_uds_is_strict_posix_sh() -> None:
    text = SCRIPT.read_text()
    assert text.splitlines()[0] == "#!/bin/sh"  # the arangodb image has busybox sh, no bash
    assert "\nset -eu\n" in text
    subprocess.run(["sh", "-n", str(SCRIPT)], check=True)
