"""Packaging: the wheel installs one top-level package, ``vcm``, by one rule: folder X is ``vcm.X``
(vcm/ as ``vcm``, hotpath/ as ``vcm.hotpath``, store/ as ``vcm.store``, and so on), carries the files
vcm reads at run time, and a client-only install needs nothing server-side."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "vcm": "vcm",
    "hotpath": "vcm/hotpath",
    "store": "vcm/store",
    "tasks": "vcm/tasks",
    "workers": "vcm/workers",
    "config": "vcm/config",
}
SERVER_SIDE = ("redis", "celery", "kombu", "torch", "faiss", "tantivy", "fastapi", "pydantic", "numpy", "arango")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in FOLDERS:
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src)]
    subprocess.run([*build, "-w", str(tmp / "dist")], check=True, capture_output=True, timeout=300)
    (found,) = (tmp / "dist").glob("vcm-*.whl")
    return found


def test_the_wheel_holds_one_top_level_package_with_every_module(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"vcm"}
    assert {"vcm/config/default.toml", "vcm/config/arango_schema.json", "vcm/py.typed"} <= names
    # Every module of the five folders is in the wheel, under its mapped name: a new sub-package
    # missing from pyproject's package list would fail here, not at a user's import.
    for folder, prefix in FOLDERS.items():
        for source in (ROOT / folder).rglob("*.py"):
            if "__pycache__" in source.parts:
                continue
            assert f"{prefix}/{source.relative_to(ROOT / folder).as_posix()}" in names
    for lua in (ROOT / "hotpath").rglob("*.lua"):
        assert f"vcm/hotpath/{lua.relative_to(ROOT / 'hotpath').as_posix()}" in names
    # The memory viewer's page and scripts, which the API serves from the package.
    viewer = {f"vcm/api/static/{p.name}" for p in (ROOT / "vcm" / "api" / "static").iterdir()}
    assert "vcm/api/static/index.html" in viewer and viewer <= names


def test_server_dependencies_are_an_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        lines = zf.read(meta).decode().splitlines()
    requires = [line.removeprefix("Requires-Dist: ") for line in lines if line.startswith("Requires-Dist: ")]
    plain = [r for r in requires if "extra ==" not in r]
    assert plain and all(r.startswith("httpx") for r in plain), plain
    for heavy in ("torch", "faiss-cpu", "tantivy", "celery"):
        assert any(r.startswith(heavy) and 'extra == "server"' in r for r in requires), heavy


def test_the_installed_wheel_reads_its_config_from_anywhere(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    assert sorted(p.name for p in target.iterdir() if p.name not in ("bin",) and not p.name.endswith(".dist-info")) == [
        "vcm"
    ]
    probe = (
        "import vcm.settings as s, vcm.store.arango.schema as a;"
        f"assert s.__file__.startswith({str(target)!r}), s.__file__;"
        "assert s.DEFAULT_CONFIG.is_file() and a.SCHEMA_PATH.is_file();"
        "print(s.load_settings(environ={}).budget.flush)"
    )
    # Run away from the checkout with the installed copy first on the path, so nothing of the
    # repository (editable link tree included) can stand in for a missing file.
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0.9"


@pytest.mark.slow
def test_a_client_only_install_imports_vcm_without_the_server_side(wheel: Path, tmp_path: Path) -> None:
    # A fresh venv and a plain `pip install vcm.whl`: only httpx and its dependencies come along.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=300)
    probe = (
        "import json, sys, sysconfig, os;"
        "import vcm; from vcm import VcmClient, AsyncVcmClient, VcmError, RevConflict, tool_schemas;"
        "site = sysconfig.get_paths()['purelib'];"
        "print(json.dumps({'modules': sorted(sys.modules), 'site': sorted(os.listdir(site)),"
        " 'version': vcm.__version__, 'tools': len(tool_schemas())}))"
    )
    out = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["version"] == "0.1.0" and seen["tools"] >= 9
    assert not {"hotpath", "store", "tasks", "workers", "vcm_config"} & set(seen["site"])
    loaded = {m.split(".")[0] for m in seen["modules"]}
    assert not set(SERVER_SIDE) & loaded, set(SERVER_SIDE) & loaded
    # MemoryService needs the server extra: asking for it says which module is missing.
    lazy = subprocess.run(
        [str(python), "-c", "import vcm; vcm.MemoryService"], cwd=tmp_path, capture_output=True, text=True
    )
    assert lazy.returncode != 0 and "ModuleNotFoundError" in lazy.stderr
