"""Smoke run of ``scripts/bench_embed.py`` on a tiny conversation: it runs end to end, measures
ONNX Runtime's two sessions and OpenVINO's in every row it was asked for, and pairs the turns
that name a speaker. Figures are not asserted (they depend on the machine), only that each is
there and positive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_embed_reports_both_sessions_per_row(tmp_path: Path) -> None:
    said = [
        ("Ann", "Hi Bob, how was the trip to Porto?"), ("Bob", "Great, Ann. The food was lovely."),
        ("Ann", "Which dish did you like best?"), ("Bob", "The grilled sardines."),
        ("Ann", "Bob, did you visit the bookshop?"), ("Bob", "Yes, Lello. Crowded."),
    ]  # fmt: skip
    turns = [{"speaker": who, "dia_id": f"D1:{i}", "text": text} for i, (who, text) in enumerate(said, 1)]
    data = tmp_path / "locomo.json"
    sample = {"sample_id": "t", "conversation": {"speaker_a": "Ann", "speaker_b": "Bob", "session_1": turns}}
    data.write_text(json.dumps([sample]), encoding="utf-8")
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_embed.py"), "--data", str(data), "--turns", "3",
         "--busy", "0,1", "--reps", "1", "--json", str(out)],
        cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["turns"] == 3 and result["pairs"] == 2  # two of Ann's turns name Bob
    assert set(result["rows"]) == {"0", "1"}
    for row in result["rows"].values():
        for name in ("sleeping", "spinning", "openvino"):
            assert row[f"{name}_single"]["n"] == 1 and row[f"{name}_pair"]["n"] == 2
            assert row[f"{name}_single"]["p50"] > 0 and row[f"{name}_pair"]["p95"] > 0
    assert "spinning" in done.stderr and "busy processes 1" in done.stderr
    assert result["openvino_precision"] in ("bf16", "f32")
