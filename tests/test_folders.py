"""The layout rule: folder X is ``vcm.X``, and modules stay small.

A reader maps a module to its file without reading ``pyproject.toml``: ``vcm.a.b`` lives at
``a/b.py`` (a top-level folder mapped as ``vcm.a``) or at ``vcm/a/b.py``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Modules allowed past the size limit, each with its reason.
LARGE = {
    "hotpath/lua.py": "the Lua scripts as string constants (data: each script is one atomic hot-path mutation)",
    "store/port.py": "the persistence port: one abstract method per store operation, each with its contract",
}
LIMIT = 500


def _mapping() -> dict[str, str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {package: folder for package, folder in config["package-dir"].items()}


def test_every_mapped_folder_is_named_after_its_package() -> None:
    for package, folder in _mapping().items():
        expected = "vcm" if package == "vcm" else package.removeprefix("vcm.").replace(".", "/")
        assert folder == expected, (package, folder)


def test_every_module_lives_where_its_name_says() -> None:
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    for package in sorted(packages):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        rel = package.replace(".", "/")
        top = package.removeprefix("vcm.").replace(".", "/") if package != "vcm" else None
        candidates = [ROOT / rel] + ([ROOT / top] if top else [])
        found = Path(spec.submodule_search_locations[0]).resolve()
        assert found in {c.resolve() for c in candidates if c.is_dir()}, (package, found)


def test_the_checkout_imports_as_the_wheel_does() -> None:
    # vcm/ links its sibling folders, so `import vcm.hotpath` from the repository root finds hotpath/.
    for package, folder in _mapping().items():
        if package != "vcm":
            link = ROOT / package.replace(".", "/")
            assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve(), link


def test_no_module_is_over_the_size_limit() -> None:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    tops = {"vcm", "hotpath", "store", "tasks", "workers", "config"}
    sizes = {
        name: len((ROOT / name).read_text().splitlines())
        for name in listed.stdout.split()
        if name.split("/")[0] in tops and (ROOT / name).is_file() and not (ROOT / name).is_symlink()
    }
    assert len(sizes) > 150, len(sizes)
    over = {name: n for name, n in sizes.items() if n > LIMIT and name not in LARGE}
    assert not over, over
