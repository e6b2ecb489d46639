"""The package's shape: import contracts between sub-packages hold, and `import vcm` stays light."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    out = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    kept = [line for line in out.stdout.splitlines() if line.endswith(" KEPT")]
    assert len(kept) == 4, out.stdout


def test_importing_vcm_loads_nothing_server_side() -> None:
    probe = "import json, sys, vcm; vcm.VcmClient; vcm.tool_schemas(); print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded = {m.split(".")[0] for m in json.loads(out.stdout)}
    vcm_modules = {m for m in json.loads(out.stdout) if m.startswith("vcm.")}
    heavy = {"redis", "fakeredis", "celery", "kombu", "torch", "faiss", "tantivy", "fastapi", "pydantic", "numpy"}
    assert not heavy & loaded, heavy & loaded
    # The client, its local cache and sync (vcm.sync, vcm.wire), the errors, the tool schemas, and
    # reading a streamed frame's JSON (vcm.jsontext: the standard library's json alone).
    client_side = {"vcm.client", "vcm.errors", "vcm.tools", "vcm.tools.schemas", "vcm.wire", "vcm.sync", "vcm.jsontext"}
    assert {m for m in vcm_modules if not m.startswith(("vcm.sync.", "vcm.client."))} <= client_side, vcm_modules


def test_the_facade_is_lazy_but_real() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import vcm, vcm.service; assert vcm.MemoryService is vcm.service.MemoryService"],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
