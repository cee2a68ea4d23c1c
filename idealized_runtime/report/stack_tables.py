"""The reference stacks in the report: models and workloads side by side under several stacks,
and each shipped stack's calibration errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import BaseModel

from idealized_runtime.leaderboard.build import Leaderboard
from idealized_runtime.leaderboard.rows import (
    ModelRow,
    ScenarioRow,
    StackComparison,
    StackModelRow,
    StackWorkloadRow,
    WorkloadRow,
)
from idealized_runtime.report.groups import (
    merge_aliases,
    names_label,
)

# --- stacks ------------------------------------------------------------------------------------


def _figures(rows: Iterable[BaseModel]) -> tuple[str, ...]:
    """Rows' figures without the model's name: equal for names that share them."""
    return tuple(row.model_dump_json(exclude={"model"}) for row in rows)


def stack_model_pivot(
    comparison: StackComparison | None, group_keys: Mapping[str, str] | None = None
) -> list[dict[str, object]]:
    """One entry per model: its row under each compared stack (stack -> ``StackModelRow``).
    With ``group_keys`` (model -> group, ``Leaderboard.group_keys``), names of one architecture
    with the same figures under every stack are one entry (``models`` lists them)."""
    if comparison is None:
        return []
    by_model = comparison.by_model().items()
    merged = merge_aliases(
        ((model, _figures(rows.values()), rows) for model, rows in by_model), group_keys or {}
    )
    return [
        {
            "model": names_label(models),
            "models": models,
            "architecture": next(iter(rows.values())).architecture,
            "rows": rows,
            "num_workloads": max(row.num_workloads for row in rows.values()),
            "note": _stack_notes(rows.values()),
        }
        for models, rows in merged
    ]


def _stack_notes(rows: Iterable[StackModelRow]) -> str:
    """The rows' notes, each once, with the stacks it applies to unless it applies to all:
    "why (stack, stack)"."""
    rows = list(rows)
    stacks_by_note: dict[str, list[str]] = {}
    for row in rows:
        if row.note:
            stacks_by_note.setdefault(row.note, []).append(row.stack)
    return "; ".join(
        note if len(names) == len(rows) else f"{note} ({', '.join(names)})"
        for note, names in stacks_by_note.items()
    )


def stack_workload_pivot(
    comparison: StackComparison | None, group_keys: Mapping[str, str] | None = None
) -> list[dict[str, object]]:
    """One entry per (model, workload): its row under each compared stack; with
    ``group_keys`` one per (architecture, workload) for names with the same figures."""
    if comparison is None:
        return []
    table: dict[tuple[str, str], dict[str, StackWorkloadRow]] = {}
    for row in comparison.workloads:
        table.setdefault((row.model, row.workload), {})[row.stack] = row
    merged = merge_aliases(
        (
            (model, (workload, *_figures(rows.values())), rows)
            for (model, workload), rows in table.items()
        ),
        group_keys or {},
    )
    entries = []
    for models, rows in merged:
        first = next(iter(rows.values()))
        entries.append(
            {
                "model": names_label(models),
                "models": models,
                "workload": first.workload,
                "prompt_tokens": first.prompt_tokens,
                "output_tokens": first.output_tokens,
                "rows": rows,
            }
        )
    return entries


def workload_entries(
    rows: Iterable[WorkloadRow], group_keys: Mapping[str, str]
) -> list[dict[str, object]]:
    """The per-workload rows, names of one architecture with the same figures at a workload as
    one entry (``models`` lists them; ``row`` is the first name's)."""
    merged = merge_aliases(((row.model, _figures([row]), row) for row in rows), group_keys)
    return [{"models": models, "row": row} for models, row in merged]


LEADERBOARD_TABLE = "leaderboard"
COMPARISON_TABLE = "stack comparison"
CURRENT_TABLE = "today's models"


def used_stacks(board: Leaderboard) -> dict[str, list[str]]:
    """Reference stacks the board's runtimes were computed on, each with the tables that used
    it: the compared ones first, then those of the leaderboard's rows, then today's models."""
    from idealized_runtime.cost_model.hardware.stacks.catalog import shipped_stacks

    used: dict[str, list[str]] = {}

    def add(names: Iterable[str], table: str) -> None:
        for name in names:
            tables = used.setdefault(name, [])
            if table not in tables:
                tables.append(table)

    if board.stack_comparison:
        add(board.stack_comparison.stacks, COMPARISON_TABLE)
    rows: list[ModelRow | ScenarioRow | WorkloadRow] = [
        *board.models,
        *board.scenario_rows,
        *board.workload_rows,
    ]
    add(sorted({row.stack for row in rows if row.stack}), LEADERBOARD_TABLE)
    if board.current_models:
        current = board.current_models
        add(dict.fromkeys((current.stack, current.baseline_stack)), CURRENT_TABLE)
    shipped = shipped_stacks()
    return {name: tables for name, tables in used.items() if name in shipped}


def used_stack_names(board: Leaderboard) -> list[str]:
    """The names of ``used_stacks``, in its order."""
    return list(used_stacks(board))


def used_hardware(board: Leaderboard) -> dict[str, list[str]]:
    """Accelerators the board's costs refer to, each with the tables that used it."""
    used: dict[str, list[str]] = {}
    for name in sorted({row.hardware for row in board.models if row.hardware}):
        used.setdefault(name, []).append(LEADERBOARD_TABLE)
    if board.stack_comparison and board.stack_comparison.hardware:
        used.setdefault(board.stack_comparison.hardware, []).append(COMPARISON_TABLE)
    if board.current_models:
        used.setdefault(board.current_models.hardware, []).append(CURRENT_TABLE)
    return {
        name: list(dict.fromkeys(tables))
        for name, tables in used.items()
        if name in board.inputs.cost_rates
    }


ERROR_SPLITS = ("in_sample", "leave_one_source_out", "leave_one_model_out")
FIGURE_KINDS = {"decode": "decode", "ttft": "TTFT"}


def reference_stack_rows(board: Leaderboard) -> list[dict[str, object]]:
    """Per reference stack used and figure kind with errors: the stack's description, number
    of published sources, and median / p90 |predicted / published - 1| in sample and held out
    by source and by model, as its calibration file records them."""
    from idealized_runtime.cost_model.hardware.stacks.catalog import DEFAULT_STACK, get_stack

    rows = []
    for name, tables in used_stacks(board).items():
        stack = get_stack(name)
        for kind, label in FIGURE_KINDS.items():
            errors = {split: stack.errors.get(split, {}).get(kind, {}) for split in ERROR_SPLITS}
            if not any(found.get("n") for found in errors.values()):
                continue
            rows.append(
                {
                    "stack": name,
                    "used_by": ", ".join(tables),
                    "default": name == DEFAULT_STACK,
                    "description": stack.description,
                    "sources": len(stack.sources),
                    "figures": label,
                    "n": errors["in_sample"].get("n"),
                    **{
                        f"{split}_{stat}": errors[split].get(stat)
                        for split in ERROR_SPLITS
                        for stat in ("median", "p90")
                    },
                }
            )
    return rows
