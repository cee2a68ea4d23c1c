"""The stack of every idealized runtime, and the same models under several stacks side by side.

The stacks' calibrations change as published figures are added, so nothing here pins a runtime
from a stack: the tests check structure, that each figure is what the hardware model or the fit
gives, that ratios are the quotients of the rows they relate, and read errors from the stack
files."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from html import unescape
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idealized_runtime.core.architectures import load_architecture
from idealized_runtime.core.catalog import MEGATRON_A100_STACK, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.scenarios import Workload
from idealized_runtime.core.types import Provenance
from idealized_runtime.cost_model.hardware.calibration import megatron_tensor_parallel_sizes
from idealized_runtime.cost_model.hardware.estimate import hardware_model_estimate
from idealized_runtime.cost_model.hardware.stacks.catalog import (
    DEFAULT_STACK,
    HELM_STACK,
    get_stack,
)
from idealized_runtime.leaderboard.build import Leaderboard, build_leaderboard, leaderboard_payload
from idealized_runtime.leaderboard.rows import LeaderboardInputs, ModelInput
from idealized_runtime.leaderboard.stack_comparison import (
    compare_stacks,
    resolve_stacks,
    stack_label,
)
from idealized_runtime.report.cells import fmt_ratio
from idealized_runtime.report.csv_tables import csv_tables
from idealized_runtime.report.inputs import bundled_helm_inputs
from idealized_runtime.report.markdown import render_markdown
from idealized_runtime.report.render import render_html
from idealized_runtime.report.stack_tables import reference_stack_rows, stack_model_pivot
from tests.fits import two_point_fit
from tests.servers import run_cli

PAIR = (HELM_STACK, DEFAULT_STACK)


@pytest.fixture(scope="module")
def helm_inputs() -> LeaderboardInputs:
    return bundled_helm_inputs()


@pytest.fixture(scope="module")
def pair_board(helm_inputs: LeaderboardInputs) -> Leaderboard:
    return build_leaderboard(helm_inputs, stacks=PAIR)


# --- the stack of each runtime -----------------------------------------------------------------


def test_stack_labels() -> None:
    assert stack_label(None) is None
    assert stack_label(MEGATRON_A100_STACK) == HELM_STACK
    assert (
        stack_label(Provenance(runner="stack:tensorrt-llm", hardware="h100-sxm")) == "tensorrt-llm"
    )
    assert (
        stack_label(Provenance(runner="idealized-runtime", hardware="cpu"))
        == "idealized-runtime/cpu"
    )


def test_every_idealized_runtime_names_its_stack(pair_board: Leaderboard) -> None:
    board = pair_board
    with_runtime = [row for row in board.models if row.idealized_runtime_s is not None]
    assert with_runtime and all(row.stack == HELM_STACK for row in with_runtime)
    assert all(row.stack is None for row in board.models if row.idealized_runtime_s is None)
    assert all(
        row.stack == HELM_STACK for row in board.scenario_rows if row.idealized_runtime_s
    )  # HELM's reported runtimes and its table's fits alike
    assert all(row.stack == HELM_STACK for row in board.workload_rows if row.idealized_runtime_s)
    tables = csv_tables(board)
    for name in ("models.csv", "scenarios.csv", "workloads.csv"):
        records = list(csv.DictReader(io.StringIO(tables[name])))
        assert all(r["stack"] == HELM_STACK for r in records if r["idealized_runtime_s"])
    payload = leaderboard_payload(board)
    assert all(row.stack == HELM_STACK for row in payload["models"] if row.idealized_runtime_s)


def test_a_local_profile_is_named_by_runner_and_hardware() -> None:
    fit = two_point_fit(
        "tiny",
        (0.01, 0.02),
        0.001,
        stack=Provenance(runner="idealized-runtime", hardware="cpu", dtype="float32"),
    )
    workload = Workload("w", 10.0, 5.0, 1)
    inputs = LeaderboardInputs(
        models=(ModelInput("tiny", idealized_fit=fit),), workloads=(workload,)
    )
    board = build_leaderboard(inputs)
    assert board.models[0].stack == board.workload_rows[0].stack == "idealized-runtime/cpu"


# --- side by side ------------------------------------------------------------------------------


def test_two_stacks_side_by_side_for_the_same_models(pair_board: Leaderboard) -> None:
    comparison = pair_board.stack_comparison
    assert comparison is not None and comparison.stacks == PAIR
    assert comparison.hardware == get_stack(HELM_STACK).hardware[0]
    table = comparison.by_model()
    assert list(table) == [row.model for row in pair_board.models]  # leaderboard order
    assert all(set(rows) == set(PAIR) for rows in table.values())
    compared = 0
    for rows in table.values():
        helm, modern = rows[HELM_STACK], rows[DEFAULT_STACK]
        if helm.idealized_runtime_s is None or modern.idealized_runtime_s is None:
            continue
        compared += 1
        assert helm.ratio == pytest.approx(1.0)
        assert modern.ratio == pytest.approx(modern.idealized_runtime_s / helm.idealized_runtime_s)
        assert helm.num_workloads == modern.num_workloads > 0
        assert modern.source == "hardware-model" and modern.hardware == comparison.hardware
    assert compared >= 10  # every HELM model whose shape the paper profiled


def test_model_means_and_ratios_follow_from_the_workload_rows(pair_board: Leaderboard) -> None:
    comparison = pair_board.stack_comparison
    assert comparison is not None
    values: dict[tuple[str, str, str], float] = {}
    for row in comparison.workloads:
        if row.idealized_runtime_s is not None:
            values[(row.model, row.stack, row.workload)] = row.idealized_runtime_s
        else:
            assert row.note and row.ratio is None  # n/a says why
    for row in comparison.workloads:
        baseline = values.get((row.model, PAIR[0], row.workload))
        if row.idealized_runtime_s is None or baseline is None:
            assert row.ratio is None
        else:
            assert row.ratio == pytest.approx(row.idealized_runtime_s / baseline)
    for row in comparison.models:
        if row.idealized_runtime_s is None:
            continue
        mine = {w: v for (m, s, w), v in values.items() if (m, s) == (row.model, row.stack)}
        others = [{w for (m, s, w) in values if (m, s) == (row.model, stack)} for stack in PAIR]
        common = set.intersection(*others)
        assert row.num_workloads == len(common)
        expected = sum(mine[w] for w in common) / len(common)
        assert row.idealized_runtime_s == pytest.approx(expected)


def test_helm_column_is_helms_table_where_it_has_the_model(pair_board: Leaderboard) -> None:
    """Under helm-megatron-2022 a HELM model keeps the runtime the leaderboard shows today."""
    comparison = pair_board.stack_comparison
    assert comparison is not None
    today = {(r.model, r.workload): r.idealized_runtime_s for r in pair_board.workload_rows}
    rows = [r for r in comparison.workloads if r.stack == HELM_STACK and r.source == "fit"]
    assert rows
    for row in rows:
        assert row.idealized_runtime_s == pytest.approx(today[(row.model, row.workload)])


def test_modern_runtime_is_the_hardware_model_estimate_at_helms_tp() -> None:
    """At whole token counts a side-by-side runtime is exactly what ``estimate --arch`` gives:
    the hardware model on the stack, on HELM's GPU, at the TP HELM profiled the shape with."""
    arch = load_architecture("megatron-gptj-6b")
    big = load_architecture("megatron-openai-davinci")
    workloads = (Workload("short", 5.0, 200.0, 1), Workload("long", 1500.0, 20.0, 1))
    inputs = LeaderboardInputs(
        models=(ModelInput("gptj", architecture=arch), ModelInput("davinci", architecture=big)),
        workloads=workloads,
    )
    comparison = compare_stacks(inputs, ["lmdeploy", HELM_STACK])
    helm_tp = megatron_tensor_parallel_sizes()
    hardware = get_hardware(comparison.hardware)
    for row in comparison.workloads:
        shape = arch if row.model == "gptj" else big
        expected, name = hardware_model_estimate(
            shape,
            hardware,
            int(row.prompt_tokens),
            int(row.output_tokens),
            tp=helm_tp[shape.name],
            stack=row.stack,
        )
        assert name == row.stack and row.source == "hardware-model"
        assert row.tp == expected.tp == helm_tp[shape.name]
        assert row.idealized_runtime_s == pytest.approx(expected.runtime_s, rel=1e-9)
    helm_rows = [r for r in comparison.models if r.stack == HELM_STACK]
    assert all("not in HELM's tables" in (r.note or "") for r in helm_rows)


def test_models_without_architecture_are_na_with_the_reason(pair_board: Leaderboard) -> None:
    comparison = pair_board.stack_comparison
    assert comparison is not None
    shapeless = [r for r in comparison.models if r.architecture is None]
    assert shapeless  # HELM ran API models whose shapes are unknown
    for row in shapeless:
        assert row.idealized_runtime_s is None and row.ratio is None and row.num_workloads == 0
        assert row.note and "architecture" in row.note
    markdown = render_markdown(pair_board)
    assert f"| {shapeless[0].model} | n/a | n/a |" in markdown


def test_workloads_beyond_the_context_are_na_and_left_out_of_the_means() -> None:
    arch = load_architecture("megatron-gptj-6b")  # 2048-token context
    workloads = (Workload("fits", 100.0, 10.0, 1), Workload("too-long", 2100.0, 10.0, 1))
    fit = two_point_fit(
        "gptj", (0.02, 0.5), 0.02, largest_prompt=4096, method="helm", stack=MEGATRON_A100_STACK
    )
    model = ModelInput("gptj", architecture=arch, idealized_fit=fit, hardware="a100-80gb")
    comparison = compare_stacks(LeaderboardInputs(models=(model,), workloads=workloads), PAIR)
    rows = {(r.stack, r.workload): r for r in comparison.workloads}
    assert rows[(HELM_STACK, "too-long")].idealized_runtime_s is not None  # the fit extrapolates
    modern = rows[(DEFAULT_STACK, "too-long")]
    assert modern.idealized_runtime_s is None and "too-long" in (modern.note or "")
    assert modern.ratio is None
    means = {r.stack: r for r in comparison.models}
    assert means[HELM_STACK].num_workloads == means[DEFAULT_STACK].num_workloads == 1
    assert means[HELM_STACK].idealized_runtime_s == pytest.approx(
        rows[(HELM_STACK, "fits")].idealized_runtime_s
    )


def test_stack_names_resolve_or_fail_in_one_line() -> None:
    assert resolve_stacks(["a100-megatron-2022", " pytorch-compiled", HELM_STACK]) == PAIR
    for names in (["nope"], ["", " "]):
        with pytest.raises(InputError) as error:
            resolve_stacks(names)
        assert "\n" not in str(error.value)
    with pytest.raises(InputError, match="unknown stack 'nope'"):
        build_leaderboard(LeaderboardInputs(models=()), stacks=[HELM_STACK, "nope"])


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(order=st.permutations(sorted(["helm-megatron-2022", "pytorch-compiled", "lmdeploy"])))
def test_ratios_invert_when_the_baseline_changes(helm_inputs, order: list[str]) -> None:
    """Ratio of b to a times ratio of a to b is 1, whichever stacks are listed around them."""
    forward = compare_stacks(helm_inputs, order)
    backward = compare_stacks(helm_inputs, list(reversed(order)))
    first, last = order[0], order[-1]
    there = {r.model: r.ratio for r in forward.models if r.stack == last}
    back = {r.model: r.ratio for r in backward.models if r.stack == first}
    assert there.keys() == back.keys()
    both = [m for m in there if there[m] is not None]
    assert both
    for model in both:
        assert back[model] is not None and math.isclose(there[model] * back[model], 1.0)


# --- outputs -----------------------------------------------------------------------------------


def test_markdown_and_csv_show_both_stacks_and_the_ratio(pair_board: Leaderboard) -> None:
    markdown = render_markdown(pair_board)
    header = f"| model | {HELM_STACK} s | {DEFAULT_STACK} s | {DEFAULT_STACK} / {HELM_STACK} |"
    assert "## Stacks side by side" in markdown and header in markdown
    comparison = pair_board.stack_comparison
    assert comparison is not None
    davinci = comparison.by_model()["openai/davinci"]
    assert f"| {fmt_ratio(davinci[DEFAULT_STACK].ratio)} |" in markdown
    tables = csv_tables(pair_board)
    records = list(csv.DictReader(io.StringIO(tables["stacks.csv"])))
    assert {r["stack"] for r in records} == set(PAIR)
    by_key = {(r["model"], r["stack"]): r for r in records}
    for (model, stack), record in by_key.items():
        if stack == DEFAULT_STACK and record["ratio"]:
            baseline = float(by_key[(model, HELM_STACK)]["idealized_runtime_s"])
            assert float(record["ratio"]) == pytest.approx(
                float(record["idealized_runtime_s"]) / baseline
            )
    workloads = list(csv.DictReader(io.StringIO(tables["stack_workloads.csv"])))
    assert len(workloads) == len(comparison.workloads)
    assert "stacks.csv" not in csv_tables(build_leaderboard(LeaderboardInputs(models=())))


def _cell_texts(html: str, table_id: str) -> list[list[str]]:
    body = html.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body.split("<tbody>", 1)[1], flags=re.S)
    return [
        [
            unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        for row in rows
    ]


def test_html_methodology_lists_the_stacks_used_with_their_errors(pair_board: Leaderboard) -> None:
    html = render_html(pair_board)
    assert 'id="stack-table"' in html and 'id="stack-workload-table"' in html
    cells = _cell_texts(html, "reference-stack-table")
    assert {row[0].removesuffix(" (default)") for row in cells} == set(PAIR)
    for name in PAIR:
        stack = get_stack(name)
        shown = [row for row in cells if row[0].startswith(name)]
        for row in shown:
            kind = {"decode": "decode", "TTFT": "ttft"}[row[4]]
            assert "stack comparison" in row[1].split(", ")  # the table that used it
            assert row[2] == stack.description and row[3] == str(len(stack.sources))
            for index, split in enumerate(
                ("in_sample", "leave_one_source_out", "leave_one_model_out")
            ):
                for offset, stat in enumerate(("median", "p90")):
                    value = stack.errors.get(split, {}).get(kind, {}).get(stat)
                    expected = "–" if value is None else f"{100 * value:.2f}%"
                    assert row[5 + 2 * index + offset] == expected, (name, kind, split, stat)
    assert len(cells) == len(reference_stack_rows(pair_board))


def test_a_note_every_row_has_is_said_once_under_the_terminal_table(
    pair_board: Leaderboard,
) -> None:
    """``leaderboard --stacks``: a note shared by every row goes to the caption, once; the note
    column keeps what differs between rows (or goes when nothing does)."""
    from rich.console import Console

    from idealized_runtime.report.terminal import stack_table

    table = stack_table(pair_board)
    console = Console(width=400, record=True)
    console.print(table)
    text = console.export_text()
    pivot = stack_model_pivot(pair_board.stack_comparison, pair_board.group_keys())
    shown = [e for e in pivot if any(r.idealized_runtime_s is not None for r in e["rows"].values())]
    notes = [set(filter(None, str(entry["note"]).split("; "))) for entry in shown]
    common = set.intersection(*notes)
    assert common, "the bundled board has a note on every row (workloads beyond 2,048 tokens)"
    for note in common:
        assert text.count(note) == 1 and f"every row: {note}" in (table.caption or "")
    assert ("note" in [column.header for column in table.columns]) == any(n - common for n in notes)


# --- CLI ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["leaderboard", "report"])
def test_unknown_stack_is_one_line_exit_2(tmp_path: Path, command: str) -> None:
    out = tmp_path / "report"
    args = ["-o", str(out)] if command == "report" else []
    result = run_cli(command, "--stacks", f"{HELM_STACK},nope", *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: unknown stack 'nope'")
    assert result.stderr.strip().count("\n") == 0
    assert not out.exists()


def test_leaderboard_command_json_side_by_side() -> None:
    result = run_cli("leaderboard", "--stacks", "a100-megatron-2022,pytorch-compiled", "--json")
    assert result.returncode == 0, result.stderr
    board = json.loads(result.stdout)
    assert board["stacks"] == list(PAIR)
    rows = {(r["model"], r["stack"]): r for r in board["stack_models"]}
    helm, modern = rows[("openai/davinci", HELM_STACK)], rows[("openai/davinci", DEFAULT_STACK)]
    assert modern["ratio"] == pytest.approx(
        modern["idealized_runtime_s"] / helm["idealized_runtime_s"]
    )
    davinci = next(m for m in board["models"] if m["model"] == "openai/davinci")
    assert davinci["stack"] == HELM_STACK
    table = run_cli("leaderboard", "--stacks", ",".join(PAIR), "--limit", "3")
    assert table.returncode == 0, table.stderr
    assert f"{DEFAULT_STACK} /" in table.stdout and "n/a under every stack" in table.stdout


def test_report_command_writes_the_side_by_side_tables(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = run_cli("report", "-o", str(out), "--stacks", ",".join(PAIR))
    assert result.returncode == 0, result.stderr
    stacks = list(csv.DictReader((out / "stacks.csv").open(encoding="utf-8")))
    assert {row["stack"] for row in stacks} == set(PAIR)
    assert (out / "stack_workloads.csv").is_file()
    html = (out / "index.html").read_text(encoding="utf-8")
    assert 'id="stack-table"' in html and 'id="reference-stack-table"' in html
    assert "## Stacks side by side" in (out / "report.md").read_text(encoding="utf-8")
