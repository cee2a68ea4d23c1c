"""Conversion: vectorized results equal per-row evaluation; unknown models; output files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from idealized_runtime.core import catalog
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.fitting.convert import convert_requests, write_conversion
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.fitting.helm_format import import_helm_table
from idealized_runtime.cost_model.fitting.methods import fit_measurements
from idealized_runtime.cost_model.fitting.request_logs import RequestTable, read_requests


@pytest.fixture(scope="module")
def fits(a100_grid):
    return fit_measurements(a100_grid, "default")


def test_vectorized_conversion_equals_per_row_evaluation(fits) -> None:
    rng = np.random.default_rng(0)
    models = sorted(fits)
    n = 5000
    names = rng.choice(models, n)
    p, o = rng.integers(1, 4000, n), rng.integers(1, 500, n)
    runtime = rng.random(n) + 0.1
    result = convert_requests(RequestTable.from_columns(names, p, o, runtime), fits)
    expected = np.array(
        [predict_runtime(fits[m], a, b) for m, a, b in zip(names, p, o, strict=True)]
    )
    np.testing.assert_allclose(result.columns["idealized_runtime_s"], expected, rtol=1e-12)
    np.testing.assert_allclose(result.columns["runtime_discrepancy_s"], runtime - expected)
    assert "denoised_runtime_s" not in result.columns


def test_unknown_models_are_named_or_skipped(fits) -> None:
    table = RequestTable.from_columns(["zeta", "megatron-gptj-6b", "alpha"], [1, 2, 3], [1, 1, 1])
    with pytest.raises(InputError, match=r"no fit for model\(s\) alpha, zeta \(2 rows\)"):
        convert_requests(table, fits)
    result = convert_requests(table, fits, skip_unknown=True)
    assert result.kept.tolist() == [False, True, False]
    assert result.dropped_unknown_rows == 2 and result.unknown_models == ["alpha", "zeta"]
    assert len(result) == 1


def test_idealized_and_denoised_columns(fits) -> None:
    denoised = import_helm_table(catalog.helm_table("denoised"), method="denoised")
    table = RequestTable.from_columns(["openai/davinci", "megatron-gptj-6b"], [100, 100], [5, 5])
    result = convert_requests(table, [fits, denoised])
    ideal, noisy = result.columns["idealized_runtime_s"], result.columns["denoised_runtime_s"]
    assert np.isnan(ideal[0]) and np.isfinite(ideal[1])
    assert np.isfinite(noisy[0]) and np.isnan(noisy[1])


def test_write_jsonl_and_csv_keep_input_columns(tmp_path, fits) -> None:
    source = tmp_path / "r.jsonl"
    rows = [
        {
            "model": "megatron-gptj-6b",
            "num_prompt_tokens": 10,
            "num_output_tokens": 3,
            "runtime_s": 1.0,
            "id": "q1",
        },
        {"model": "megatron-bloom", "num_prompt_tokens": 20, "num_output_tokens": 1, "id": "q2"},
    ]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = read_requests(source)
    result = convert_requests(table, fits)
    write_conversion(table, result, tmp_path / "out.jsonl")
    out = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["id"] for r in out] == ["q1", "q2"]
    assert out[1]["runtime_discrepancy_s"] is None and out[1]["idealized_runtime_s"] > 0
    write_conversion(table, result, tmp_path / "out.csv")
    lines = (tmp_path / "out.csv").read_text().splitlines()
    assert lines[0] == (
        "model,num_prompt_tokens,num_output_tokens,runtime_s,id,idealized_runtime_s,"
        "runtime_discrepancy_s"
    )
    assert lines[2].startswith("megatron-bloom,20,1,,q2,") and lines[2].endswith(",")


def test_prompts_beyond_the_profiled_range_are_counted_and_said_in_one_line(tmp_path, fits) -> None:
    """A request longer than the longest profiled prompt of its fit is extrapolated: convert
    counts such requests and says so in one warning line (the file is still written)."""
    from idealized_runtime.cost_model.fitting.fit_files import write_fit_file
    from tests.servers import run_cli

    model = "megatron-gptj-6b"
    longest = max(fits[model].prompt_sizes)
    table = RequestTable.from_columns([model] * 3, [1, longest, longest + 500], [4, 4, 4])
    result = convert_requests(table, fits)
    assert result.extrapolated.rows == 1 and result.extrapolated.longest_prompt == longest + 500
    assert result.extrapolated.profiled == {model: longest}

    requests = tmp_path / "requests.csv"
    requests.write_text(
        "model,num_prompt_tokens,num_output_tokens\n"
        f"{model},10,4\n{model},{longest + 500},4\n{model},{longest + 900},4\n",
        encoding="utf-8",
    )
    write_fit_file({model: fits[model]}, tmp_path / "fit.json")
    ran = run_cli("convert", str(requests), "--fit", str(tmp_path / "fit.json"),
                  "-o", str(tmp_path / "out.csv"))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    (warning,) = [line for line in ran.stderr.splitlines() if line.startswith("warning:")]
    assert warning == (
        f"warning: 2 request(s) have prompts beyond the profiled range of their fit (longest "
        f"{longest + 900} tokens; profiled {model} up to {longest}): their runtimes are "
        "extrapolated"
    )
    assert len((tmp_path / "out.csv").read_text().splitlines()) == 4
    requests.write_text(
        f"model,num_prompt_tokens,num_output_tokens\n{model},10,4\n{model},{longest},4\n",
        encoding="utf-8",
    )
    within = run_cli(
        "convert", str(requests), "--fit", str(tmp_path / "fit.json"), "-o", str(tmp_path / "o.csv")
    )
    assert within.returncode == 0 and "warning" not in within.stderr, within.stderr
