"""Convert request logs into idealized and denoised runtimes, vectorized per model.

Rows are grouped by model once (a stable sort of the model codes), then each fit evaluates all
its rows in one numpy call: no Python work per row, so millions of rows take well under a
second per output column.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from cost_model.evaluate import predict_runtime
from cost_model.measurements_io import OUTPUT, PROMPT, RUNTIME, RequestTable, file_format
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import FittedCostModel

IDEALIZED = "idealized_runtime_s"
DENOISED = "denoised_runtime_s"
DISCREPANCY = "runtime_discrepancy_s"
ADDED_COLUMNS = (IDEALIZED, DENOISED, DISCREPANCY)
_SHOWN_UNKNOWN = 5

FitMapping = Mapping[str, FittedCostModel]


@dataclass
class Conversion:
    """Added columns for the kept rows of a request table (NaN: no fit of that kind for the
    row's model). ``kept`` selects the rows of the input that are in the output (None: all)."""

    columns: dict[str, NDArray[np.float64]]
    kept: NDArray[np.bool_] | None = None
    dropped_unknown_rows: int = 0
    unknown_models: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return next(iter(self.columns.values())).shape[0] if self.columns else 0


def split_fits(
    fits: FitMapping | Sequence[FitMapping],
) -> tuple[dict[str, FittedCostModel], dict[str, FittedCostModel]]:
    """(idealized, denoised) fits by model: denoised fits go to the denoised column, helm and
    default fits to the idealized one; a later mapping overrides an earlier one."""
    mappings = [fits] if isinstance(fits, Mapping) else list(fits)
    idealized: dict[str, FittedCostModel] = {}
    denoised: dict[str, FittedCostModel] = {}
    for mapping in mappings:
        for model, fit in mapping.items():
            (denoised if fit.method == "denoised" else idealized)[model] = fit
    return idealized, denoised


def _evaluate(
    fits: Mapping[str, FittedCostModel],
    models: Sequence[str],
    groups: list[NDArray[np.intp]],
    p: NDArray[np.float64],
    o: NDArray[np.float64],
) -> NDArray[np.float64]:
    out = np.full(p.shape[0], np.nan)
    for code, rows in enumerate(groups):
        fit = fits.get(models[code])
        if fit is not None and rows.size:
            out[rows] = predict_runtime(fit, p[rows], o[rows])
    return out


def convert_requests(
    requests: RequestTable,
    fits: FitMapping | Sequence[FitMapping],
    *,
    skip_unknown: bool = False,
) -> Conversion:
    """Idealized (helm/default fits), denoised (denoised fits) runtimes and, where a runtime was
    measured, its discrepancy from the idealized one. Models with no fit at all are an
    InputError naming them, unless ``skip_unknown`` (their rows are then dropped)."""
    idealized, denoised = split_fits(fits)
    if not idealized and not denoised:
        raise InputError("no fits given")
    known = set(idealized) | set(denoised)
    unknown = sorted(m for m in requests.models if m not in known)
    codes = requests.model_index
    kept: NDArray[np.bool_] | None = None
    dropped = 0
    if unknown:
        unknown_codes = np.array([m not in known for m in requests.models])
        unknown_rows = unknown_codes[codes]
        dropped = int(unknown_rows.sum())
        if not skip_unknown:
            shown = ", ".join(unknown[:_SHOWN_UNKNOWN])
            hidden = len(unknown) - _SHOWN_UNKNOWN
            more = f" and {hidden} more" if hidden > 0 else ""
            raise InputError(
                f"no fit for model(s) {shown}{more} ({dropped} rows); fitted models: "
                f"{', '.join(sorted(known)[:_SHOWN_UNKNOWN])}"
                f"{' ...' if len(known) > _SHOWN_UNKNOWN else ''} (--skip-unknown drops them)",
                path=requests.path,
                column="model",
            )
        kept = ~unknown_rows
        codes = codes[kept]
    p = requests.num_prompt_tokens.astype(np.float64)
    o = requests.num_output_tokens.astype(np.float64)
    runtime = requests.runtime_s
    if kept is not None:
        p, o = p[kept], o[kept]
        runtime = None if runtime is None else runtime[kept]
    # Row indices of each model code, from one stable sort (O(n log n), not O(n * models)).
    order = np.argsort(codes, kind="stable")
    bounds = np.cumsum(np.bincount(codes, minlength=len(requests.models)))
    groups = np.split(order, bounds[:-1])
    columns: dict[str, NDArray[np.float64]] = {}
    if idealized:
        columns[IDEALIZED] = _evaluate(idealized, requests.models, groups, p, o)
    if denoised:
        columns[DENOISED] = _evaluate(denoised, requests.models, groups, p, o)
    if idealized and runtime is not None:
        columns[DISCREPANCY] = runtime - columns[IDEALIZED]
    return Conversion(columns, kept, dropped, unknown if kept is not None else [])


# --- writing ----------------------------------------------------------------------------------


def _cell(value: float) -> str:
    return "" if math.isnan(value) else repr(float(value))


def write_conversion(requests: RequestTable, conversion: Conversion, path: str | Path) -> None:
    """Input rows (as read, other columns included) plus the added columns; CSV or JSONL by the
    output's extension, whatever the input was. Atomic: no partial file on failure."""
    source = requests.source
    if source is None:
        raise ValueError("write_conversion needs a table read from a file (read_requests)")
    kind = file_format(path)
    records: list[Any] = source.records
    if conversion.kept is not None:
        records = [r for r, keep in zip(records, conversion.kept, strict=True) if keep]
    added = list(conversion.columns)
    values = [conversion.columns[name].tolist() for name in added]
    # Input columns that an earlier conversion added are replaced, not duplicated.
    input_columns = [c for c in source.columns if c not in added]
    positions = [source.columns.index(c) for c in input_columns]

    def base_csv(record: Any) -> list[str]:
        if source.format == "csv":
            return [record[i] for i in positions]
        return [_csv_value(record.get(c)) for c in input_columns]

    # CSV cells are strings; in JSON the parsed request columns keep their types.
    kept_rows = (
        np.arange(len(requests)) if conversion.kept is None else np.flatnonzero(conversion.kept)
    )
    typed: dict[str, list[Any]] = {
        PROMPT: requests.num_prompt_tokens[kept_rows].tolist(),
        OUTPUT: requests.num_output_tokens[kept_rows].tolist(),
    }
    if requests.runtime_s is not None:
        typed[RUNTIME] = [None if math.isnan(v) else v for v in requests.runtime_s[kept_rows]]

    def base_json(record: Any, row: int) -> dict[str, Any]:
        if source.format != "csv":
            return {c: v for c, v in record.items() if c not in added}
        base = {c: record[i] for c, i in zip(input_columns, positions, strict=True)}
        base.update({c: values[row] for c, values in typed.items()})
        return base

    with atomic_writer(path, newline="" if kind == "csv" else None) as handle:
        if kind == "csv":
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(input_columns + added)
            for i, record in enumerate(records):
                writer.writerow(base_csv(record) + [_cell(column[i]) for column in values])
        else:
            for i, record in enumerate(records):
                row = base_json(record, i)
                for name, column in zip(added, values, strict=True):
                    row[name] = None if math.isnan(column[i]) else column[i]
                handle.write(json.dumps(row) + "\n")


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list, bool)):
        return json.dumps(value)
    return str(value)
