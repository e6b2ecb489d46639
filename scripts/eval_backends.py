#!/usr/bin/env python3
"""Recall of each embedding backend, in one run: ``scripts/eval_locomo.py`` (hybrid and vector
recall through vcm's own path) and ``scripts/eval_late_chunking.py`` (late-chunked turns), once per
``[embedding] backend``, then the differences to torch in points.

    .venv/bin/python scripts/eval_backends.py --data LOCOMO_JSON [--backends torch,onnx,openvino,onnx-int8] [--json OUT]

The default backend must agree with torch within 0.5 points at every k (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from vcm.eval.bench import add_data_flag, add_json_flag, data_path, write_json

HERE = Path(__file__).resolve().parent


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(script: ModuleType, argv: list[str]) -> dict[str, Any]:
    """One evaluation run through its ``main``; its JSON result."""
    with tempfile.TemporaryDirectory(prefix="vcm-eval-backends-") as tmp:
        target = Path(tmp) / "result.json"
        script.main([*argv, "--json", str(target)])
        found: dict[str, Any] = json.loads(target.read_text())
        return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_flag(parser)
    add_json_flag(parser)
    parser.add_argument("--backends", default="torch,onnx,openvino,onnx-int8", help="comma-separated, torch first")
    parser.add_argument("--conversations", nargs="*", help="sample ids to keep (default: all)")
    parser.add_argument("--skip", choices=["locomo", "late"], nargs="*", default=[], help="evaluations to leave out")
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    locomo, late = _script("eval_locomo"), _script("eval_late_chunking")
    data = data_path(args.data)
    out: dict[str, Any] = {"data": str(data), "load_average": list(os.getloadavg()), "backends": {}}
    for backend in backends:
        row: dict[str, Any] = {}
        only = ["--conversations", *args.conversations] if args.conversations else []
        if "locomo" not in args.skip:
            started = time.perf_counter()
            # Through each script's own command line, so its options keep their defaults.
            result = _run(locomo, ["--data", str(data), "--backend", backend, *only])
            row["locomo"] = {m: result["recall"][m]["all"] for m in ("vector", "hybrid")}
            row["vectors"] = result["vectors"]
            row["locomo_s"] = round(time.perf_counter() - started, 1)
        if "late" not in args.skip:
            started = time.perf_counter()
            result = _run(late, ["--data", str(data), "--backend", backend, "--modes", "late", *only])
            recall = result["recall"]
            row["late"] = {g: {f"R@{k}": round(100 * v, 1) for k, v in r["late"].items()} for g, r in recall.items()}
            row["late_s"] = round(time.perf_counter() - started, 1)
        row["load_average_after"] = list(os.getloadavg())
        out["backends"][backend] = row
        print(f"{backend}: {row}", file=sys.stderr)
    _report(out, backends)
    if args.json:
        write_json(args.json, out)
    return 0


def _flat(row: dict[str, Any]) -> dict[str, float]:
    flat: dict[str, float] = {}
    for mode, entry in row.get("locomo", {}).items():
        flat.update({f"locomo {mode} {k}": float(v) for k, v in entry.items() if k.startswith("R@")})
    for gran, entry in row.get("late", {}).items():
        flat.update({f"late {gran} {k}": float(v) for k, v in entry.items()})
    return flat


def _report(out: dict[str, Any], backends: list[str]) -> None:
    rows = {b: _flat(out["backends"][b]) for b in backends}
    base = rows[backends[0]]
    print(f"{'metric':<26}" + "".join(f"{b:>12}" for b in backends) + "".join(f"{'d ' + b:>14}" for b in backends[1:]))
    for metric, value in base.items():
        cells = "".join(f"{rows[b].get(metric, float('nan')):>12.1f}" for b in backends)
        deltas = "".join(f"{rows[b].get(metric, float('nan')) - value:>+14.1f}" for b in backends[1:])
        print(f"{metric:<26}{cells}{deltas}")
    for b in backends[1:]:
        worst = max((abs(rows[b][m] - v) for m, v in base.items() if m in rows[b]), default=0.0)
        verdict = "holds" if worst <= 0.5 else "FAILS"
        print(f"{b}: largest difference to {backends[0]} {worst:.1f} points ({verdict} 0.5)")


if __name__ == "__main__":
    raise SystemExit(main())
