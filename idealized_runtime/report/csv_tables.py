"""The leaderboard as CSV tables (models, scenarios, workloads, frontiers, fits, stacks, today's
models and providers' prices): one row per row of the board, every column present in every row.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from pydantic import BaseModel

from idealized_runtime.leaderboard.build import Leaderboard
from idealized_runtime.leaderboard.rows import (
    FRONTIER_KINDS,
    Cost,
    ModelRow,
    ScenarioRow,
    StackModelRow,
    StackWorkloadRow,
    WorkloadRow,
)
from idealized_runtime.report.cells import fit_rows

CSV_NAMES = ("models.csv", "scenarios.csv", "workloads.csv", "frontiers.csv", "fits.csv")
# Written when the board compares stacks (``build_leaderboard(..., stacks=...)``).
STACK_CSV_NAMES = ("stacks.csv", "stack_workloads.csv")
# Written with today's models (``build_leaderboard(..., current_models=...)``), the prices with
# a price table.
CURRENT_CSV_NAMES = ("current_models.csv", "provider_prices.csv")


# --- CSV ---------------------------------------------------------------------------------------


def _cost_columns(cost: Cost) -> dict[str, object]:
    """A row's cost per 1,000 requests, as the model and workload tables name its columns."""
    return {
        "gpu_seconds_per_1000": cost.gpu_seconds,
        "usd_per_1000": cost.usd,
        "kilojoules_per_1000": cost.kilojoules,
    }


def _mean_request_columns(row: ScenarioRow | WorkloadRow) -> dict[str, object]:
    """The model and the mean request it was measured on (a scenario's or a workload's)."""
    return {
        "model": row.model,
        "mean_prompt_tokens": row.prompt_tokens,
        "mean_output_tokens": row.output_tokens,
    }


def _model_record(row: ModelRow) -> dict[str, object]:
    return {
        "model": row.model,
        "architecture": row.architecture or "",
        "num_parameters": row.num_parameters,
        "num_gpus": row.num_gpus,
        "hardware": row.hardware or "",
        "idealized_runtime_s": row.idealized_runtime_s,
        "denoised_runtime_s": row.denoised_runtime_s,
        "raw_runtime_s": row.raw_runtime_s,
        "accuracy": row.accuracy,
        "num_scenarios": row.num_scenarios,
        **_cost_columns(row.cost),
        "frontier_count_idealized": row.frontier_count["idealized"],
        "frontier_count_raw": row.frontier_count["raw"],
        "stack": row.stack or "",
        "group": row.group or "",
    }


def _scenario_record(row: ScenarioRow) -> dict[str, object]:
    return {
        "scenario": row.scenario,
        "group": row.group,
        **_mean_request_columns(row),
        "idealized_runtime_s": row.idealized_runtime_s,
        "idealized_source": row.idealized_source or "",
        "denoised_runtime_s": row.denoised_runtime_s,
        "raw_runtime_s": row.raw_runtime_s,
        "accuracy": row.accuracy,
        "on_idealized_frontier": row.on_frontier.get("idealized", False),
        "on_raw_frontier": row.on_frontier.get("raw", False),
        "stack": row.stack or "",
    }


def _workload_record(row: WorkloadRow) -> dict[str, object]:
    return {
        "workload": row.workload,
        **_mean_request_columns(row),
        "idealized_runtime_s": row.idealized_runtime_s,
        "denoised_runtime_s": row.denoised_runtime_s,
        "num_gpus": row.num_gpus,
        **_cost_columns(row.cost),
        "stack": row.stack or "",
    }


def _stack_record(row: StackModelRow | StackWorkloadRow) -> dict[str, object]:
    """A side-by-side row, long format (one row per model, [workload,] stack)."""
    record: dict[str, object] = {"model": row.model}
    if isinstance(row, StackWorkloadRow):
        record.update(
            workload=row.workload,
            mean_prompt_tokens=row.prompt_tokens,
            mean_output_tokens=row.output_tokens,
        )
    else:
        record.update(architecture=row.architecture or "", num_workloads=row.num_workloads)
    record.update(
        stack=row.stack,
        idealized_runtime_s=row.idealized_runtime_s,
        ratio=row.ratio,
        source=row.source or "",
        hardware=row.hardware or "",
        tp=row.tp,
        note=row.note or "",
    )
    return record


def _rows_csv(rows: Sequence[BaseModel]) -> str:
    """Pydantic rows as CSV, one column per field (a nested cost as ``cost_<field>``)."""
    records = []
    for row in rows:
        record: dict[str, object] = {}
        for name, value in row.model_dump().items():
            if isinstance(value, dict):
                record.update({f"{name}_{key}": inner for key, inner in value.items()})
            else:
                record[name] = value
        records.append(record)
    return _csv_text(records, list(records[0]) if records else [])


def _csv_text(records: Sequence[dict[str, object]], header: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(header), lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if v is None else v for k, v in record.items()})
    return buffer.getvalue()


def csv_tables(board: Leaderboard) -> dict[str, str]:
    """File name -> CSV text of each table."""
    frontier_records = [
        {
            "scenario": scenario,
            "runtime": kind,
            "model": point.model,
            "runtime_s": point.runtime_s,
            "accuracy": point.accuracy,
            "on_frontier": point.on_frontier,
        }
        for kind in FRONTIER_KINDS
        for scenario, points in sorted(board.frontier_points[kind].items())
        for point in points
    ]
    fits = fit_rows(board)
    tables = {
        "models.csv": [_model_record(row) for row in board.models],
        "scenarios.csv": [_scenario_record(row) for row in board.scenario_rows],
        "workloads.csv": [_workload_record(row) for row in board.workload_rows],
        "frontiers.csv": frontier_records,
        "fits.csv": fits,
    }
    headers = {
        "models.csv": list(_model_record(_EMPTY_MODEL)),
        "scenarios.csv": list(_scenario_record(_EMPTY_SCENARIO)),
        "workloads.csv": list(_workload_record(_EMPTY_WORKLOAD)),
        "frontiers.csv": ["scenario", "runtime", "model", "runtime_s", "accuracy", "on_frontier"],
        "fits.csv": [
            "profile",
            "method",
            "stack",
            "n_points",
            "r2",
            "mape",
            "max_error",
            "beta_s",
            "overhead_s",
        ],
    }
    texts = {name: _csv_text(tables[name], headers[name]) for name in CSV_NAMES}
    current = board.current_models
    if current is not None:
        texts["current_models.csv"] = _rows_csv(current.rows)
        if current.prices:
            texts["provider_prices.csv"] = _rows_csv(current.prices)
    comparison = board.stack_comparison
    if comparison is not None:
        for name, rows, empty in (
            ("stacks.csv", comparison.models, _EMPTY_STACK_MODEL),
            ("stack_workloads.csv", comparison.workloads, _EMPTY_STACK_WORKLOAD),
        ):
            records = [_stack_record(row) for row in rows]
            texts[name] = _csv_text(records, list(_stack_record(empty)))
    return texts


# Header templates (the record functions define the columns once).
_NONE = dict.fromkeys(
    ("idealized_runtime_s", "denoised_runtime_s", "raw_runtime_s", "accuracy", "num_gpus")
)
_EMPTY_MODEL = ModelRow(
    model="", architecture=None, num_parameters=None, hardware=None, num_scenarios=0,
    cost=Cost(), frontier_count={"idealized": 0, "raw": 0}, **_NONE,
)  # fmt: skip
_EMPTY_SCENARIO = ScenarioRow(
    scenario="", group="", model="", prompt_tokens=None, output_tokens=None,
    idealized_source=None, **{k: v for k, v in _NONE.items() if k != "num_gpus"},
)  # fmt: skip
_STACK_NONE = dict.fromkeys(("idealized_runtime_s", "source", "hardware", "tp", "ratio"))
_EMPTY_STACK_MODEL = StackModelRow(
    model="", architecture=None, stack="", num_workloads=0, **_STACK_NONE
)
_EMPTY_STACK_WORKLOAD = StackWorkloadRow(
    model="", workload="", prompt_tokens=0.0, output_tokens=0.0, stack="", **_STACK_NONE
)
_EMPTY_WORKLOAD = WorkloadRow(
    workload="", model="", prompt_tokens=0.0, output_tokens=0.0, idealized_runtime_s=None,
    denoised_runtime_s=None, num_gpus=None, cost=Cost(),
)  # fmt: skip
