"""The TypeScript client (clients/typescript, npm package ``vcm-client``): its types are those of
the server's OpenAPI schema, its errors those of :mod:`vcm.errors`, and its Node test suite
(``npm test``: ``node --test`` against a real embedded ``vcm serve``) passes.

The schema check needs no Node: the committed ``openapi.json`` must be what the app serves now, so
a route or body that changes without regenerating the client fails here
(``.venv/bin/python -m tests.clients.schema`` regenerates). The rest runs ``npm ci`` once and
skips only where ``node`` or ``npm`` is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.schema import CLIENT, SNAPSHOT, openapi, render
from vcm.errors import ERRORS

REGENERATE = (
    "the server's OpenAPI schema drifted from the TypeScript client's: run .venv/bin/python -m tests.clients.schema"
)


def test_the_client_snapshot_is_the_schema_the_app_serves() -> None:
    current = openapi()
    snapshot = json.loads(SNAPSHOT.read_text())
    drifted = sorted(
        name
        for part, key in (
            (current["paths"], snapshot["paths"]),
            (current["components"]["schemas"], snapshot["components"]["schemas"]),
        )
        for name in set(part) | set(key)
        if part.get(name) != key.get(name)
    )
    assert drifted == [], f"{REGENERATE} ({drifted})"
    assert SNAPSHOT.read_text() == render(current), REGENERATE


def _npm(*args: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["npm", "--prefix", str(CLIENT), *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """The client's devDependencies installed (``npm ci`` from package-lock.json, once)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the TypeScript client's tests need Node 20+")
    major = subprocess.run(["node", "-p", "process.versions.node"], capture_output=True, text=True, check=True)
    if int(major.stdout.split(".")[0]) < 20:
        pytest.skip(f"Node {major.stdout.strip()} is too old for the TypeScript client's tests (20+)")
    installed = CLIENT / "node_modules" / ".package-lock.json"
    lock = json.loads((CLIENT / "package-lock.json").read_text())["packages"]
    if not installed.is_file() or json.loads(installed.read_text())["packages"].keys() != lock.keys() - {""}:
        done = _npm("ci", "--no-audit", "--no-fund", timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    built = _npm("run", "build", timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    return CLIENT / "node_modules"


def test_the_generated_types_are_those_of_the_snapshot(node_modules: Path) -> None:
    checked = _npm("run", "check:schema", timeout=300)
    assert checked.returncode == 0, REGENERATE + "\n" + checked.stdout + checked.stderr


def test_the_error_classes_are_the_python_tree(node_modules: Path) -> None:
    script = (
        "import('./dist/src/errors.js').then((m) => console.log(JSON.stringify(Object.fromEntries("
        "Object.entries(m.ERRORS).map(([code, cls]) =>"
        " [code, [cls.name, cls.httpStatus, new cls('x') instanceof m.VcmError]])))))"
    )
    out = subprocess.run(["node", "-e", script], cwd=CLIENT, capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout) == {code: [cls.__name__, cls.http_status, True] for code, cls in ERRORS.items()}


@pytest.mark.slow
def test_the_node_suite_passes_against_a_live_server(node_modules: Path) -> None:
    env = {**os.environ, "VCM_SERVE_CMD": json.dumps([sys.executable, "-m", "vcm.cli.main", "serve"])}
    # `npm test` without its compile step: the fixture built dist/ already.
    ran = subprocess.run(
        ["node", "--test", "--test-reporter=spec", "dist/test/"],
        cwd=CLIENT, capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-20000:] + ran.stderr[-5000:]
    assert "# fail 0" in ran.stdout or "ℹ fail 0" in ran.stdout, ran.stdout[-5000:]
