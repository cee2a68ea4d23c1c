"""The board of today's models: each figure is what the hardware model gives (`estimate --arch`
for the same request, GPU and stack), the HELM 2022 column is the same model on the same GPU
under HELM's stack, costs follow from runtime x GPUs x price, sorting, the report's files and the
terminal, providers' prices beside the idealized dollars, and one-line errors. Nothing pins a
runtime: stack calibrations change as published figures are added."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.prices import read_price_table
from idealized_runtime.core.scenarios import Workload
from idealized_runtime.cost_model.hardware.estimate import hardware_model_estimate
from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, HELM_STACK
from idealized_runtime.leaderboard.build import build_leaderboard, leaderboard_payload
from idealized_runtime.leaderboard.current_models import (
    FLAGSHIP_MODELS,
    SORT_KEYS,
    CurrentModelsSpec,
    current_model_board,
    sort_value,
    sorted_rows,
)
from idealized_runtime.report.inputs import bundled_helm_inputs
from idealized_runtime.report.render import write_report
from tests.servers import cli_command
from tests.timing_client.conftest import run_cli

# Integer tokens, so that each workload is a request `estimate --arch` can be asked about.
WORKLOADS = (Workload("short", 200, 20, 1), Workload("long", 1500, 120, 1))
PRICES = """prices:
- {provider: p1, model: big, architecture: deepseek-v3, input_usd_per_mtok: 1.25,
   output_usd_per_mtok: 1.25}
- {provider: p2, model: small, architecture: qwen3-8b, input_usd_per_mtok: 0.05,
   output_usd_per_mtok: 0.25}
- {provider: p3, model: elsewhere, architecture: llama-3.1-8b, input_usd_per_mtok: 1,
   output_usd_per_mtok: 1}
"""


def test_each_figure_is_the_hardware_models_estimate_of_the_same_request() -> None:
    spec = CurrentModelsSpec(models=("qwen3-8b", "deepseek-v3", "gpt-oss-120b"), hardware="h200")
    board = current_model_board(spec, WORKLOADS)
    gpu = get_hardware("h200")
    assert (board.hardware, board.stack, board.baseline_stack) == (
        "h200",
        DEFAULT_STACK,
        HELM_STACK,
    )
    for row in board.rows:
        arch = get_architecture(row.model)
        # The GPUs hold the longest workload; every workload runs on them.
        planned, _ = hardware_model_estimate(arch, gpu, 1500, 120, stack=DEFAULT_STACK)
        assert (row.num_gpus, row.tp) == (planned.num_gpus, planned.tp)
        assert row.precision == planned.precision  # the checkpoint's, e.g. fp8 for DeepSeek-V3
        for stack, value in ((DEFAULT_STACK, row.idealized_runtime_s),
                             (HELM_STACK, row.baseline_runtime_s)):  # fmt: skip
            runtimes = [
                hardware_model_estimate(
                    arch, gpu, int(w.mean_prompt_tokens), int(w.mean_output_tokens),
                    tp=row.tp, stack=stack,
                )[0].runtime_s
                for w in WORKLOADS
            ]  # fmt: skip
            assert value == pytest.approx(sum(runtimes) / len(runtimes), rel=1e-9)
        assert row.ratio == pytest.approx(row.idealized_runtime_s / row.baseline_runtime_s)
        assert row.cost.gpu_seconds == pytest.approx(row.idealized_runtime_s * row.num_gpus * 1000)
        assert row.cost.usd == pytest.approx(row.cost.gpu_seconds * gpu.hourly_price_usd / 3600)
        # $ per 1M output tokens and tokens/s per user are one decode step seen two ways.
        per_gpu_second = gpu.hourly_price_usd / 3600
        product = row.usd_per_million_output_tokens * row.output_tokens_per_s_per_user
        assert product == pytest.approx(row.num_gpus * per_gpu_second * 1e6)
        assert row.num_workloads == 2 and row.note is None
    moe = {row.model: row.active_parameters for row in board.rows}
    assert moe["qwen3-8b"] is None and 0 < moe["deepseek-v3"] < board.rows[1].num_parameters


def test_a_precision_the_gpu_refuses_is_na_with_the_reason() -> None:
    board = current_model_board(
        CurrentModelsSpec(models=("deepseek-v3", "qwen3-8b"), hardware="a100-80gb"), WORKLOADS
    )
    refused, fine = board.rows
    assert refused.idealized_runtime_s is None and refused.num_gpus is None
    assert "fp8" in refused.note and refused.cost.usd is None
    assert fine.idealized_runtime_s is not None
    assert [row.model for row in sorted_rows(board.rows, "idealized")] == [
        "qwen3-8b",
        "deepseek-v3",
    ]


def test_sorting_puts_the_best_first_and_missing_last() -> None:
    board = current_model_board(CurrentModelsSpec(), WORKLOADS)
    assert [row.model for row in board.rows] == list(FLAGSHIP_MODELS)
    for key, (_, more_is_better) in SORT_KEYS.items():
        values = [sort_value(row, key) for row in sorted_rows(board.rows, key)]
        present = [value for value in values if value is not None]
        assert present == sorted(present, reverse=more_is_better), key
        assert values == present + [None] * (len(values) - len(present))
    with pytest.raises(InputError, match="unknown sort key"):
        sorted_rows(board.rows, "speed")


def test_unknown_names_are_one_line() -> None:
    for spec, message in (
        (CurrentModelsSpec(models=("gpt-5",)), "unknown architecture 'gpt-5'"),
        (CurrentModelsSpec(hardware="tpu"), "unknown hardware 'tpu'"),
        (CurrentModelsSpec(stack="vllm-9"), "vllm-9"),
    ):
        with pytest.raises(InputError, match=message):
            spec.resolved()


def test_report_files_and_prices_beside_the_idealized_dollars(tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES)
    spec = CurrentModelsSpec(prices=read_price_table(prices))
    board = build_leaderboard(bundled_helm_inputs(), current_models=spec)
    current = board.current_models
    assert current is not None and len(current.workloads) == 33
    # The price of an architecture not on the board (llama-3.1-8b) is left out.
    assert [(row.provider, row.architecture) for row in current.prices] == [
        ("p2", "qwen3-8b"), ("p1", "deepseek-v3"),
    ]  # fmt: skip
    by_model = {row.model: row for row in current.rows}
    for price in current.prices:
        mean_usd = sum(
            (w.mean_prompt_tokens * price.input_usd_per_mtok
             + w.mean_output_tokens * price.output_usd_per_mtok) / 1e6
            for w in current.workloads
        ) / len(current.workloads)  # fmt: skip
        assert price.usd_per_1000 == pytest.approx(mean_usd * 1000)
        assert price.idealized_usd_per_1000 == by_model[price.architecture].cost.usd
        assert price.ratio == pytest.approx(price.usd_per_1000 / price.idealized_usd_per_1000)
    files = write_report(board, tmp_path / "report")
    names = {path.name for path in files.csv}
    assert {"current_models.csv", "provider_prices.csv", "models.csv"} <= names
    table = list(
        csv.DictReader(io.StringIO((tmp_path / "report" / "current_models.csv").read_text()))
    )
    assert [row["model"] for row in table] == list(FLAGSHIP_MODELS)
    assert {"idealized_runtime_s", "cost_usd", "baseline_runtime_s", "ratio"} <= set(table[0])
    markdown = files.markdown.read_text()
    assert "## Today's models" in markdown and "price / idealized" in markdown
    html = files.html.read_text()
    assert 'id="current-models-table"' in html and 'id="price-table"' in html
    # Without today's models the report is the same as before (no section, no files).
    plain = write_report(build_leaderboard(bundled_helm_inputs()), tmp_path / "plain")
    assert "current-models" not in plain.html.read_text()
    assert "current_models.csv" not in {path.name for path in plain.csv}
    payload = leaderboard_payload(board)
    assert [row.model for row in payload["current_models"]["models"]] == list(FLAGSHIP_MODELS)
    assert "current_models" not in leaderboard_payload(build_leaderboard(bundled_helm_inputs()))


def test_leaderboard_command_prints_and_sorts_todays_models(tmp_path: Path) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text(
        "provider,model,architecture,input_usd_per_mtok,output_usd_per_mtok\n"
        "p1,small,qwen3-8b,0.05,0.25\n"
    )
    result = run_cli(cli_command(
        "leaderboard", "--limit", "1", "--current-models", "qwen3-8b,llama-3.3-70b,gpt-oss-20b",
        "--current-gpu", "h200", "--current-sort", "tokens-per-s", "--prices", str(prices),
    ))  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Today's models on h200, pytorch-compiled" in out and "Provider prices" in out
    order = [out.index(f"│ {name} ") for name in ("gpt-oss-20b", "qwen3-8b", "llama-3.3-70b")]
    assert order == sorted(order)  # most tokens/s per user first
    data = json.loads(run_cli(cli_command(
        "leaderboard", "--json", "--current-models", "flagship", "--current-stack", "tensorrt-llm"
    )).stdout)  # fmt: skip
    current = data["current_models"]
    assert current["stack"] == "tensorrt-llm" and len(current["models"]) == len(FLAGSHIP_MODELS)
    assert all(math.isfinite(row["idealized_runtime_s"]) for row in current["models"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--current-models", "gpt-5"], "unknown architecture 'gpt-5'"),
        (["--current-gpu", "tpu-v9"], "unknown hardware 'tpu-v9'"),
        (["--current-stack", "nope"], "nope"),
        (["--current-sort", "speed"], "--current-sort must be one of"),
        (["--prices", "missing.yaml"], "cannot read the price table"),
    ],
)
def test_bad_options_are_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_cli(cli_command("leaderboard", *args))
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    report = run_cli(cli_command("report", "-o", str(tmp_path / "out"), *args))
    if "--current-sort" not in args:  # a leaderboard option only
        assert report.returncode == 2 and message in report.stderr
        assert not (tmp_path / "out").exists()
