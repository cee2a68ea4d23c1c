"""Read timings (to fit) and request logs (to convert) from CSV or JSONL files.

Both readers validate every value and report the first bad one with the file, the 1-based data
row (for JSONL: the line number) and the column, so a user can fix it in an editor.

``read_measurements`` builds ``Measurement`` objects: files of up to some 10^5 rows.
``read_requests`` builds a columnar ``RequestTable`` (numpy arrays) for logs of millions of
requests; it keeps the raw rows so that a conversion can write them back with added columns.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idealized_runtime.core.errors import InputError, plain
from idealized_runtime.core.types import (
    MAX_RUNTIME_S,
    MAX_TOKENS,
    MIN_RUNTIME_S,
    Measurement,
    check_runtime,
)

MODEL, PROMPT, OUTPUT, RUNTIME = "model", "num_prompt_tokens", "num_output_tokens", "runtime_s"
MEASUREMENT_COLUMNS = (MODEL, PROMPT, OUTPUT, RUNTIME)
REQUEST_COLUMNS = (MODEL, PROMPT, OUTPUT)
TOKEN_COLUMNS = (PROMPT, OUTPUT)
CSV_SUFFIXES = (".csv",)
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def file_format(path: str | Path) -> str:
    """``"csv"`` or ``"jsonl"`` from the file name; anything else is an input error."""
    suffix = Path(path).suffix.lower()
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    raise InputError("unsupported file type: expected .csv or .jsonl", path=str(path))


# --- value parsing -------------------------------------------------------------------------------


def parse_token_count(value: Any, *, path: str, row: int, column: str) -> int:
    """A token count: a positive integer (JSON may write it as 12.0)."""
    if isinstance(value, bool):
        raise InputError(
            f"expected a positive integer, got {plain(value)!r}", path=path, row=row, column=column
        )
    if isinstance(value, int):
        number = value
    elif (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and value.strip().lstrip("+").isdigit()
    ):
        number = int(value)
    else:
        shown = value if value is not None else "nothing"
        raise InputError(
            f"expected a positive integer, got {plain(shown)!r}", path=path, row=row, column=column
        )
    if number < 1:
        raise InputError(f"must be at least 1, got {number}", path=path, row=row, column=column)
    if number > MAX_TOKENS:
        raise InputError(
            f"at most {MAX_TOKENS} tokens, got {number}", path=path, row=row, column=column
        )
    return number


def parse_seconds(value: Any, *, path: str, row: int, column: str) -> float:
    """A duration in seconds: a finite positive number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        shown = value if value is not None else "nothing"
        raise InputError(
            f"expected a number of seconds, got {plain(shown)!r}", path=path, row=row, column=column
        )
    try:
        number = float(value)
    except ValueError:
        raise InputError(
            f"expected a number of seconds, got {plain(value)!r}", path=path, row=row, column=column
        ) from None
    if problem := check_runtime(number):
        raise InputError(f"{problem}, got {plain(value)!r}", path=path, row=row, column=column)
    return number


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


# --- row sources -------------------------------------------------------------------------------


@dataclass
class _Rows:
    """The raw rows of a file: CSV rows as lists of strings under ``columns``, or JSONL objects.

    ``numbers`` are the 1-based data row (CSV) or line (JSONL) numbers used in errors.
    """

    path: str
    format: str
    columns: list[str]
    records: list[list[str]] | list[dict[str, Any]]
    numbers: list[int]
    skipped_failed: int = 0

    def column(self, name: str) -> list[Any]:
        if self.format == "csv":
            index = self.columns.index(name)
            return [record[index] for record in self.records]  # type: ignore[index]
        return [record.get(name) for record in self.records]  # type: ignore[union-attr]


def _read_csv(text: str, name: str, required: Sequence[str]) -> _Rows:
    with io.StringIO(text, newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or not any(cell.strip() for cell in header):
            raise InputError("empty file: expected a header row and data rows", path=name)
        header = [cell.strip() for cell in header]
        missing = [column for column in required if column not in header]
        if missing:
            raise InputError(
                f"missing required column(s) {', '.join(missing)} (header: {', '.join(header)})",
                path=name,
                column=missing[0],
            )
        records: list[list[str]] = []
        numbers: list[int] = []
        width = len(header)
        for number, record in enumerate(reader, start=1):
            if not record or (len(record) == 1 and not record[0].strip()):
                continue  # blank line
            if len(record) != width:
                raise InputError(
                    f"expected {width} fields as in the header, got {len(record)}",
                    path=name,
                    row=number,
                )
            records.append(record)
            numbers.append(number)
    if not records:
        raise InputError("no data rows", path=name)
    return _Rows(name, "csv", header, records, numbers)


def _read_jsonl(text: str, name: str, required: Sequence[str]) -> _Rows:
    lines = text.split("\n")
    # A line still being appended (the durable writers fsync whole lines) has no newline yet:
    # ignore a trailing partial line that does not parse.
    complete = text.endswith("\n")
    records: list[dict[str, Any]] = []
    numbers: list[int] = []
    columns: dict[str, None] = {}
    skipped_failed = 0
    last = len(lines)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == last and not complete:
                break
            raise InputError(f"not valid JSON ({error.msg})", path=name, row=number) from None
        if not isinstance(record, dict):
            raise InputError("expected a JSON object per line", path=name, row=number)
        if record.get("ok") is False:  # a failed request logged by the timing client
            skipped_failed += 1
            continue
        for column in required:
            if column not in record:
                raise InputError("missing value", path=name, row=number, column=column)
        columns.update(dict.fromkeys(record))
        records.append(record)
        numbers.append(number)
    if not records:
        detail = f" ({skipped_failed} failed requests skipped)" if skipped_failed else ""
        raise InputError(f"no data rows{detail}", path=name)
    return _Rows(name, "jsonl", list(columns), records, numbers, skipped_failed)


def _rows_from_text(text: str, name: str, kind: str, required: Sequence[str]) -> _Rows:
    try:
        if kind == "csv":
            return _read_csv(text, name, required)
        return _read_jsonl(text, name, required)
    except csv.Error as error:
        raise InputError(f"malformed CSV ({error})", path=name) from None


def _read_rows(path: str | Path, required: Sequence[str]) -> _Rows:
    path = Path(path)
    kind = file_format(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file", path=str(path)) from None
    return _rows_from_text(text, str(path), kind, required)


# --- measurements ------------------------------------------------------------------------------


def read_measurements(path: str | Path) -> list[Measurement]:
    """Timings to fit: columns model, num_prompt_tokens, num_output_tokens, runtime_s; optional
    batch_size, ttft_s, std_s; other columns are ignored. JSONL rows with ``"ok": false``
    (failed requests) are skipped."""
    return _measurements_from_rows(_read_rows(path, MEASUREMENT_COLUMNS))


def parse_measurements(text: str, *, name: str = "upload", kind: str = "csv") -> list[Measurement]:
    """``read_measurements`` for text in memory (an upload): ``kind`` is ``csv`` or ``jsonl``,
    ``name`` stands for the file in error messages."""
    if kind not in ("csv", "jsonl"):
        raise InputError(f"unsupported format {kind!r}: expected csv or jsonl", path=name)
    return _measurements_from_rows(_rows_from_text(text, name, kind, MEASUREMENT_COLUMNS))


def _measurements_from_rows(rows: _Rows) -> list[Measurement]:
    optional = [c for c in ("batch_size", "ttft_s", "std_s") if c in rows.columns]
    get = (
        (lambda record, column: record[rows.columns.index(column)])
        if rows.format == "csv"
        else (lambda record, column: record.get(column))
    )
    measurements: list[Measurement] = []
    for record, number in zip(rows.records, rows.numbers, strict=True):
        where = {"path": rows.path, "row": number}
        model = get(record, MODEL)
        if _is_missing(model) or not isinstance(model, str):
            raise InputError("expected a model name", column=MODEL, **where)
        values: dict[str, Any] = {
            "model": model,
            PROMPT: parse_token_count(get(record, PROMPT), column=PROMPT, **where),
            OUTPUT: parse_token_count(get(record, OUTPUT), column=OUTPUT, **where),
            RUNTIME: parse_seconds(get(record, RUNTIME), column=RUNTIME, **where),
        }
        for column in optional:
            value = get(record, column)
            if _is_missing(value):
                continue
            if column == "batch_size":
                values[column] = parse_token_count(value, column=column, **where)
            elif column == "std_s":
                values[column] = _parse_non_negative(value, column=column, **where)
            else:
                values[column] = parse_seconds(value, column=column, **where)
        measurements.append(Measurement(**values))
    return measurements


def _parse_non_negative(value: Any, *, path: str, row: int, column: str) -> float:
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if math.isfinite(number) and number >= 0:
            return number
    raise InputError(
        f"expected a non-negative number, got {plain(value)!r}", path=path, row=row, column=column
    )


# --- request logs ------------------------------------------------------------------------------


@dataclass
class RequestTable:
    """Requests as columns, one entry per row.

    ``model_index`` maps each row to ``models`` (unique names, first-appearance order), so that
    a conversion can evaluate one fit per model over all its rows at once. ``runtime_s`` is NaN
    where a row has no measured runtime (None when the column is absent altogether).
    ``source`` keeps the raw rows for writing them back unchanged with added columns.
    """

    models: list[str]
    model_index: NDArray[np.intp]
    num_prompt_tokens: NDArray[np.int64]
    num_output_tokens: NDArray[np.int64]
    runtime_s: NDArray[np.float64] | None = None
    path: str | None = None
    skipped_failed: int = 0
    source: _Rows | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.model_index.shape[0])

    @property
    def model_per_row(self) -> NDArray[np.object_]:
        return np.asarray(self.models, dtype=object)[self.model_index]

    @classmethod
    def from_columns(
        cls,
        model: Sequence[str] | NDArray[Any],
        num_prompt_tokens: ArrayLike,
        num_output_tokens: ArrayLike,
        runtime_s: ArrayLike | None = None,
    ) -> RequestTable:
        """Build (and validate) a table from in-memory columns, e.g. in a service or a test."""
        names, index = np.unique(np.asarray(model, dtype=object).astype(str), return_inverse=True)
        p = np.asarray(num_prompt_tokens)
        o = np.asarray(num_output_tokens)
        if not (len(index) == p.shape[0] == o.shape[0]):
            raise InputError("columns have different lengths")
        if len(index) == 0:
            raise InputError("no requests")
        for column, values in ((PROMPT, p), (OUTPUT, o)):
            _check_tokens(values, column, None, list(range(1, len(values) + 1)))
        runtime = None
        if runtime_s is not None:
            runtime = np.asarray(runtime_s, dtype=np.float64)
            _check_runtimes(runtime, None, list(range(1, len(runtime) + 1)))
        return cls(
            models=[str(n) for n in names],
            model_index=index.astype(np.intp),
            num_prompt_tokens=p.astype(np.int64),
            num_output_tokens=o.astype(np.int64),
            runtime_s=runtime,
        )

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> RequestTable:
        """Build a table from mappings with the request columns (e.g. RequestRecord dumps)."""
        rows = list(records)
        return cls.from_columns(
            [r[MODEL] for r in rows],
            [r[PROMPT] for r in rows],
            [r[OUTPUT] for r in rows],
            [np.nan if r.get(RUNTIME) is None else r[RUNTIME] for r in rows]
            if any(r.get(RUNTIME) is not None for r in rows)
            else None,
        )


def _check_tokens(values: NDArray[Any], column: str, path: str | None, numbers: list[int]) -> None:
    bad = ~((values >= 1) & (values <= MAX_TOKENS))
    if values.dtype.kind == "f":
        bad |= ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        first = int(np.argmax(bad))
        raise InputError(
            f"expected a positive integer up to {MAX_TOKENS}, got {plain(values[first])!r}",
            path=path,
            row=numbers[first],
            column=column,
        )


def _check_runtimes(values: NDArray[np.float64], path: str | None, numbers: list[int]) -> None:
    # NaN means "no runtime for this row"; a given runtime must be a plausible duration.
    bad = np.isinf(values) | (values < MIN_RUNTIME_S) | (values > MAX_RUNTIME_S)
    if bad.any():
        first = int(np.argmax(bad))
        raise InputError(
            f"must be a finite number of seconds between {MIN_RUNTIME_S:g} and "
            f"{MAX_RUNTIME_S:g}, got {plain(values[first])!r}",
            path=path,
            row=numbers[first],
            column=RUNTIME,
        )


def _token_column(rows: _Rows, column: str) -> NDArray[np.int64]:
    raw = rows.column(column)
    try:
        # Fast path: int() accepts exactly the integer spellings we want (and JSON ints);
        # floats from JSON are rejected here and re-checked by the slow path below.
        if rows.format == "jsonl" and not all(type(v) is int for v in raw):
            raise ValueError
        values = np.fromiter(map(int, raw), dtype=np.int64, count=len(raw))
    except (ValueError, TypeError, OverflowError):
        values = np.fromiter(
            (
                parse_token_count(v, path=rows.path, row=n, column=column)
                for v, n in zip(raw, rows.numbers, strict=True)
            ),
            dtype=np.int64,
            count=len(raw),
        )
    _check_tokens(values, column, rows.path, rows.numbers)
    return values


def _runtime_column(rows: _Rows) -> NDArray[np.float64]:
    raw = rows.column(RUNTIME)

    def seconds(value: Any, number: int) -> float:
        if _is_missing(value):
            return math.nan
        return parse_seconds(value, path=rows.path, row=number, column=RUNTIME)

    try:
        if rows.format == "jsonl" and not all(type(v) in (int, float) for v in raw):
            raise ValueError
        values = np.fromiter(map(float, raw), dtype=np.float64, count=len(raw))
        if np.isnan(values).any():  # an explicit "nan" is an error, not a missing value
            raise ValueError
    except (ValueError, TypeError):
        parsed = (seconds(v, n) for v, n in zip(raw, rows.numbers, strict=True))
        values = np.fromiter(parsed, dtype=np.float64, count=len(raw))
    _check_runtimes(values, rows.path, rows.numbers)
    return values


def read_requests(path: str | Path) -> RequestTable:
    """Requests to convert: columns model, num_prompt_tokens, num_output_tokens and optionally
    runtime_s (an empty cell / null means "not measured"). Other columns are kept for output."""
    rows = _read_rows(path, REQUEST_COLUMNS)
    models_raw = rows.column(MODEL)
    for value, number in zip(models_raw, rows.numbers, strict=True):
        if not isinstance(value, str) or not value.strip():
            raise InputError("expected a model name", path=rows.path, row=number, column=MODEL)
    names, index = np.unique(np.asarray(models_raw, dtype=object), return_inverse=True)
    runtime = _runtime_column(rows) if RUNTIME in rows.columns else None
    return RequestTable(
        models=[str(name) for name in names],
        model_index=index.astype(np.intp),
        num_prompt_tokens=_token_column(rows, PROMPT),
        num_output_tokens=_token_column(rows, OUTPUT),
        runtime_s=runtime,
        path=rows.path,
        skipped_failed=rows.skipped_failed,
        source=rows,
    )
