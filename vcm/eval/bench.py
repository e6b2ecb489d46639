"""What the benchmarks and evaluations in ``scripts/`` share: percentiles and latency summaries, a
timer, the common flags (``--json``, ``--data``), finding the evaluation data, and writing the
``--json`` result. Starting ``vcm serve`` (a free port, waiting for health) is in
:mod:`vcm.eval.serving`.

The evaluation data is not part of the repository: ``--data`` names the LoCoMo file, or
``VCM_EVAL_DATA`` names a directory holding ``locomo_dev.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

DATA_ENV = "VCM_EVAL_DATA"
LOCOMO_DEV = "locomo_dev.json"


# --- figures ---------------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation between order statistics (numpy's
    default); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = min(max(q, 0.0), 1.0) * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_ms(samples_s: Sequence[float], *, digits: int = 3) -> dict[str, float]:
    """p50, p95, p99, mean and max of samples in seconds, in milliseconds (empty for no samples)."""
    ms = [s * 1000.0 for s in samples_s]
    if not ms:
        return {}
    return {
        "p50_ms": round(percentile(ms, 0.50), digits),
        "p95_ms": round(percentile(ms, 0.95), digits),
        "p99_ms": round(percentile(ms, 0.99), digits),
        "mean_ms": round(sum(ms) / len(ms), digits),
        "max_ms": round(max(ms), digits),
    }


def share(part: float, whole: float) -> float:
    """``part`` as a percentage of ``whole`` (one decimal); 0 when ``whole`` is 0."""
    return round(100.0 * part / whole, 1) if whole else 0.0


class Timer:
    """``with Timer() as t: ...`` then ``t.elapsed_s`` (monotonic, high resolution)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.elapsed_s = 0.0

    def __enter__(self) -> Timer:
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.elapsed_s = time.perf_counter() - self.started


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds ``call()`` took, and what it returned."""
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


# --- flags and data --------------------------------------------------------------------------------
def add_json_flag(parser: argparse.ArgumentParser, help: str = "write the figures here as JSON") -> None:
    parser.add_argument("--json", type=Path, help=help)


def add_data_flag(parser: argparse.ArgumentParser, name: str = LOCOMO_DEV) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help=f"the evaluation data (default: ${DATA_ENV}/{name}; {DATA_ENV} names a directory holding it)",
    )


def data_path(given: Path | str | None, name: str = LOCOMO_DEV) -> Path:
    """``--data`` when given, else ``$VCM_EVAL_DATA/<name>``; exits with a clear message when
    neither is given or the file is not there."""
    if given:
        path = Path(given)
    elif root := os.environ.get(DATA_ENV, ""):
        path = Path(root) / name
    else:
        raise SystemExit(
            f"no evaluation data: pass --data PATH, or set {DATA_ENV} to a directory holding {name} "
            "(the data is not part of the repository)"
        )
    if not path.is_file():
        raise SystemExit(f"evaluation data not found: {path}")
    return path


def write_json(path: Path | str | None, result: Mapping[str, Any] | Sequence[Any]) -> None:
    """Write the ``--json`` result (indented, one trailing newline); nothing when no path."""
    if path is None:
        return
    Path(path).write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")


def settings_variant(spec: str) -> dict[str, Any]:
    """``memory=0.25,memory_messages=30``: the settings a benchmark variant changes (values as
    JSON: numbers, true/false, quoted strings); "" changes none."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"a variant part is KEY=VALUE, not {part!r}")
        out[key.strip()] = json.loads(value)
    return out
