"""The leaderboard grouped by architecture: the names of one architecture are one entry, the
architecture's figures are printed once, and what was measured under a name stays with it."""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.catalog import architectures, helm_model_shapes
from idealized_runtime.core.scenarios import ScenarioResult
from idealized_runtime.core.types import FittedCostModel, Provenance
from idealized_runtime.cost_model.hardware.stacks.catalog import HELM_STACK
from idealized_runtime.leaderboard.build import Leaderboard, build_leaderboard
from idealized_runtime.leaderboard.groups import group_models, ranked_groups
from idealized_runtime.leaderboard.rows import Cost, LeaderboardInputs, ModelInput, ModelRow
from idealized_runtime.report.cells import ALIAS_MARK, LEADERBOARD_COLUMNS, line_cells
from idealized_runtime.report.groups import board_lines
from idealized_runtime.report.inputs import bundled_helm_inputs, helm_workloads
from idealized_runtime.report.markdown import render_markdown
from idealized_runtime.report.render import render_html
from idealized_runtime.report.stack_tables import stack_model_pivot, workload_entries
from tests.fits import two_point_fit
from tests.servers import cli_command

SHAPE = "megatron-gptj-6b"
HELM_FIT_STACK = Provenance(runner="megatron-lm-2022", hardware="a100-80gb")


def _fit(beta_s: float) -> FittedCostModel:
    return two_point_fit(
        SHAPE, (0.05, 0.5), beta_s, largest_prompt=2048, method="helm", stack=HELM_FIT_STACK
    )


def _result(model: str, raw_runtime_s: float, accuracy: float) -> ScenarioResult:
    return ScenarioResult(
        scenario="mmlu:x",
        group="mmlu",
        model=model,
        raw_runtime_s=raw_runtime_s,
        idealized_runtime_s=None,
        mean_prompt_tokens=500.0,
        mean_output_tokens=1.0,
        accuracy=accuracy,
    )


def _gptj_inputs() -> LeaderboardInputs:
    """Three provider names on one fit, the profiled shape on a fit of its own, one provider
    with measurements, and a model of unknown shape."""
    arch = architectures()[SHAPE]
    shared, own = _fit(0.02), _fit(0.021)
    providers = ("huggingface/gptj_6b", "gooseai/gpt-j-6b", "together/gpt-j-6b")
    models = [
        ModelInput(name, architecture=arch, idealized_fit=shared, hardware="a100-80gb")
        for name in providers
    ]
    models.append(ModelInput(SHAPE, architecture=arch, idealized_fit=own, hardware="a100-80gb"))
    models.append(ModelInput("openai/babbage", idealized_fit=None))
    results = (_result("gooseai/gpt-j-6b", 0.25, 0.3), _result("openai/babbage", 0.4, 0.35))
    return LeaderboardInputs(
        models=tuple(models), scenario_results=results, workloads=helm_workloads()
    )


@pytest.fixture(scope="module")
def gptj_board() -> Leaderboard:
    return build_leaderboard(_gptj_inputs())


@pytest.fixture(scope="module")
def helm_board() -> Leaderboard:
    return build_leaderboard(bundled_helm_inputs())


def test_aliases_of_one_architecture_are_one_group(gptj_board: Leaderboard) -> None:
    groups = {group.key: group for group in gptj_board.groups}
    assert list(groups) == [SHAPE, "openai/babbage"]  # board order of their first names
    gptj = groups[SHAPE]
    assert gptj.names == (
        "huggingface/gptj_6b",
        "gooseai/gpt-j-6b",
        "together/gpt-j-6b",
        SHAPE,
    )
    assert gptj.label == SHAPE and gptj.has_aliases
    # The figures three of the four names share head the group; the shape's own fit differs.
    assert gptj.headline.model == "huggingface/gptj_6b"
    assert [gptj.differs_from_headline(row) for row in gptj.members] == [0, 0, 0, 1]
    assert not groups["openai/babbage"].has_aliases
    assert groups["openai/babbage"].label == "openai/babbage"


def test_rows_name_their_group_and_keep_their_own_figures(gptj_board: Leaderboard) -> None:
    rows = {row.model: row for row in gptj_board.models}
    goose = rows["gooseai/gpt-j-6b"]
    assert goose.group == SHAPE and not goose.group_headline
    assert goose.also_listed_as == ["huggingface/gptj_6b", "together/gpt-j-6b", SHAPE]
    assert goose.raw_runtime_s == 0.25 and goose.accuracy == 0.3 and goose.num_scenarios == 1
    assert rows["huggingface/gptj_6b"].group_headline
    assert rows["openai/babbage"].group == "openai/babbage"
    assert rows["openai/babbage"].also_listed_as == []
    # One headline per group; every name in exactly one group.
    assert sum(row.group_headline for row in gptj_board.models) == len(gptj_board.groups)
    assert sorted(n for g in gptj_board.groups for n in g.names) == sorted(rows)


def test_each_figure_is_printed_on_the_line_it_belongs_to(gptj_board: Leaderboard) -> None:
    headers = list(LEADERBOARD_COLUMNS)
    lines = {
        (line.kind, line.label): dict(zip(headers, line_cells(line, headers), strict=True))
        for line in board_lines(gptj_board.groups)
    }
    head = lines[("group", SHAPE)]
    shared = next(row for row in gptj_board.models if row.model == "huggingface/gptj_6b")
    assert head["idealized s"] == f"{shared.idealized_runtime_s:.3g}"
    assert head["parameters"] != "" and head["stack"] == HELM_STACK
    assert head["raw s"] == head["accuracy"] == head["frontier (ideal./raw)"] == ""
    goose = lines[("alias", "gooseai/gpt-j-6b")]
    assert goose["raw s"] == "0.25" and goose["accuracy"] == "0.300"
    assert goose["idealized s"] == goose["parameters"] == goose["stack"] == ""
    shape = lines[("alias", SHAPE)]
    own = next(row for row in gptj_board.models if row.model == SHAPE)
    assert shape["idealized s"] == f"{own.idealized_runtime_s:.3g}" != head["idealized s"]
    assert shape["parameters"] == ""  # one shape, one parameter count
    assert lines[("alias", "together/gpt-j-6b")]["idealized s"] == ""
    babbage = lines[("model", "openai/babbage")]
    assert babbage["raw s"] == "0.4" and babbage["idealized s"] == "–"


def _row(model: str, runtime: float | None, architecture: str | None = "arch") -> ModelRow:
    return ModelRow(
        model=model,
        architecture=architecture,
        num_parameters=None,
        num_gpus=1,
        hardware="a100-80gb",
        idealized_runtime_s=runtime,
        denoised_runtime_s=None,
        raw_runtime_s=None,
        accuracy=None,
        num_scenarios=0,
        cost=Cost(),
        frontier_count={"idealized": 0, "raw": 0},
        stack=HELM_STACK if runtime is not None else None,
    )


def test_headline_tie_goes_to_the_architectures_own_name() -> None:
    (group,) = group_models([_row("p/a", 1.0), _row("arch", 2.0)])
    assert group.headline.model == "arch"
    (group,) = group_models([_row("p/a", 1.0), _row("p/b", 2.0)])
    assert group.headline.model == "p/a"  # no own name: the first listed
    (group,) = group_models([_row("p/a", None), _row("p/b", 2.0), _row("arch", None)])
    assert group.headline.model == "p/b"  # the only idealized runtime
    (group,) = group_models([_row("p/a", None), _row("arch", None)])
    assert group.headline.model == "arch"


_runtimes = st.lists(st.sampled_from([None, 0.5, 1.0, 2.0]), min_size=1, max_size=8)


@given(_runtimes)
def test_ranking_is_by_idealized_runtime_missing_last_ties_in_board_order(
    runtimes: list[float | None],
) -> None:
    rows = [_row(f"m{i}", r, architecture=None) for i, r in enumerate(runtimes)]
    ranked = [group.key for group in ranked_groups(group_models(rows))]
    expected = sorted(
        range(len(runtimes)), key=lambda i: (runtimes[i] is None, runtimes[i] or 0, i)
    )
    assert ranked == [f"m{i}" for i in expected]


def test_bundled_helm_names_of_one_shape_are_one_entry(helm_board: Leaderboard) -> None:
    shapes: dict[str, set[str]] = defaultdict(set)
    for name, shape in helm_model_shapes().items():
        shapes[shape].add(name)
    keys = helm_board.group_keys()
    for shape, names in shapes.items():
        listed = {name for name in names if name in keys}
        assert {keys[name] for name in listed} <= {shape}, shape
    groups = {group.key: group for group in helm_board.groups}
    assert set(groups[SHAPE].names) == shapes[SHAPE]
    # No entry repeats an architecture figure on the lines of its names.
    for line in board_lines(helm_board.groups):
        if line.kind == "alias":
            assert not line.shows("architecture"), line.label
    assert len(helm_board.groups) < len(helm_board.models)


def test_markdown_and_html_print_one_entry_per_architecture(gptj_board: Leaderboard) -> None:
    markdown = render_markdown(gptj_board)
    table = markdown.split("## Leaderboard", 1)[1].split("\n\n##", 1)[0]
    assert table.count(f"| {SHAPE} |") == 1
    assert f"| {ALIAS_MARK}gooseai/gpt-j-6b |" in table
    shared = next(row for row in gptj_board.models if row.model == "huggingface/gptj_6b")
    assert table.count(f"| {shared.idealized_runtime_s:.3g} |") == 1

    html = render_html(gptj_board)
    leaderboard = html.split('id="leaderboard-table"', 1)[1].split("</table>", 1)[0]
    assert leaderboard.count("<tbody") == len(gptj_board.groups) == 2
    assert re.findall(r'data-model="([^"]+)"', leaderboard) == [
        "huggingface/gptj_6b",
        "gooseai/gpt-j-6b",
        "together/gpt-j-6b",
        SHAPE,
        "openai/babbage",
    ]
    # The head line sorts by its names' range of a measured figure.
    assert 'data-min="0.25" data-max="0.25"' in leaderboard


def test_identical_figures_share_a_row_in_the_side_tables(gptj_board: Leaderboard) -> None:
    keys = gptj_board.group_keys()
    entries = workload_entries(gptj_board.workload_rows, keys)
    per_workload = defaultdict(list)
    for entry in entries:
        per_workload[(entry["row"].workload, entry["row"].output_tokens)].append(entry["models"])
    providers = ["huggingface/gptj_6b", "gooseai/gpt-j-6b", "together/gpt-j-6b"]
    for (workload, output_tokens), models in per_workload.items():
        # The two fits differ only in the decode step: at one output token they agree.
        expected = [[*providers, SHAPE]] if output_tokens <= 1 else [providers, [SHAPE]]
        assert models == expected, workload
    board = build_leaderboard(_gptj_inputs(), stacks=[HELM_STACK])
    pivot = stack_model_pivot(board.stack_comparison, board.group_keys())
    assert [entry["models"] for entry in pivot] == [
        ["huggingface/gptj_6b", "gooseai/gpt-j-6b", "together/gpt-j-6b"],
        [SHAPE],
        ["openai/babbage"],
    ]
    # Without the groups, one entry per name as before.
    assert len(stack_model_pivot(board.stack_comparison)) == len(board.models)


def test_leaderboard_command_groups_aliases_and_json_names_groups() -> None:
    printed = subprocess.run(
        cli_command("leaderboard", "--limit", "40"),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    lines = [line for line in printed.splitlines() if line.startswith("│")]
    cells = [[cell.strip() for cell in line.strip("│").split("│")] for line in lines]
    labels = [row[0] for row in cells]
    start = labels.index(SHAPE)
    assert labels[start + 1 : start + 4] == [
        f"{ALIAS_MARK}huggingface/gptj_6b",
        f"{ALIAS_MARK}gooseai/gpt-j-6b",
        f"{ALIAS_MARK}together/gpt-j-6b",
    ]
    head, goose = cells[start], cells[start + 2]
    assert head[2] == "0.817" and head[4] == head[5] == ""  # idealized; raw, accuracy below
    assert goose[2] == "" and goose[4:6] == ["0.232", "0.300"]
    assert sum(row[2] == "0.817" for row in cells) == 1
    assert "all in the report" not in printed  # every entry shown

    payload = subprocess.run(
        cli_command("leaderboard", "--json"), capture_output=True, text=True, timeout=120
    )
    models = json.loads(payload.stdout)["models"]
    gptj = [row for row in models if row["group"] == SHAPE]
    assert {row["model"] for row in gptj} == {
        "huggingface/gptj_6b",
        "gooseai/gpt-j-6b",
        "together/gpt-j-6b",
    }
    assert sum(row["group_headline"] for row in gptj) == 1
    goose = next(row for row in gptj if row["model"] == "gooseai/gpt-j-6b")
    assert goose["also_listed_as"] == ["huggingface/gptj_6b", "together/gpt-j-6b"]
    assert goose["raw_runtime_s"] is not None and goose["accuracy"] == pytest.approx(0.3)
