"""``bench`` with a reference stack: each local model also gets the hardware model's runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from idealized_runtime.cost_model.fitting.fit_files import read_fit_file
from tests.servers import assert_refused_in_one_line, run_cli


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hardware: a100-80gb\nstack: nope\nmodels:\n  - architecture: tiny-llama\n", "nope"),
        ("stack: lmdeploy\nmodels:\n  - architecture: tiny-llama\n", "stack needs hardware"),
    ],
)
def test_bench_rejects_bad_stack_with_one_line(tmp_path: Path, text: str, expected: str) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text(text, encoding="utf-8")
    assert_refused_in_one_line(
        run_cli("bench", str(config), "-o", str(tmp_path / "results")), expected
    )
    assert not (tmp_path / "results").exists()


def test_bench_with_stack_writes_the_calibrated_fit(tmp_path: Path) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text(
        "hardware: h100-sxm\nstack: a100-megatron-2022\nrepeats: 1\nwarmup: 0\n"
        "models:\n  - architecture: tiny-llama\n    name: tiny\n",
        encoding="utf-8",
    )
    results = tmp_path / "results"
    run = run_cli("bench", str(config), "-o", str(results), "--no-progress")
    assert run.returncode == 0, run.stderr
    (path,) = results.glob("items/*/fits-calibrated.json")
    fit = read_fit_file(path)["tiny"]
    assert fit.method == "calibrated" and fit.stack is not None
    assert fit.stack.runner == "stack:helm-megatron-2022" and fit.stack.hardware == "h100-sxm"


def test_report_methodology_lists_the_reference_stacks() -> None:
    from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, shipped_stacks
    from idealized_runtime.report.markdown import _reference_stack_lines

    text = "\n".join(_reference_stack_lines())
    for name in shipped_stacks():
        assert f"- {name}" in text
    assert f"{DEFAULT_STACK} (default)" in text and "held out by source" in text


def test_bench_estimates_take_the_file_stack(tmp_path: Path) -> None:
    from idealized_runtime.bench.config import load_config

    config = tmp_path / "bench.yaml"
    entry = "{architecture: llama-3.1-8b, hardware: a100-80gb, prompt_tokens: 5, output_tokens: 9"
    config.write_text(
        f"stack: a100-megatron-2022\nestimates:\n  - {entry}}}\n  - {entry}, stack: lmdeploy}}\n",
        encoding="utf-8",
    )
    first, second = load_config(config).estimates
    assert first.stack == "helm-megatron-2022" and second.stack == "lmdeploy"
    assert first.evaluate()["calibration"] == "helm-megatron-2022"
    assert second.evaluate()["output_tokens_per_s"] > first.evaluate()["output_tokens_per_s"]
