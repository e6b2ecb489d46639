"""A plain (non-editable) install carries everything vcm reads at run time: config/ ships in the
wheel as ``vcm_config``, next to every package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_carries_the_config_and_works_from_anywhere(tmp_path: Path) -> None:
    # Built from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
    src = tmp_path / "src"
    for name in ("pyproject.toml", "README.md"):
        src.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, src / name)
    for name in ("config", "hotpath", "store", "tasks", "workers"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src)]
    subprocess.run([*build, "-w", str(tmp_path / "dist")], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("vcm-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"vcm_config/default.toml", "vcm_config/arango_schema.json"} <= names
    for package in ("hotpath", "store", "store/arango", "store/embedded", "tasks", "workers"):
        assert f"{package}/__init__.py" in names

    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    probe = (
        "import hotpath.settings as s, store.arango.schema as a;"
        f"assert s.__file__.startswith({str(target)!r}), s.__file__;"
        "assert s.DEFAULT_CONFIG.is_file() and a.SCHEMA_PATH.is_file();"
        "print(s.load_settings(environ={}).budget.flush)"
    )
    # Run away from the checkout with the installed copy first on the path, so nothing of the
    # repository (editable finder included) can stand in for a missing file.
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
