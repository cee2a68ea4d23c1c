"""The leaderboard as a Markdown summary (report.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from idealized_runtime import __version__
from idealized_runtime.leaderboard.build import Leaderboard, stacks
from idealized_runtime.leaderboard.current_models import sorted_rows
from idealized_runtime.leaderboard.rows import (
    CurrentModelRow,
    StackComparison,
    StackModelRow,
)
from idealized_runtime.report.cells import (
    ALIAS_MARK,
    LEADERBOARD_COLUMNS,
    METRIC_DEFINITIONS,
    fit_rows,
    fmt_number,
    fmt_percent,
    fmt_ratio,
    fmt_seconds,
    line_cells,
)
from idealized_runtime.report.current_tables import (
    PRICE_COLUMNS,
    PRICE_NOTE,
    current_columns,
    current_title,
    serving_note,
)
from idealized_runtime.report.groups import (
    BoardLine,
    board_lines,
)
from idealized_runtime.report.stack_tables import reference_stack_rows, stack_model_pivot

# --- Markdown ----------------------------------------------------------------------------------


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *(line(r) for r in rows)])


def render_markdown(board: Leaderboard) -> str:
    """The leaderboard, the frontier of each scenario, fit quality and the methodology."""
    parts = [
        "# Idealized runtime leaderboard",
        "",
        f"Generated {board.inputs.created_at:%Y-%m-%d %H:%M UTC} by idealized-runtime "
        f"{__version__} from {board.inputs.source}.",
        "",
        "## Leaderboard",
        "",
        "Idealized and denoised runtimes: mean over the HELM scenario-group workloads; raw "
        "runtime and accuracy: mean over the scenarios HELM ran the model on. Costs per 1,000 "
        "requests at the idealized runtime. " + GROUPING_NOTE,
        "",
        _md_table(
            ["model", *MARKDOWN_COLUMNS],
            [
                [_line_label(line), *line_cells(line, MARKDOWN_COLUMNS)]
                for line in board_lines(board.groups)
            ],
        ),
        "",
        *_stack_comparison_lines(board.stack_comparison, board.group_keys()),
        *_current_model_lines(board),
        "## Pareto frontier per scenario (accuracy vs runtime)",
        "",
        _md_table(
            ["scenario", "models", "on idealized-runtime frontier", "on raw-runtime frontier"],
            [
                [
                    scenario,
                    str(len(board.frontier_points["idealized"].get(scenario, ()))),
                    ", ".join(board.frontier("idealized", scenario)) or "–",
                    ", ".join(board.frontier("raw", scenario)) or "–",
                ]
                for scenario in board.frontier_scenarios()
            ],
        ),
        "",
        "## Fit quality",
        "",
        _md_table(
            ["profile", "method", "points", "R²", "MAPE", "max error"],
            [
                [
                    str(row["profile"]),
                    str(row["method"]),
                    fmt_number(row["n_points"]),  # type: ignore[arg-type]
                    fmt_number(row["r2"], 4),  # type: ignore[arg-type]
                    fmt_percent(row["mape"]),  # type: ignore[arg-type]
                    fmt_percent(row["max_error"]),  # type: ignore[arg-type]
                ]
                for row in fit_rows(board)
            ],
        ),
        "",
        "## Methodology",
        "",
        *(f"- **{name}**: {text}" for name, text in METRIC_DEFINITIONS),
        "",
        "Stacks:",
        "",
        *(
            f"- {stack.runner} on {stack.hardware} ({stack.device_name or 'n/a'}), "
            f"{stack.dtype}, tensor parallel {stack.tensor_parallel_size}"
            + (f": {stack.notes}" if stack.notes else "")
            for stack in stacks(board.inputs)
        ),
        "",
        *_used_stack_lines(board),
        *_reference_stack_lines(),
    ]
    return "\n".join(parts)


MARKDOWN_COLUMNS = tuple(LEADERBOARD_COLUMNS)
GROUPING_NOTE = (
    "Names of one architecture (HELM's providers of one profiled shape) are one entry: its "
    "line has the architecture's figures, the lines of its names (↳) what was measured under "
    "each name, and an idealized runtime only where a name's differs."
)


def _line_label(line: BoardLine) -> str:
    return ALIAS_MARK + line.label if line.kind == "alias" else line.label


def _stack_comparison_lines(
    comparison: StackComparison | None, group_keys: Mapping[str, str]
) -> list[str]:
    """The side-by-side table: each model's mean runtime under every compared stack and the
    ratios to the first."""
    if comparison is None:
        return []
    first, others = comparison.stacks[0], comparison.stacks[1:]
    header = [
        "model",
        *(f"{stack} s" for stack in comparison.stacks),
        *(f"{stack} / {first}" for stack in others),
        "workloads",
        "note",
    ]
    rows = []
    for entry in stack_model_pivot(comparison, group_keys):
        by_stack: dict[str, StackModelRow] = entry["rows"]  # type: ignore[assignment]
        cells = [by_stack[stack] for stack in comparison.stacks]
        rows.append(
            [
                str(entry["model"]),
                *(
                    fmt_seconds(row.idealized_runtime_s)
                    if row.idealized_runtime_s is not None
                    else "n/a"
                    for row in cells
                ),
                *(fmt_ratio(by_stack[stack].ratio) for stack in others),
                str(entry["num_workloads"]),
                str(entry["note"]),
            ]
        )
    return [
        "## Stacks side by side",
        "",
        f"Idealized runtime of the same models under each stack, on {comparison.hardware}: a "
        "model's own fit where it was measured on the stack (HELM's tables for "
        "helm-megatron-2022), else the hardware model's estimate for its architecture on the "
        "stack at the tensor-parallel size HELM used. Means over the HELM scenario-group "
        f"workloads every stack covers; ratios to {first}.",
        "",
        _md_table(header, rows),
        "",
    ]


def _current_model_lines(board: Leaderboard) -> list[str]:
    """Today's models, fastest first, and the providers' prices beside their idealized $."""
    current = board.current_models
    if current is None:
        return []
    columns = current_columns(current)
    lines = [
        "## Today's models",
        "",
        current_title(current) + ". " + CURRENT_NOTE,
        *([serving_note(current) + ".", ""] if serving_note(current) else []),
        "",
        _md_table(
            ["model", *(column.header for column in columns), "note"],
            [
                [row.model, *(column.text(row) for column in columns), _notes(row)]
                for row in sorted_rows(current.rows, "idealized")
            ],
        ),
        "",
    ]
    if current.prices:
        lines += [
            f"Provider prices ({current.price_source}). " + PRICE_NOTE,
            "",
            _md_table(
                [column.header for column in PRICE_COLUMNS],
                [[column.text(row) for column in PRICE_COLUMNS] for row in current.prices],
            ),
            "",
        ]
    return lines


def _notes(row: CurrentModelRow) -> str:
    """The row's note and why it has no best deployment under the SLO, if so."""
    best = row.best_deployment
    why = best.note if best is not None and best.status != "met" else None
    return "; ".join(filter(None, (row.note, why)))


CURRENT_NOTE = (
    "From the catalog's configs and the hardware model alone: the GPUs the planner chooses for "
    "the longest workload, the idealized runtime of every HELM workload at its mean tokens, "
    "dollars at the GPU's indicative hourly price."
)


def _used_stack_lines(board: Leaderboard) -> list[str]:
    """The reference stacks the runtimes were computed on, with their calibration errors."""
    rows = reference_stack_rows(board)
    if not rows:
        return []

    def pair(row: dict[str, object], split: str) -> str:
        return f"{fmt_percent(row[f'{split}_median'])} / {fmt_percent(row[f'{split}_p90'])}"  # type: ignore[arg-type]

    return [
        "Reference stacks used (median / p90 |predicted / published - 1|):",
        "",
        _md_table(
            [
                "stack",
                "used by",
                "description",
                "sources",
                "figures",
                "in sample",
                "held out by source",
                "held out by model",
            ],
            [
                [
                    str(row["stack"]),
                    str(row["used_by"]),
                    str(row["description"]),
                    str(row["sources"]),
                    str(row["figures"]),
                    pair(row, "in_sample"),
                    pair(row, "leave_one_source_out"),
                    pair(row, "leave_one_model_out"),
                ]
                for row in rows
            ],
        ),
        "",
    ]


def _reference_stack_lines() -> list[str]:
    """The hardware model's reference stacks with their held-out errors (methodology)."""
    from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, shipped_stacks

    lines = [
        "Reference stacks of the hardware model (median |predicted / published - 1| of decode "
        "figures, held out by source / by model; `idealized-runtime stacks` has the details):",
        "",
    ]
    for name, stack in shipped_stacks().items():
        by_source = stack.errors.get("leave_one_source_out", {}).get("decode", {}).get("median")
        by_model = stack.errors.get("leave_one_model_out", {}).get("decode", {}).get("median")
        errors = (
            f"{fmt_percent(by_source)} / {fmt_percent(by_model)}"
            if by_source is not None
            else f"in sample {fmt_percent(stack.headline_error())}"
        )
        default = " (default)" if name == DEFAULT_STACK else ""
        lines.append(f"- {name}{default}: {stack.description}; {errors}")
    return [*lines, ""]
