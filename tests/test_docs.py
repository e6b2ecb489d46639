"""The documentation site builds with ``mkdocs build --strict``: every page in the nav, no broken
link or anchor between pages, no page left out (the checks `mkdocs.yml` turns into warnings)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    assert mkdocs is not None, "mkdocs is not installed: it is in the dev extra (scripts/install)"
    done = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "site" / "architecture" / "index.html").is_file()


def test_readme_stays_a_front_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 260, "the README is a front page: move detail into docs/"
    for page in ("docs/architecture.md", "docs/benchmarks.md"):
        assert f"]({page}" in readme, f"the README links {page}"
