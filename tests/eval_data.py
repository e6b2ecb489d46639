"""Evaluation data for the tests that replay LoCoMo: not part of the repository.

``VCM_EVAL_DATA`` names a directory holding ``locomo_dev.json`` (five LoCoMo conversations,
CC BY-NC 4.0). Tests marked :data:`needs_locomo_dev` skip, saying why, when it is unset or the
file is not there; ``.ci/run`` sets it when its environment provides the data.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "VCM_EVAL_DATA"


def _locate() -> tuple[Path, str]:
    root = os.environ.get(ENV, "")
    if not root:
        return Path("locomo_dev.json"), f"{ENV} is not set (a directory holding locomo_dev.json)"
    path = Path(root) / "locomo_dev.json"
    if not path.is_file():
        return path, f"{path} is not there ({ENV}={root})"
    return path, ""


LOCOMO_DEV, _MISSING = _locate()
needs_locomo_dev = pytest.mark.skipif(bool(_MISSING), reason=_MISSING or "LoCoMo dev data present")
