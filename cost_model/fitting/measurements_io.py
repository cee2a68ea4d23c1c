"""Timings to fit, from CSV, JSONL or Parquet files, text in memory, an upload as it streams
in, or a pandas DataFrame: ``Measurement`` objects, files of up to some 10^5 rows (request logs of
millions of rows: ``request_logs``). Values are checked as ``file_rows`` says.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    Measurement,
)
from idealized_runtime.cost_model.fitting.file_rows import (
    MEASUREMENT_COLUMNS,
    MODEL,
    OUTPUT,
    PROMPT,
    RUNTIME,
    Rows,
    check_header,
    check_model_name,
    csv_records,
    frame_to_arrow,
    is_missing,
    parse_non_negative,
    parse_seconds,
    parse_token_count,
    read_rows,
    rows_from_arrow,
    rows_from_text,
)

# --- measurements ------------------------------------------------------------------------------


def read_measurements(source: str | Path | Any) -> list[Measurement]:
    """Timings to fit, from a .csv, .jsonl or .parquet file or a pandas DataFrame: columns
    model, num_prompt_tokens, num_output_tokens, runtime_s; optional batch_size, ttft_s, std_s;
    other columns are ignored. Rows whose ``ok`` column is false (failed requests) are skipped."""
    if isinstance(source, (str, Path)):
        return _measurements_from_rows(read_rows(source, MEASUREMENT_COLUMNS))
    table = frame_to_arrow(source)
    return _measurements_from_rows(rows_from_arrow(table, "DataFrame", MEASUREMENT_COLUMNS))


def parse_measurements(text: str, *, name: str = "upload", kind: str = "csv") -> list[Measurement]:
    """``read_measurements`` for text in memory: ``kind`` is ``csv`` or ``jsonl``, ``name``
    stands for the file in error messages. (An upload as it streams in:
    ``iter_csv_measurements``.)"""
    if kind not in ("csv", "jsonl"):
        raise InputError(f"unsupported format {kind!r}: expected csv or jsonl", path=name)
    return _measurements_from_rows(rows_from_text(text, name, kind, MEASUREMENT_COLUMNS))


def _measurements_from_rows(rows: Rows) -> list[Measurement]:
    optional = [c for c in OPTIONAL_MEASUREMENT_COLUMNS if c in rows.columns]
    get = (
        (lambda record, column: record[rows.columns.index(column)])
        if rows.format == "csv"
        else (lambda record, column: record.get(column))
    )
    measurements: list[Measurement] = []
    has_ok = "ok" in rows.columns
    failed = 0
    for record, number in zip(rows.records, rows.numbers, strict=True):
        measurement = _measurement(
            lambda column, r=record: get(r, column), rows.path, number, optional, has_ok
        )
        if measurement is None:
            failed += 1
        else:
            measurements.append(measurement)
    if not measurements and failed:
        raise InputError(f"no data rows ({failed} failed requests skipped)", path=rows.path)
    return measurements


OPTIONAL_MEASUREMENT_COLUMNS = ("batch_size", "ttft_s", "std_s")


def _measurement(
    get: Any, path: str, number: int, optional: Sequence[str], has_ok: bool
) -> Measurement | None:
    """One row as a Measurement (None for a failed request's row); the first bad value is an
    InputError naming the row and column."""
    where = {"path": path, "row": number}
    if has_ok and _is_failed(get("ok")):  # a failed request (e.g. import-results)
        return None
    values: dict[str, Any] = {
        "model": check_model_name(get(MODEL), **where),
        PROMPT: parse_token_count(get(PROMPT), column=PROMPT, **where),
        OUTPUT: parse_token_count(get(OUTPUT), column=OUTPUT, **where),
        RUNTIME: parse_seconds(get(RUNTIME), column=RUNTIME, **where),
    }
    for column in optional:
        value = get(column)
        if is_missing(value):
            continue
        if column == "batch_size":
            values[column] = parse_token_count(value, column=column, **where)
        elif column == "std_s":
            values[column] = parse_non_negative(value, column=column, **where)
        else:
            values[column] = parse_seconds(value, column=column, **where)
    ttft = values.get("ttft_s")
    if ttft is not None and ttft > values[RUNTIME]:
        raise InputError(
            f"ttft_s {ttft:g} is greater than runtime_s {values[RUNTIME]:g}: the first token "
            "comes within the request",
            column="ttft_s",
            **where,
        )
    return Measurement(**values)


def iter_csv_measurements(lines: Iterable[str], *, name: str = "upload") -> Iterator[Measurement]:
    """Measurements of CSV text given line by line (line ends kept), as an upload streams in:
    the checks and messages of ``read_measurements``, holding one row at a time. Rows of failed
    requests (an ``ok`` column saying false) are skipped."""
    try:
        reader = csv.reader(lines)
        header = check_header(next(reader, None), name, MEASUREMENT_COLUMNS)
        positions = {column: index for index, column in enumerate(header)}
        optional = [c for c in OPTIONAL_MEASUREMENT_COLUMNS if c in positions]
        has_ok = "ok" in positions
        rows = failed = 0
        for number, record in csv_records(reader, len(header), name):
            measurement = _measurement(
                lambda column, r=record: r[positions[column]], name, number, optional, has_ok
            )
            if measurement is None:
                failed += 1
                continue
            rows += 1
            yield measurement
    except csv.Error as error:
        raise InputError(f"malformed CSV ({error})", path=name) from None
    if not rows:
        detail = f" ({failed} failed requests skipped)" if failed else ""
        raise InputError(f"no data rows{detail}", path=name)


def _is_failed(value: Any) -> bool:
    """An ``ok`` cell that says the request failed: false in JSON, Parquet or CSV text."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, str):
        return value.strip().lower() in ("false", "0", "no")
    return value is False or (isinstance(value, (int, float)) and value == 0)
