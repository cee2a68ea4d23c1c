"""Today's models at their best deployment under the board's standard SLO: the cell is what
``plan`` answers (one implementation), its best meets the SLO in plan's own request-by-request
simulation, dollars follow from the GPU's hourly price, the shipped figures are current and
cover the flagships, the cells say why there is no deployment, and the columns reach the
report, the terminal and the JSON."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.scenarios import Workload
from idealized_runtime.cost_model.planning.frontier import meets
from idealized_runtime.cost_model.planning.search import plan, point_servers, verify
from idealized_runtime.leaderboard.best_deployments import (
    REGENERATE,
    SHIPPED_GPUS,
    STANDARD,
    ShippedFigures,
    best_deployment,
    board_cell,
    from_plan,
    plan_request,
    read_shipped,
)
from idealized_runtime.leaderboard.build import build_leaderboard, leaderboard_payload
from idealized_runtime.leaderboard.current_models import (
    FLAGSHIP_MODELS,
    CurrentModelsSpec,
    current_model_board,
    sorted_rows,
)
from idealized_runtime.report.cells import fmt_number
from idealized_runtime.report.current_tables import (
    SLO_DEPLOYMENT_HEADER,
    SLO_TOKENS_HEADER,
    SLO_USD_HEADER,
)
from idealized_runtime.report.inputs import bundled_helm_inputs
from idealized_runtime.report.render import write_report
from tests.servers import cli_command
from tests.timing_client.conftest import run_cli

WORKLOADS = (Workload("short", 200, 20, 1), Workload("long", 1500, 120, 1))
# The quickest flagship to plan (about 2 s on one core): the live checks use it.
QUICK_MODEL, QUICK_GPU = "qwen3-8b", "h100-sxm"


def _usd_per_million(gpu_name: str, tokens_per_s_per_gpu: float) -> float:
    """A million output tokens at ``tokens_per_s_per_gpu``, at the GPU's hourly price."""
    return get_hardware(gpu_name).hourly_price_usd / 3600 * 1e6 / tokens_per_s_per_gpu


@pytest.fixture(scope="module")
def quick_plan():
    request = plan_request(get_architecture(QUICK_MODEL), get_hardware(QUICK_GPU))
    return request, plan(request)


def test_the_cell_is_plans_best_and_it_meets_the_slo_in_simulation(quick_plan) -> None:
    request, result = quick_plan
    # The standard's request: the checkpoint's weights, the three engines, one node.
    assert request.weights == ["bf16"] and request.max_gpus == STANDARD.max_gpus
    assert request.stacks == list(STANDARD.stacks) and request.slo == STANDARD.slo
    best = result.best
    assert best is not None and best.stack in STANDARD.stacks and best.gpus <= 8
    cell = from_plan(result)
    assert cell.status == "met" and cell.engine == best.stack and cell.layout == best.layout
    assert (cell.gpus, cell.concurrency) == (best.gpus, best.concurrency)
    assert cell.output_tokens_per_s_per_gpu == best.output_tokens_per_s_per_gpu
    assert cell.usd_per_million_output_tokens == pytest.approx(
        _usd_per_million(QUICK_GPU, best.output_tokens_per_s_per_gpu)
    )
    # Meets the SLO on the estimate and in plan's simulation, which the cell reports.
    assert best.meets_slo and result.verification is not None
    assert result.verification.meets_slo and cell.candidates_simulated == result.verified
    assert cell.simulated_ttft_p50_s == result.verification.ttft_p50_s
    assert cell.simulated_ttft_p50_s <= STANDARD.slo.ttft_s
    assert cell.simulated_tpot_p50_s <= STANDARD.slo.tpot_s
    # Simulated again from scratch (the servers rebuilt), the same verdict.
    again = verify(request, best, point_servers(request, best))
    assert again.meets_slo and again.ttft_p50_s == pytest.approx(cell.simulated_ttft_p50_s)


def test_the_shipped_figures_are_current_and_cover_the_flagships(quick_plan) -> None:
    shipped = read_shipped()
    assert shipped is not None and shipped.standard == STANDARD and shipped.command == REGENERATE
    pairs = {(entry.model, entry.hardware) for entry in shipped.entries}
    assert pairs == {(model, gpu) for model in FLAGSHIP_MODELS for gpu in SHIPPED_GPUS}
    for entry in shipped.entries:
        best = entry.best
        if best.status != "met":
            assert best.note, entry  # why there is none
            continue
        assert best.engine in STANDARD.stacks and best.gpus <= STANDARD.max_gpus
        assert meets(STANDARD.slo, best.simulated_ttft_p50_s, best.simulated_tpot_p50_s, 1)
        assert meets(STANDARD.slo, best.ttft_s, best.tpot_s, 1)
        assert best.usd_per_million_output_tokens == pytest.approx(
            _usd_per_million(entry.hardware, best.output_tokens_per_s_per_gpu)
        )
    # Current: planning one of them now gives what is shipped (else regenerate the file).
    live = from_plan(quick_plan[1])
    stored = shipped.find(QUICK_MODEL, QUICK_GPU)
    assert stored is not None
    assert stored.model_dump(exclude={"source"}) == pytest.approx(
        live.model_dump(exclude={"source"})
    ), f"the shipped figures are stale: {REGENERATE}"


def test_cells_say_why_there_is_no_deployment() -> None:
    llama, h100 = get_architecture("llama-3.3-70b"), get_hardware("h100-sxm")
    one_gpu = STANDARD.model_copy(update={"max_gpus": 1})
    no_fit = best_deployment(llama, h100, one_gpu)
    assert no_fit.status == "no-fit" and "llama-3.3-70b" in no_fit.note
    assert no_fit.deployment_text() == "does not fit"
    instant = STANDARD.model_copy(update={"slo": STANDARD.slo.model_copy(update={"tpot_s": 1e-4})})
    no_slo = best_deployment(get_architecture("qwen3-8b"), h100, instant)
    assert no_slo.status == "no-slo" and "meets the SLO on plan's estimate" in no_slo.note
    assert no_slo.output_tokens_per_s_per_gpu is None
    a100 = get_hardware("a100-80gb")
    assert best_deployment(llama, a100).status == "no-engine"
    shipped = read_shipped()
    # Shipped: a GPU the engines know but the file leaves out says how to plan it.
    b300 = board_cell(llama, get_hardware("b300"), "shipped", shipped)
    assert b300.status == "not-computed" and "--current-serving live" in b300.note
    assert board_cell(llama, a100, "shipped", shipped).status == "no-engine"
    absent = board_cell(llama, h100, "shipped", None)
    assert absent.status == "not-computed" and REGENERATE in absent.note
    other = ShippedFigures.model_validate(
        {**shipped.model_dump(), "standard": one_gpu.model_dump()}
    )
    assert "another standard" in board_cell(llama, h100, "shipped", other).note
    assert board_cell(llama, h100, "none", shipped) is None
    with pytest.raises(InputError, match="unknown serving source"):
        CurrentModelsSpec(serving="fast").resolved()  # type: ignore[arg-type]


def test_board_rows_carry_the_best_deployment() -> None:
    models = ("qwen3-8b", "llama-3.3-70b", "deepseek-v3")
    board = current_model_board(CurrentModelsSpec(models=models, hardware="h200"), WORKLOADS)
    shipped = read_shipped()
    assert board.serving == "shipped" and REGENERATE in board.serving_provenance
    for row in board.rows:
        expected = shipped.find(row.model, "h200")
        assert row.best_deployment == expected.model_copy(update={"source": "shipped"})
    ranked = sorted_rows(board.rows, "slo-tokens-per-gpu")
    figures = [r.best_deployment.output_tokens_per_s_per_gpu for r in ranked]
    present = [value for value in figures if value is not None]
    assert present == sorted(present, reverse=True)
    plain = current_model_board(
        CurrentModelsSpec(models=models, hardware="h200", serving="none"), WORKLOADS
    )
    assert all(row.best_deployment is None for row in plain.rows)


def test_the_report_renders_the_slo_columns(tmp_path: Path) -> None:
    spec = CurrentModelsSpec(models=("qwen3-8b", "gpt-oss-120b", "deepseek-v3"))
    board = build_leaderboard(bundled_helm_inputs(), current_models=spec)
    files = write_report(board, tmp_path / "report")
    rows = {row.model: row.best_deployment for row in board.current_models.rows}
    met = rows["qwen3-8b"]
    figure = fmt_number(met.output_tokens_per_s_per_gpu)
    markdown, html = files.markdown.read_text(), files.html.read_text()
    for header in (SLO_TOKENS_HEADER, SLO_USD_HEADER, SLO_DEPLOYMENT_HEADER):
        assert header in markdown and f">{header}</th>" in html
    assert figure in markdown and met.deployment_text() in markdown
    assert met.deployment_text() in html and "TTFT &lt;= 2 s" in html
    table = list(
        csv.DictReader(io.StringIO((tmp_path / "report" / "current_models.csv").read_text()))
    )
    by_model = {row["model"]: row for row in table}
    assert float(
        by_model["qwen3-8b"]["best_deployment_output_tokens_per_s_per_gpu"]
    ) == pytest.approx(met.output_tokens_per_s_per_gpu)
    assert by_model["qwen3-8b"]["best_deployment_engine"] == met.engine
    for name, best in rows.items():  # a model without one says why in its row
        if best.status != "met":
            assert best.deployment_text() in markdown and best.note in markdown, name
    payload = leaderboard_payload(board)
    assert payload["current_models"]["models"][0].best_deployment == met


def test_leaderboard_command_shows_and_sorts_the_slo_columns() -> None:
    result = run_cli(cli_command(
        "leaderboard", "--limit", "1", "--current-models", "qwen3-8b,llama-3.3-70b,phi-4",
        "--current-sort", "slo-tokens-per-gpu",
    ))  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "SLO columns: plan's best deployment under 1024/1024 tokens" in " ".join(out.split())
    shipped = read_shipped()
    figures = {
        name: shipped.find(name, "h100-sxm").output_tokens_per_s_per_gpu
        for name in ("qwen3-8b", "llama-3.3-70b", "phi-4")
    }
    order = sorted(figures, key=lambda name: -figures[name])
    positions = [out.index(f"│ {name} ") for name in order]
    assert positions == sorted(positions)  # most tokens/s per GPU first
    none = run_cli(cli_command(
        "leaderboard", "--limit", "1", "--current-models", "qwen3-8b", "--current-serving", "none"
    ))  # fmt: skip
    assert none.returncode == 0 and "SLO" not in none.stdout


def test_live_json_is_plans_answer_and_imports_no_torch() -> None:
    """End to end: the board planned live prints what plan answers, as the shipped figure."""
    result = run_cli(cli_command(
        "leaderboard", "--json", "--current-models", QUICK_MODEL, "--current-serving", "live",
    ))  # fmt: skip
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["current_models"]["models"]
    best = row["best_deployment"]
    assert best["source"] == "live" and best["status"] == "met"
    stored = read_shipped().find(QUICK_MODEL, "h100-sxm").model_dump(mode="json")
    assert {k: v for k, v in best.items() if k != "source"} == pytest.approx(
        {k: v for k, v in stored.items() if k != "source"}
    )
    # The board of shipped figures runs no model: it must not import torch.
    code = (
        "import sys\n"
        "from idealized_runtime.leaderboard.current_models import CurrentModelsSpec, "
        "current_model_board\n"
        "from idealized_runtime.core.scenarios import helm_workloads\n"
        "current_model_board(CurrentModelsSpec(), helm_workloads())\n"
        "assert 'torch' not in sys.modules\n"
    )
    check = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
