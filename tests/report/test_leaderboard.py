"""Leaderboard metrics and Pareto frontiers, checked against brute force."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.catalog import helm_table
from idealized_runtime.core.scenarios import ScenarioResult, helm_scenario_results
from idealized_runtime.core.types import FittedCostModel
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.fitting.helm_format import import_helm_table
from idealized_runtime.leaderboard.build import build_leaderboard
from idealized_runtime.leaderboard.metrics import cost_per_1000, pareto_front
from idealized_runtime.leaderboard.rows import CostRates, LeaderboardInputs, ModelInput
from idealized_runtime.report.inputs import bundled_helm_inputs, helm_workloads
from idealized_runtime.report.markdown import render_markdown
from tests.fits import two_point_fit


def brute_force_front(points: dict[str, tuple[float, float]]) -> set[str]:
    """On the front iff no other point is at least as good in both and better in one."""

    def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] <= b[0] and a[1] >= b[1] and (a[0] < b[0] or a[1] > b[1])

    return {
        name
        for name, point in points.items()
        if not any(dominates(other, point) for o, other in points.items() if o != name)
    }


# Few distinct values so that ties in runtime, in accuracy and exact duplicates are common.
_value = st.sampled_from([0.1, 0.2, 0.3, 0.5, 1.0])
_points = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3), st.tuples(_value, _value))


@given(_points)
def test_pareto_front_matches_brute_force(points: dict[str, tuple[float, float]]) -> None:
    assert pareto_front(points) == brute_force_front(points)


@pytest.fixture(scope="module")
def helm_board():
    return build_leaderboard(bundled_helm_inputs())


def test_bundled_helm_frontiers_match_brute_force(helm_board) -> None:
    """Computed straight from the shipped CSV, independent of the leaderboard's rows: HELM's
    reported idealized runtime, or (where HELM left it blank: ai21/j1-grande) HELM's idealized
    table evaluated at the model's mean tokens. A model HELM ran twice keeps its first run."""
    table = import_helm_table(helm_table("idealized"))
    by_scenario: dict[str, dict[str, tuple[float, float]]] = {}
    raw_by_scenario: dict[str, dict[str, tuple[float, float]]] = {}
    for r in helm_scenario_results():
        if r.accuracy is None:
            continue
        idealized = r.idealized_runtime_s
        if idealized is None and r.model in table:
            idealized = float(
                predict_runtime(table[r.model], r.mean_prompt_tokens, r.mean_output_tokens)
            )
        if idealized is not None:
            by_scenario.setdefault(r.scenario, {}).setdefault(r.model, (idealized, r.accuracy))
        if r.raw_runtime_s is not None:
            raw_by_scenario.setdefault(r.scenario, {}).setdefault(
                r.model, (r.raw_runtime_s, r.accuracy)
            )
    assert len(by_scenario) >= 70  # HELM has accuracies for 80 scenarios
    assert set(helm_board.frontier_points["idealized"]) == set(by_scenario)
    for scenario, points in by_scenario.items():
        assert set(helm_board.frontier("idealized", scenario)) == brute_force_front(points)
    for scenario, points in raw_by_scenario.items():
        assert set(helm_board.frontier("raw", scenario)) == brute_force_front(points)


def test_report_states_each_scenarios_frontier(helm_board) -> None:
    markdown = render_markdown(helm_board)
    for scenario in helm_board.frontier_scenarios():
        line = next(line for line in markdown.splitlines() if line.startswith(f"| {scenario} |"))
        idealized_cell = line.split(" | ")[2]
        assert set(idealized_cell.split(", ")) == set(helm_board.frontier("idealized", scenario))


def test_scenario_rows_prefer_helm_reported_idealized_runtime(helm_board) -> None:
    row = next(r for r in helm_board.scenario_rows if r.model == "openai/davinci")
    source = next(
        r for r in helm_scenario_results() if r.model == row.model and r.scenario == row.scenario
    )
    assert row.idealized_source == "helm-reported"
    assert row.idealized_runtime_s == source.idealized_runtime_s
    assert row.raw_runtime_s == source.raw_runtime_s
    assert row.denoised_runtime_s is not None  # davinci is in HELM's denoised table


def _fit(model: str, alpha: float, beta: float) -> FittedCostModel:
    return two_point_fit(model, (alpha, alpha), beta)


def test_workload_rows_evaluate_fits_and_costs() -> None:
    rates = {"gpu": CostRates("gpu", usd_per_gpu_second=3.6 / 3600, joules_per_gpu_second=400)}
    model = ModelInput("m", idealized_fit=_fit("m", 0.5, 0.01), num_gpus=2, hardware="gpu")
    inputs = LeaderboardInputs(models=(model,), workloads=helm_workloads(), cost_rates=rates)
    board = build_leaderboard(inputs)
    row = board.workload_rows[0]
    expected = 0.5 + 0.01 * (max(row.output_tokens, 1.0) - 1)  # o < 1 is clamped
    assert row.idealized_runtime_s == pytest.approx(expected)
    assert row.cost.gpu_seconds == pytest.approx(expected * 2 * 1000)
    assert row.cost.usd == pytest.approx(expected * 2 * 1000 * 0.001)
    assert row.cost.kilojoules == pytest.approx(expected * 2 * 1000 * 400 / 1000)
    summary = board.models[0]
    assert summary.num_gpus == 2
    assert summary.idealized_runtime_s == pytest.approx(
        sum(r.idealized_runtime_s for r in board.workload_rows) / len(board.workload_rows)
    )


def test_cost_unknown_without_gpu_count() -> None:
    assert cost_per_1000(1.0, None, None).gpu_seconds is None
    assert cost_per_1000(1.0, 1, None).usd is None


def test_scenario_frontier_ignores_models_without_accuracy() -> None:
    results = tuple(
        ScenarioResult("s", "s", name, raw, ideal, 10.0, 2.0, acc)
        for name, raw, ideal, acc in [
            ("a", 1.0, 0.5, 0.9),
            ("b", 0.5, 0.2, 0.5),
            ("c", 0.1, 0.1, None),  # fastest, but no accuracy: not a point at all
            ("d", 2.0, 0.6, 0.4),  # dominated by a
        ]
    )
    board = build_leaderboard(LeaderboardInputs(models=(), scenario_results=results))
    assert board.frontier("idealized", "s") == ["b", "a"]
    assert {p.model for p in board.frontier_points["idealized"]["s"]} == {"a", "b", "d"}
    assert {m.model for m in board.models} == {"a", "b", "c", "d"}


def test_scenario_loader_keeps_one_run_per_model_and_scenario() -> None:
    # HELM ran a few (model, scenario) pairs twice; the loader keeps the first run, so the
    # frontiers, the model summaries and the database all see one result per pair.
    import csv

    from idealized_runtime.core.catalog import helm_scenarios_csv_path
    from idealized_runtime.core.scenarios import helm_scenario_results

    results = helm_scenario_results()
    pairs = [(r.model, r.scenario) for r in results]
    assert len(pairs) == len(set(pairs))
    with helm_scenarios_csv_path().open(encoding="utf-8", newline="") as handle:
        prefix = "boolq:model=openai_davinci"  # plus a rerun with data augmentation
        davinci = [row for row in csv.DictReader(handle) if row["scenario"].startswith(prefix)]
    assert len(davinci) == 2
    (kept,) = [r for r in results if (r.model, r.scenario) == ("openai/davinci", "boolq")]
    assert kept.raw_runtime_s == pytest.approx(float(davinci[0]["inference_runtime"]))


def test_model_summary_leaves_out_scenarios_without_values() -> None:
    # HELM listed s3 without any value (the database stores nothing for it: no scenario).
    results = (
        ScenarioResult("s1", "s", "a", 1.0, 0.5, 10.0, 2.0, 0.8),
        ScenarioResult("s2", "s", "a", 2.0, 0.5, 10.0, 2.0, 0.6),
        ScenarioResult("s3", "s", "a", None, None, None, None, None),
    )
    board = build_leaderboard(LeaderboardInputs(models=(), scenario_results=results))
    (summary,) = board.models
    assert summary.num_scenarios == 2
    assert summary.accuracy == pytest.approx(0.7)
    assert summary.raw_runtime_s == pytest.approx(1.5)


def test_large_numbers_are_written_with_thousands_separators() -> None:
    from idealized_runtime.report.cells import fmt_number

    assert fmt_number(25_213.4) == "25,200"
    assert fmt_number(1_245.0, 4) == "1,245"
    assert fmt_number(0.4606) == "0.461"
    assert fmt_number(None) == "–"


@given(
    st.lists(
        st.tuples(
            st.floats(70, 440), st.floats(35, 270), st.text("abcdefgh-", min_size=1, max_size=16)
        ),
        min_size=1,
        max_size=12,
    )
)
def test_frontier_labels_never_overlap_one_another_or_a_point(
    labels: list[tuple[float, float, str]],
) -> None:
    """Each placed label's box lies in the plot and overlaps no other label and no point; a
    label with no free place is left to the point's tooltip."""
    from idealized_runtime.report.svg import (
        HEIGHT,
        LABEL_CHAR_PX,
        LABEL_HEIGHT_PX,
        MARGIN_BOTTOM,
        MARGIN_LEFT,
        MARGIN_RIGHT,
        WIDTH,
        place_labels,
    )

    marks = [(x, y) for x, y, _ in labels]
    boxes = []
    for (_, _, text), placed in zip(labels, place_labels(labels, marks), strict=True):
        if placed is None:
            continue
        x, baseline, anchor = placed
        assert anchor == "start"
        box = (x, baseline - LABEL_HEIGHT_PX + 2, x + LABEL_CHAR_PX * len(text), baseline + 2)
        assert box[0] >= MARGIN_LEFT and box[2] <= WIDTH - MARGIN_RIGHT
        assert box[3] <= HEIGHT - MARGIN_BOTTOM
        boxes.append(box)
    dots = [(x - 5, y - 5, x + 5, y + 5) for x, y in marks]
    for index, box in enumerate(boxes):
        for other in boxes[index + 1 :] + dots:
            assert not (box[0] < other[2] and other[0] < box[2] and box[1] < other[3]
                        and other[1] < box[3]), (box, other)  # fmt: skip
