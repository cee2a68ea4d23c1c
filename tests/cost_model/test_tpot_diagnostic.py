"""The TPOT diagnostic (``benchmarks/tpot_diagnostic.py``): signed errors by group from a
serving run's JSON, and one decode step operation by operation, summing to the step."""

from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "tpot_diagnostic.py"
DIAGNOSTIC: dict[str, Any] = runpy.run_path(str(SCRIPT))
Point = DIAGNOSTIC["Point"]
TPOT = DIAGNOSTIC["TPOT"]


def _entry(clients: int, published: float, predicted: float | None) -> dict[str, Any]:
    point = Point("sglang", "b200", "qwen3-235b-a22b", "bf16", 8, 1, False, "", 1000, 1000,
                  clients, "sglang-cookbook-qwen3-235b-a22b")  # fmt: skip
    return {
        "point": point.__dict__,
        "published": {TPOT: published},
        "predicted": None if predicted is None else {TPOT: predicted},
        "residual": None,
    }


def test_signed_errors_keep_points_at_load_with_both_figures() -> None:
    entries = [_entry(16, 0.020, 0.018), _entry(64, 0.030, 0.033), _entry(1, 0.01, 0.02),
               _entry(100, 0.03, None)]  # fmt: skip
    errors = DIAGNOSTIC["signed_errors"](entries, 8)
    assert [(p.concurrency, round(e, 6)) for p, e in errors] == [(16, -0.1), (64, 0.1)]


def test_the_decode_breakdown_sums_to_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    DIAGNOSTIC["decode_breakdown"](Point(**_entry(16, 0.016, 0.014)["point"]))
    out = capsys.readouterr().out
    step = float(re.search(r"step ([\d.]+) ms", out).group(1))  # type: ignore[union-attr]
    host = float(re.search(r"draft passes ([\d.]+) ms", out).group(1))  # type: ignore[union-attr]
    terms = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+(\S.*?)\s+([\d.]+) ms/step",
                                                                 out, re.M)}  # fmt: skip
    assert {"moe", "elementwise", "allreduce", "decode_attention", "gemm bf16"} <= set(terms)
    assert sum(terms.values()) + host == pytest.approx(step, abs=0.02)


def test_the_script_prints_groups_and_the_worst(tmp_path: Path) -> None:
    import subprocess

    run = tmp_path / "run.json"
    run.write_text(json.dumps([_entry(16, 0.020, 0.018), _entry(64, 0.030, 0.024)]))
    done = subprocess.run([sys.executable, str(SCRIPT), str(run), "--worst", "1"],
                          capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    assert "sglang b200 qwen3-235b-a22b" in done.stdout and "-15.0%" in done.stdout
    assert "decode step of the 1 groups furthest off" in done.stdout
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    refused = subprocess.run([sys.executable, str(SCRIPT), str(empty)], capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
