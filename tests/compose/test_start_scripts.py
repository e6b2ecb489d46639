"""The start scripts, run for real with stand-in programs: each script is run by `sh` with a PATH
whose `celery`, `vcm` and `python` only record how they were called, so what is checked is the
exact command line (and environment) each script hands over with `exec`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.compose import stack
from vcm.workers import routes

SCRIPTS = sorted(p.name for p in stack.COMPOSE_DIR.glob("start-*"))
EXPECTED_EXEC = {
    "start-api": ["vcm", "serve"],
    "start-worker": ["celery", "-A", "vcm.workers.app", "worker"],
    "start-beat": ["celery", "-A", "vcm.workers.app", "beat"],
    "start-flower": ["celery", "-A", "vcm.workers.app", "flower"],
    "start-init": ["python", "/opt/vcm/compose/arango_init.py"],
}
# The stand-in records its command line, environment and its shell's pid (python's parent; the
# trailing `exit` keeps sh from exec-ing python), which is the script's pid only if it used exec.
STUB = """#!/bin/sh
{python} - "$0" "$@" <<'PY'
import json, os, sys
record = {{"argv": [os.path.basename(sys.argv[1]), *sys.argv[2:]], "env": dict(os.environ), "pid": os.getppid()}}
with open(os.environ["STUB_LOG"], "w") as fh:
    json.dump(record, fh)
PY
exit $?
"""


@dataclass
class Run:
    returncode: int
    stderr: str
    argv: list[str] | None
    env: dict[str, str]
    replaced_script: bool  # the program runs in the script's process (exec)

    def option(self, name: str) -> str | None:
        """The value of the last ``name=value`` argument (the one the program keeps)."""
        assert self.argv is not None
        values = [a.split("=", 1)[1] for a in self.argv if a.startswith(name + "=")]
        return values[-1] if values else None


@pytest.fixture
def run_script(tmp_path: Path) -> Iterator[Any]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("celery", "vcm", "python"):
        stub = bin_dir / program
        stub.write_text(STUB.format(python=sys.executable))
        stub.chmod(0o755)
    log = tmp_path / "exec.json"

    def run(script: str, *args: str, env: dict[str, str] | None = None) -> Run:
        log.unlink(missing_ok=True)
        base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log), "HOME": str(tmp_path)}
        with subprocess.Popen(
            ["sh", str(stack.COMPOSE_DIR / script), *args],
            env={**base, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            _, stderr = proc.communicate(timeout=30)
        if log.exists():
            data = json.loads(log.read_text())
            return Run(proc.returncode, stderr, data["argv"], data["env"], data["pid"] == proc.pid)
        return Run(proc.returncode, stderr, None, {}, False)

    yield run


FLOWER_ENV = {"FLOWER_BASIC_AUTH": "ops:s3cret-pw"}


def _env_for(script: str) -> dict[str, str]:
    return FLOWER_ENV if script == "start-flower" else {}


def _args_for(script: str) -> list[str]:
    return ["cold"] if script == "start-worker" else []


def test_there_is_one_start_script_per_process() -> None:
    assert sorted(EXPECTED_EXEC) == SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_is_strict_posix_sh(script: str) -> None:
    text = (stack.COMPOSE_DIR / script).read_text()
    assert text.splitlines()[0] in ("#!/usr/bin/env sh", "#!/bin/sh")
    assert "\nset -eu\n" in text
    subprocess.run(["sh", "-n", str(stack.COMPOSE_DIR / script)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_scripts_pass_shellcheck() -> None:
    paths = [str(stack.COMPOSE_DIR / s) for s in [*SCRIPTS, "healthcheck-http", "arangod-uds"]]
    proc = subprocess.run(["shellcheck", "--shell=sh", *paths], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_execs_its_program(script: str, run_script: Any) -> None:
    result = run_script(script, *_args_for(script), env=_env_for(script))
    assert result.returncode == 0, result.stderr
    expected = EXPECTED_EXEC[script]
    assert result.argv[: len(expected)] == expected
    assert result.replaced_script, f"{script} must exec its program (signals from docker stop reach it)"


def test_start_api_serves_on_all_interfaces_port_8000(run_script: Any) -> None:
    result = run_script("start-api")
    assert result.argv == ["vcm", "serve", "--host", "0.0.0.0", "--port", "8000"]


@pytest.mark.parametrize("queue", routes.QUEUES)
def test_worker_consumes_only_its_queue_with_events_and_prefetch_one(queue: str, run_script: Any) -> None:
    result = run_script("start-worker", queue)
    assert result.returncode == 0, result.stderr
    argv = result.argv
    assert argv[argv.index("-Q") + 1] == queue
    assert argv[argv.index("-n") + 1] == f"{queue}@%h"
    assert "-E" in argv
    assert result.option("--prefetch-multiplier") == "1"
    assert result.option("--pool") == "prefork"
    assert not {"-B", "--beat"} & set(argv)


def test_ingest_worker_runs_one_child_with_several_torch_threads(run_script: Any) -> None:
    result = run_script("start-worker", "ingest")
    assert result.option("--concurrency") == "1"
    assert result.env["VCM_EMBEDDING__THREADS"] == "2"
    result = run_script("start-worker", "ingest", env={"INGEST_TORCH_THREADS": "6"})
    assert result.env["VCM_EMBEDDING__THREADS"] == "6"
    result = run_script("start-worker", "ingest", env={"VCM_EMBEDDING__THREADS": "3", "INGEST_TORCH_THREADS": "6"})
    assert result.env["VCM_EMBEDDING__THREADS"] == "3"  # an explicit setting wins


def test_hot_and_cold_workers_keep_one_torch_thread_per_child(run_script: Any) -> None:
    result = run_script("start-worker", "hot", env={"INGEST_TORCH_THREADS": "6"})
    assert "VCM_EMBEDDING__THREADS" not in result.env
    assert result.option("--concurrency") == "2"


def test_worker_options_given_by_compose_win(run_script: Any) -> None:
    result = run_script("start-worker", "hot", "--concurrency=7")
    assert result.option("--concurrency") == "7"
    result = run_script("start-worker", "cold", env={"WORKER_MAX_MEMORY_KB": "123456"})
    assert result.option("--max-memory-per-child") == "123456"


def test_compose_worker_commands_run(run_script: Any) -> None:
    for name in ("worker-hot", "worker-cold", "worker-ingest", "worker-maintenance"):
        cmd = stack.interpolate(stack.command(stack.services()[name]), stack.env_example())
        result = run_script(cmd[0], *cmd[1:])
        assert result.returncode == 0, result.stderr
        assert result.argv[result.argv.index("-Q") + 1] == name.removeprefix("worker-")


@pytest.mark.parametrize("args", [[], ["default"], ["hot,cold"]])
def test_worker_refuses_a_missing_or_unknown_queue(args: list[str], run_script: Any) -> None:
    result = run_script("start-worker", *args)
    assert result.returncode == 64
    assert result.argv is None  # nothing was started


def test_worker_starts_with_a_fresh_prometheus_multiprocess_directory(run_script: Any, tmp_path: Path) -> None:
    directory = tmp_path / "prom"
    directory.mkdir()
    (directory / "counter_999.db").write_text("stale")
    result = run_script("start-worker", "hot", env={"PROMETHEUS_MULTIPROC_DIR": str(directory)})
    assert result.returncode == 0
    assert directory.is_dir() and list(directory.iterdir()) == []


def test_beat_keeps_its_schedule_on_the_beat_volume(run_script: Any) -> None:
    result = run_script("start-beat")
    schedule = result.option("--schedule")
    assert schedule is not None
    targets = [m.target for m in stack.mounts(stack.services()["beat"])]
    assert any(schedule.startswith(t.rstrip("/") + "/") for t in targets)


def test_flower_persists_state_purges_offline_workers_and_keeps_the_password_off_argv(run_script: Any) -> None:
    result = run_script("start-flower", env=FLOWER_ENV)
    assert result.returncode == 0, result.stderr
    assert result.option("--persistent") == "True"
    db = result.option("--db")
    assert db is not None and any(db.startswith(m.target + "/") for m in stack.mounts(stack.services()["flower"]))
    assert int(result.option("--state_save_interval") or 0) > 0
    assert int(result.option("--purge_offline_workers") or 0) > 0
    assert result.option("--port") == "5555"
    assert not any("s3cret-pw" in a for a in result.argv)
    assert result.env["FLOWER_BASIC_AUTH"] == "ops:s3cret-pw"  # Flower reads it from here


@pytest.mark.parametrize("auth", [None, "", "admin", "admin:", ":pw", "admin:change-me-flower"])
def test_flower_refuses_to_start_without_real_basic_auth(auth: str | None, run_script: Any) -> None:
    result = run_script("start-flower", env={} if auth is None else {"FLOWER_BASIC_AUTH": auth})
    assert result.returncode == 64
    assert result.argv is None


def test_start_init_runs_the_init_module_where_the_image_puts_it(run_script: Any) -> None:
    result = run_script("start-init")
    target = result.argv[1]
    dests = {c.dest for c in stack.copies() if "compose/arango_init.py" in c.sources}
    assert dests == {target}


# --- healthcheck-http ----------------------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path == "/health" else 503
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _probe(url: str) -> int:
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    script = stack.COMPOSE_DIR / "healthcheck-http"
    return subprocess.run(["sh", str(script), url], env=env, capture_output=True, timeout=30).returncode


def test_healthcheck_http_passes_on_2xx_and_fails_otherwise(http_server: str) -> None:
    assert _probe(f"{http_server}/health") == 0
    assert _probe(f"{http_server}/other") == 1
    assert _probe("http://127.0.0.1:9/health") == 1  # nothing listens
