"""The leaderboard in the terminal (Rich tables): the fastest models grouped by architecture,
the models side by side under several stacks, and today's models (with providers' prices)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text

from idealized_runtime.leaderboard.build import Leaderboard
from idealized_runtime.leaderboard.current_models import sorted_rows
from idealized_runtime.leaderboard.groups import ModelGroup, ranked_groups
from idealized_runtime.report.cells import ALIAS_MARK, fmt_ratio, fmt_seconds, line_cells
from idealized_runtime.report.current_tables import (
    PRICE_COLUMNS,
    PRICE_NOTE,
    current_columns,
    current_title,
    serving_note,
)
from idealized_runtime.report.groups import BoardLine, board_lines
from idealized_runtime.report.stack_tables import stack_model_pivot

SUMMARY_COLUMNS = (
    "parameters",
    "idealized s",
    "denoised s",
    "raw s",
    "accuracy",
    "frontier (ideal./raw)",
    "stack",
)


def _label(line: BoardLine, highlight: Iterable[str]) -> Text:
    """The line's name on one line (cut short with an ellipsis in a narrow column rather than
    wrapped at the space after the alias mark)."""
    label = Text(no_wrap=True, overflow="ellipsis")
    if line.kind == "alias":
        label.append(f" {ALIAS_MARK}", style="dim")
    label.append(line.label, style="bold" if line.label in highlight else "")
    return label


def summary_table(
    board: Leaderboard, *, limit: int, highlight: Iterable[str] = frozenset()
) -> Table:
    """The fastest models by idealized runtime, one entry per architecture with a line per
    name under it (entries with a highlighted name always shown); ``limit`` counts entries."""
    highlight = set(highlight)
    table = Table(title="Leaderboard (idealized runtime: mean over HELM scenario workloads)")
    table.add_column("model", justify="left")
    for column in SUMMARY_COLUMNS[:-1]:
        table.add_column(column, justify="right")
    table.add_column(SUMMARY_COLUMNS[-1], no_wrap=True)  # whole names: the others give way
    ranked = ranked_groups(board.groups)

    def highlighted(group: ModelGroup) -> bool:
        return not highlight.isdisjoint(group.names)

    shown = [group for group in ranked if highlighted(group)]
    shown += [group for group in ranked if not highlighted(group)][: max(limit - len(shown), 0)]
    for line in board_lines(shown):
        table.add_row(_label(line, highlight), *line_cells(line, SUMMARY_COLUMNS))
    if len(board.groups) > len(shown):
        names = sum(len(group.members) for group in shown)
        table.caption = (
            f"{len(shown)} of {len(board.groups)} models ({names} of {len(board.models)} "
            "names); all in the report"
        )
    return table


def _seconds_or_na(value: float | None) -> str:
    return "n/a" if value is None else fmt_seconds(value)


def stack_table(board: Leaderboard) -> Table:
    """The models side by side under the compared stacks, with the ratios to the first (names
    of one architecture with the same figures on one row)."""
    comparison = board.stack_comparison
    assert comparison is not None
    first, others = comparison.stacks[0], comparison.stacks[1:]
    table = Table(
        title=f"Idealized runtime under each stack on {comparison.hardware} "
        "(mean over the HELM workloads all of them cover)"
    )
    table.add_column("model")
    for stack in comparison.stacks:
        table.add_column(f"{stack} s", justify="right")
    for stack in others:
        table.add_column(f"{stack} / {first}", justify="right")
    table.add_column("workloads", justify="right")
    missing: dict[str, list[str]] = {}  # note -> models n/a under every stack
    shown: list[tuple[list[str], list[str]]] = []  # cells and notes of each row
    for entry in stack_model_pivot(comparison, board.group_keys()):
        rows = entry["rows"]
        if all(row.idealized_runtime_s is None for row in rows.values()):
            missing.setdefault(str(entry["note"]), []).append(str(entry["model"]))
            continue
        cells = [
            str(entry["model"]),
            *(_seconds_or_na(rows[s].idealized_runtime_s) for s in comparison.stacks),
            *(fmt_ratio(rows[s].ratio) for s in others),
            str(entry["num_workloads"]),
        ]
        shown.append((cells, [part for part in str(entry["note"]).split("; ") if part]))
    # A note every row has is said once, under the table; the column keeps the others.
    common = set.intersection(*(set(notes) for _, notes in shown)) if shown else set()
    own = [[note for note in notes if note not in common] for _, notes in shown]
    if any(own):
        table.add_column("note")
    for (cells, _), notes in zip(shown, own, strict=True):
        table.add_row(*cells, *(["; ".join(notes)] if any(own) else []))
    captions = [f"every row: {note}" for note in sorted(common)]
    captions += [
        f"n/a under every stack ({note}): {', '.join(models)}" for note, models in missing.items()
    ]
    if captions:
        table.caption = "; ".join(captions)
    return table


def current_models_table(board: Leaderboard, *, sort: str = "idealized") -> Table:
    """Today's models on the chosen GPU and stack beside HELM's 2022 stack, best first by
    ``sort`` (``current_models.SORT_KEYS``)."""
    current = board.current_models
    assert current is not None
    columns = current_columns(current)
    table = Table(title=current_title(current))
    table.add_column("model", no_wrap=True)
    for column in columns:
        # Folded rather than cut: every figure and deployment reads whole in a narrow terminal.
        table.add_column(
            column.header, justify="left" if column.is_text else "right", overflow="fold"
        )
    for row in sorted_rows(current.rows, sort):
        table.add_row(row.model, *(column.text(row) for column in columns))
    notes = sorted({row.note for row in current.rows if row.note})
    notes += _best_notes(current.rows)
    if serving_note(current):
        notes.append(serving_note(current))
    if notes:
        table.caption = "; ".join(notes)
    return table


def _best_notes(rows) -> list[str]:
    """Why a model has no best deployment, one line per model."""
    return [
        f"{row.model}: {row.best_deployment.note}"
        for row in rows
        if row.best_deployment is not None
        and row.best_deployment.status != "met"
        and row.best_deployment.note
    ]


def price_table(board: Leaderboard) -> Table:
    """The providers' prices of the board's models beside their idealized dollars."""
    current = board.current_models
    assert current is not None and current.prices
    table = Table(title=f"Provider prices ({current.price_source}) beside the idealized dollars")
    for column in PRICE_COLUMNS:
        table.add_column(
            column.header, justify="left" if column.header in TEXT_PRICE_COLUMNS else "right"
        )
    for row in current.prices:
        table.add_row(*(column.text(row) for column in PRICE_COLUMNS))
    table.caption = PRICE_NOTE
    return table


TEXT_PRICE_COLUMNS = ("provider", "model", "architecture")
