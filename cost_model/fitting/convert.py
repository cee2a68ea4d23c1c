"""Convert request logs into idealized and denoised runtimes, vectorized per model.

Rows are grouped by model once (a stable sort of the model codes), then each fit evaluates all
its rows in one numpy call: no Python work per row, so millions of rows take well under a
second per output column.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import FittedCostModel
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.fitting.file_rows import (
    MODEL,
    OUTPUT,
    PROMPT,
    RUNTIME,
    Rows,
    file_format,
)
from idealized_runtime.cost_model.fitting.request_logs import (
    DEFAULT_CHUNK_BYTES,
    RequestTable,
    iter_requests,
)

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
    extrapolated: Extrapolation = field(default_factory=lambda: Extrapolation())

    def __len__(self) -> int:
        return next(iter(self.columns.values())).shape[0] if self.columns else 0

    def to_frame(self) -> Any:
        """The added columns as a pandas DataFrame (one row per kept request)."""
        import pandas as pd

        return pd.DataFrame(self.columns)


@dataclass
class Extrapolation:
    """Requests whose prompt is longer than the longest prompt their fit was measured at: the
    fit's alpha(p) is extended past its data there."""

    rows: int = 0
    longest_prompt: int = 0  # the longest such prompt
    profiled: dict[str, int] = field(default_factory=dict)  # model -> longest prompt fitted

    def add(self, model: str, fit: FittedCostModel, prompts: NDArray[np.float64]) -> None:
        limit = max(fit.prompt_sizes)
        beyond = prompts > limit
        if beyond.any():
            self.rows += int(beyond.sum())
            self.longest_prompt = max(self.longest_prompt, int(prompts[beyond].max()))
            self.profiled[model] = limit

    def merge(self, other: Extrapolation) -> None:
        self.rows += other.rows
        self.longest_prompt = max(self.longest_prompt, other.longest_prompt)
        self.profiled.update(other.profiled)

    def line(self) -> str | None:
        """One warning line, or None when no request lies beyond its fit's range."""
        if not self.rows:
            return None
        ranges = ", ".join(f"{model} up to {limit}" for model, limit in
                           sorted(self.profiled.items())[:_SHOWN_UNKNOWN])  # fmt: skip
        more = " ..." if len(self.profiled) > _SHOWN_UNKNOWN else ""
        return (
            f"warning: {self.rows} request(s) have prompts beyond the profiled range of their "
            f"fit (longest {self.longest_prompt} tokens; profiled {ranges}{more}): their "
            "runtimes are extrapolated"
        )


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
    extrapolated: Extrapolation,
) -> NDArray[np.float64]:
    out = np.full(p.shape[0], np.nan)
    for code, rows in enumerate(groups):
        fit = fits.get(models[code])
        if fit is not None and rows.size:
            out[rows] = predict_runtime(fit, p[rows], o[rows])
            extrapolated.add(models[code], fit, p[rows])
    return out


_FEW_MODELS = 32


def _rows_per_model(codes: NDArray[np.intp], count: int) -> list[NDArray[np.intp]]:
    """Row indices of each model code: one comparison pass per model when there are few (the
    usual log), else one stable sort (O(n log n), not O(n * models))."""
    if count <= _FEW_MODELS:
        return [np.flatnonzero(codes == code) for code in range(count)]
    order = np.argsort(codes, kind="stable")
    bounds = np.cumsum(np.bincount(codes, minlength=count))
    return np.split(order, bounds[:-1])


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
    groups = _rows_per_model(codes, len(requests.models))
    columns: dict[str, NDArray[np.float64]] = {}
    # The idealized fit's range where there is one (the denoised fit's otherwise).
    extrapolated, unused = Extrapolation(), Extrapolation()
    if idealized:
        columns[IDEALIZED] = _evaluate(idealized, requests.models, groups, p, o, extrapolated)
    if denoised:
        columns[DENOISED] = _evaluate(
            denoised, requests.models, groups, p, o, unused if idealized else extrapolated
        )
    if idealized and runtime is not None:
        columns[DISCREPANCY] = runtime - columns[IDEALIZED]
    return Conversion(columns, kept, dropped, unknown if kept is not None else [], extrapolated)


# --- writing ----------------------------------------------------------------------------------


def _added_arrays(conversion: Conversion) -> dict[str, Any]:

    # NaN (no fit of that kind) becomes null: an empty CSV cell, JSON null, Parquet null.
    return {name: _float_array(values) for name, values in conversion.columns.items()}


# Arrays built from numpy buffers directly: pa.array() on a numpy array imports pandas (0.4 s)
# to check whether it was given a pandas object.
def _float_array(values: NDArray[np.float64]) -> Any:
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.float64)
    missing = np.isnan(values)
    validity = None
    if missing.any():  # NaN (no value) becomes null
        validity = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    return pa.Array.from_buffers(
        pa.float64(), len(values), [validity, pa.py_buffer(values)], null_count=int(missing.sum())
    )


def _bool_array(values: NDArray[np.bool_]) -> Any:
    import pyarrow as pa

    bits = pa.py_buffer(np.packbits(values, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, bits], null_count=0)


def _output_table(requests: RequestTable, conversion: Conversion) -> Any:
    """The input's rows (kept ones) with the added columns, as a pyarrow Table."""
    import pyarrow as pa

    source = requests.source
    if isinstance(source, pa.Table):
        table = source
    else:  # JSONL rows: their objects as read, the parsed request columns typed
        records: list[Any] = source.records
        typed: dict[str, Any] = {
            MODEL: requests.model_per_row.tolist(),
            PROMPT: requests.num_prompt_tokens,
            OUTPUT: requests.num_output_tokens,
        }
        if requests.runtime_s is not None:
            typed[RUNTIME] = _float_array(requests.runtime_s)
        arrays = {
            column: typed[column] if column in typed else _json_column(records, column)
            for column in source.columns
        }
        table = pa.table(arrays)
    if conversion.kept is not None:
        table = table.filter(_bool_array(conversion.kept))
    added = _added_arrays(conversion)
    # Input columns that an earlier conversion added are replaced, not duplicated.
    table = table.drop_columns([c for c in added if c in table.column_names])
    for name, values in added.items():
        table = table.append_column(name, values)
    return table


def _json_column(records: list[dict[str, Any]], column: str) -> Any:
    """One JSON field of every record as an Arrow column: its own type where the values agree,
    else their text (nested objects as JSON), so that any JSONL log can go to CSV or Parquet."""
    import pyarrow as pa

    values = [record.get(column) for record in records]
    if any(isinstance(v, (dict, list)) for v in values):
        values = [None if v is None else _csv_value(v) for v in values]
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([None if v is None else _csv_value(v) for v in values], type=pa.string())


def _csv_value(value: Any) -> str:
    if isinstance(value, (dict, list, bool)):
        return json.dumps(value)
    return str(value)


class _TableWriter:
    """Writes pyarrow tables chunk by chunk to an open binary file as CSV, JSONL or Parquet."""

    def __init__(self, handle: Any, kind: str) -> None:
        self.handle, self.kind = handle, kind
        self.parquet: Any = None
        self.columns: list[str] | None = None

    def write(self, table: Any) -> None:
        if self.columns is None:
            self.columns = table.column_names
            if self.kind == "csv":
                header = io.StringIO()
                csv.writer(header, lineterminator="\n").writerow(self.columns)
                self.handle.write(header.getvalue().encode())
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            if self.parquet is None:
                self.parquet = pq.ParquetWriter(self.handle, table.schema)
            self.parquet.write_table(table.cast(self.parquet.schema))
        elif self.kind == "csv":
            self.handle.write(_csv_bytes(table))
        else:
            for batch in table.to_batches(max_chunksize=65536):
                lines = [json.dumps(_json_row(row)) for row in batch.to_pylist()]
                if lines:
                    self.handle.write(("\n".join(lines) + "\n").encode())

    def close(self) -> None:
        if self.parquet is not None:
            self.parquet.close()


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


_PARALLEL_CSV_ROWS = 1 << 16


def _csv_bytes(table: Any) -> bytes:
    """CSV rows without header: plain cells where possible, quoted only where a cell needs
    it; floats in their shortest round-trip form (pyarrow writes them so). Large tables are
    formatted in slices on all cores (pyarrow releases the GIL), joined in order."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    workers = min(os.cpu_count() or 1, 8)
    if workers < 2 or table.num_rows < _PARALLEL_CSV_ROWS:
        return _csv_slice_bytes(table)
    step = -(-table.num_rows // workers)
    slices = [table.slice(start, step) for start in range(0, table.num_rows, step)]
    with ThreadPoolExecutor(workers) as pool:
        return b"".join(pool.map(_csv_slice_bytes, slices))


def _csv_slice_bytes(table: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    buffer = io.BytesIO()
    try:
        pacsv.write_csv(
            table, buffer, pacsv.WriteOptions(include_header=False, quoting_style="none")
        )
    except pa.ArrowInvalid:  # a cell with a comma, quote or newline: quote the text cells
        buffer = io.BytesIO()
        pacsv.write_csv(table, buffer, pacsv.WriteOptions(include_header=False))
    return buffer.getvalue()


def write_conversion(requests: RequestTable, conversion: Conversion, path: str | Path) -> None:
    """Input rows (as read, other columns included) plus the added columns; CSV, JSONL or
    Parquet by the output's extension, whatever the input was. Atomic: no partial file."""
    if requests.source is None:
        raise ValueError("write_conversion needs a table read by read_requests")
    kind = file_format(path)
    if kind == "jsonl" and isinstance(requests.source, Rows):
        _write_json_records(requests, conversion, path)
        return
    with atomic_writer(path, mode="wb") as handle:
        writer = _TableWriter(handle, kind)
        writer.write(_output_table(requests, conversion))
        writer.close()


def _write_json_records(requests: RequestTable, conversion: Conversion, path: str | Path) -> None:
    """JSONL in, JSONL out: each object as read (nested values untouched) plus the added
    fields."""
    records: list[dict[str, Any]] = requests.source.records
    if conversion.kept is not None:
        records = [r for r, keep in zip(records, conversion.kept, strict=True) if keep]
    added = {name: column.tolist() for name, column in conversion.columns.items()}
    with atomic_writer(path) as handle:
        for i, record in enumerate(records):
            row = {c: v for c, v in record.items() if c not in added}
            for name, column in added.items():
                row[name] = None if math.isnan(column[i]) else column[i]
            handle.write(json.dumps(row) + "\n")


@dataclass
class FileConversion:
    """What ``convert_file`` wrote."""

    rows: int = 0
    dropped_unknown_rows: int = 0
    unknown_models: list[str] = field(default_factory=list)
    skipped_failed: int = 0
    extrapolated: Extrapolation = field(default_factory=lambda: Extrapolation())


def convert_file(
    requests: str | Path,
    fits: FitMapping | Sequence[FitMapping],
    output: str | Path,
    *,
    skip_unknown: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> FileConversion:
    """Convert a request file chunk by chunk (constant memory on CSV and Parquet of any size)
    into ``output`` (CSV, JSONL or Parquet by extension). Atomic: a bad row anywhere (reported
    with its file row and column) leaves no output file."""
    kind = file_format(output)
    if file_format(requests) == "jsonl":  # one table; JSON objects kept as they are
        table = next(iter_requests(requests))
        conversion = convert_requests(table, fits, skip_unknown=skip_unknown)
        write_conversion(table, conversion, output)
        return FileConversion(
            len(conversion),
            conversion.dropped_unknown_rows,
            conversion.unknown_models,
            table.skipped_failed,
            conversion.extrapolated,
        )
    summary = FileConversion()
    unknown: dict[str, None] = {}
    with atomic_writer(output, mode="wb", durable=False) as handle:
        writer = _TableWriter(handle, kind)
        for table in iter_requests(requests, chunk_bytes=chunk_bytes):
            conversion = convert_requests(table, fits, skip_unknown=skip_unknown)
            writer.write(_output_table(table, conversion))
            summary.rows += len(conversion)
            summary.dropped_unknown_rows += conversion.dropped_unknown_rows
            summary.skipped_failed += table.skipped_failed
            summary.extrapolated.merge(conversion.extrapolated)
            unknown.update(dict.fromkeys(conversion.unknown_models))
        writer.close()
    summary.unknown_models = sorted(unknown)
    return summary


def convert_frame(
    frame: Any, fits: FitMapping | Sequence[FitMapping], *, skip_unknown: bool = False
) -> Any:
    """A pandas DataFrame of requests with the added columns (idealized_runtime_s, and
    denoised_runtime_s / runtime_discrepancy_s where they apply); other columns kept."""
    table = RequestTable.from_frame(frame)
    conversion = convert_requests(table, fits, skip_unknown=skip_unknown)
    kept = frame if conversion.kept is None else frame.loc[conversion.kept]
    out = kept.drop(columns=[c for c in conversion.columns if c in kept.columns])
    return out.assign(**conversion.columns)
