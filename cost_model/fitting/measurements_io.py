"""Read timings (to fit) and request logs (to convert) from CSV, JSONL or Parquet files, or
from a pandas DataFrame.

Both readers validate every value and report the first bad one with the file, the 1-based data
row (for JSONL: the line number) and the column, so a user can fix it in an editor.

``read_measurements`` builds ``Measurement`` objects: files of up to some 10^5 rows.
``read_requests`` builds a columnar ``RequestTable`` (numpy arrays) for logs of millions of
requests; CSV and Parquet go through pyarrow (columnar parsing, checks vectorized per chunk,
a Python re-scan only to locate a bad value), JSONL through the json module. The table keeps the
input's rows so that a conversion can write them back with added columns.

Output token counts may be 0 (prompt-only requests, as in HELM's language-modeling scenarios);
prompt token counts are at least 1.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
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

# Numbers as a file writes them: ASCII digits, an optional sign, point and exponent. Python's
# int() and float() also take "1_000", full-width and other Unicode digits: a typo or a paste
# from elsewhere should be refused, not read as a number.
_WHOLE_NUMBER = re.compile(r"\s*\+?[0-9]+\s*")
_DECIMAL = re.compile(
    r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*|\s*[+-]?(inf|infinity|nan)\s*",
    re.IGNORECASE,
)
MAX_NAME_LENGTH = 200
# Characters that change how a name is displayed without being seen: bidirectional overrides and
# isolates (a name that reads differently than it sorts), besides control characters and NUL.
_BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f" + "".join(map(chr, (*range(0x202A, 0x202F), *range(0x2066, 0x206A))))
)

MODEL, PROMPT, OUTPUT, RUNTIME = "model", "num_prompt_tokens", "num_output_tokens", "runtime_s"
MEASUREMENT_COLUMNS = (MODEL, PROMPT, OUTPUT, RUNTIME)
REQUEST_COLUMNS = (MODEL, PROMPT, OUTPUT)
TOKEN_COLUMNS = (PROMPT, OUTPUT)
CSV_SUFFIXES = (".csv",)
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
# Smallest count accepted per token column: a request may ask for 0 output tokens.
MIN_TOKENS = {PROMPT: 1, OUTPUT: 0}


def file_format(path: str | Path) -> str:
    """``"csv"``, ``"jsonl"`` or ``"parquet"`` from the file name; anything else is an input
    error."""
    suffix = Path(path).suffix.lower()
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    raise InputError("unsupported file type: expected .csv, .jsonl or .parquet", path=str(path))


# --- value parsing -------------------------------------------------------------------------------


def _shown(value: Any) -> str:
    """A value as the user typed it: text as is (quoted), numbers in Python's shortest form."""
    if value is None:
        return "nothing"
    if isinstance(value, np.generic):  # never show numpy reprs such as np.int64(0)
        value = value.item()
    return repr(value)


def parse_token_count(
    value: Any, *, path: str | None, row: int | None, column: str, minimum: int | None = None
) -> int:
    """A token count: a non-negative integer, at least ``minimum`` (default: 0 for output
    tokens, 1 otherwise). JSON may write it as 12.0."""
    if minimum is None:
        minimum = MIN_TOKENS.get(column, 1)
    expected = "a positive integer" if minimum >= 1 else "a whole number of tokens"
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        raise InputError(
            f"expected {expected}, got {_shown(value)}", path=path, row=row, column=column
        )
    number: int | float
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        number = value  # compared as given: int(1e308) would be a 309-digit message
    elif isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value):
        number = int(value)
    else:
        raise InputError(
            f"expected {expected}, got {_shown(value)}", path=path, row=row, column=column
        )
    if number < minimum:
        raise InputError(
            f"must be at least {minimum}, got {_shown(number)}", path=path, row=row, column=column
        )
    if number > MAX_TOKENS:
        raise InputError(
            f"at most {MAX_TOKENS} tokens, got {_shown(number)}", path=path, row=row, column=column
        )
    return int(number)


def parse_seconds(value: Any, *, path: str | None, row: int | None, column: str) -> float:
    """A duration in seconds: a finite positive number."""
    if isinstance(value, np.generic):
        value = value.item()
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, str))
        or (isinstance(value, str) and not _DECIMAL.fullmatch(value))
    ):
        raise InputError(
            f"expected a number of seconds, got {_shown(value)}", path=path, row=row, column=column
        )
    number = float(value)
    if problem := check_runtime(number):
        raise InputError(f"{problem}, got {_shown(value)}", path=path, row=row, column=column)
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


def _check_header(header: list[str] | None, name: str, required: Sequence[str]) -> list[str]:
    """The header row, stripped: non-empty, each column once, the required ones present."""
    if header is None or not any(cell.strip() for cell in header):
        raise InputError("empty file: expected a header row and data rows", path=name)
    header = [cell.strip() for cell in header]
    seen: set[str] = set()
    for column in header:
        if column in seen:  # which of the two would a reader take? Neither: say so.
            raise InputError("duplicate column in the header", path=name, column=column)
        seen.add(column)
    missing = [column for column in required if column not in header]
    if missing:
        raise InputError(
            f"missing required column(s) {', '.join(missing)} (header: {', '.join(header)})",
            path=name,
            column=missing[0],
        )
    return header


def _read_csv(text: str, name: str, required: Sequence[str]) -> _Rows:
    with io.StringIO(text, newline="") as handle:
        reader = csv.reader(handle)
        header = _check_header(next(reader, None), name, required)
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
    if kind == "parquet":
        return _rows_from_arrow(_read_parquet(path), str(path), required)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file", path=str(path)) from None
    return _rows_from_text(text, str(path), kind, required)


def _read_parquet(path: Path) -> Any:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except Exception as error:  # pyarrow raises ArrowInvalid, OSError, ... for a bad file
        raise InputError(f"not a readable Parquet file ({error})", path=str(path)) from None


def _rows_from_arrow(table: Any, name: str, required: Sequence[str]) -> _Rows:
    """Rows of an in-memory table (pyarrow Table), numbered 1.. in order, as Python values."""
    missing = [column for column in required if column not in table.column_names]
    if missing:
        raise InputError(
            f"missing required column(s) {', '.join(missing)} "
            f"(columns: {', '.join(table.column_names)})",
            path=name,
            column=missing[0],
        )
    records = table.to_pylist()
    for record in records:  # NaN in a float column of a DataFrame means "no value"
        for key, value in record.items():
            if isinstance(value, float) and math.isnan(value):
                record[key] = None
    if not records:
        raise InputError("no data rows", path=name)
    return _Rows(name, "table", list(table.column_names), records, list(range(1, len(records) + 1)))


def frame_to_arrow(frame: Any, name: str = "DataFrame") -> Any:
    """A pandas DataFrame (or a pyarrow Table) as a pyarrow Table, the index dropped."""
    import pyarrow as pa

    if isinstance(frame, pa.Table):
        return frame
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as error:
        raise InputError(f"cannot read the columns ({error})", path=name) from None


# --- measurements ------------------------------------------------------------------------------


def read_measurements(source: str | Path | Any) -> list[Measurement]:
    """Timings to fit, from a .csv, .jsonl or .parquet file or a pandas DataFrame: columns
    model, num_prompt_tokens, num_output_tokens, runtime_s; optional batch_size, ttft_s, std_s;
    other columns are ignored. Rows whose ``ok`` column is false (failed requests) are skipped."""
    if isinstance(source, (str, Path)):
        return _measurements_from_rows(_read_rows(source, MEASUREMENT_COLUMNS))
    table = frame_to_arrow(source)
    return _measurements_from_rows(_rows_from_arrow(table, "DataFrame", MEASUREMENT_COLUMNS))


def parse_measurements(text: str, *, name: str = "upload", kind: str = "csv") -> list[Measurement]:
    """``read_measurements`` for text in memory: ``kind`` is ``csv`` or ``jsonl``, ``name``
    stands for the file in error messages. (An upload as it streams in:
    ``iter_csv_measurements``.)"""
    if kind not in ("csv", "jsonl"):
        raise InputError(f"unsupported format {kind!r}: expected csv or jsonl", path=name)
    return _measurements_from_rows(_rows_from_text(text, name, kind, MEASUREMENT_COLUMNS))


def _measurements_from_rows(rows: _Rows) -> list[Measurement]:
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


def check_model_name(name: Any, *, path: str | None, row: int | None) -> str:
    """A model name as a measurement stores it: text of 1 to 200 characters, none of them a
    control (NUL included) or bidirectional-formatting character."""
    if _is_missing(name) or not isinstance(name, str):
        raise InputError("expected a model name", path=path, row=row, column=MODEL)
    if len(name) > MAX_NAME_LENGTH:
        raise InputError(
            f"model name of {len(name)} characters; at most {MAX_NAME_LENGTH}",
            path=path,
            row=row,
            column=MODEL,
        )
    for position, character in enumerate(name, start=1):
        if character in _BIDI_CONTROLS or unicodedata.category(character) == "Cc":
            kind = "bidirectional-formatting" if character in _BIDI_CONTROLS else "control"
            raise InputError(
                f"model name has a {kind} character (U+{ord(character):04X}) at position "
                f"{position}",
                path=path,
                row=row,
                column=MODEL,
            )
    return name


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
        if _is_missing(value):
            continue
        if column == "batch_size":
            values[column] = parse_token_count(value, column=column, **where)
        elif column == "std_s":
            values[column] = _parse_non_negative(value, column=column, **where)
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
        header = _check_header(next(reader, None), name, MEASUREMENT_COLUMNS)
        positions = {column: index for index, column in enumerate(header)}
        optional = [c for c in OPTIONAL_MEASUREMENT_COLUMNS if c in positions]
        has_ok = "ok" in positions
        width = len(header)
        rows = failed = 0
        for number, record in enumerate(reader, start=1):
            if not record or (len(record) == 1 and not record[0].strip()):
                continue  # blank line
            if len(record) != width:
                raise InputError(
                    f"expected {width} fields as in the header, got {len(record)}",
                    path=name,
                    row=number,
                )
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


def _parse_non_negative(value: Any, *, path: str, row: int, column: str) -> float:
    if isinstance(value, (int, float)) or (isinstance(value, str) and _DECIMAL.fullmatch(value)):
        number = math.nan if isinstance(value, bool) else float(value)
        if math.isfinite(number) and number >= 0:
            return number
    raise InputError(
        f"expected a non-negative number, got {plain(value)!r}", path=path, row=row, column=column
    )


# --- request logs ------------------------------------------------------------------------------

# Bytes of CSV parsed per chunk: large enough for pyarrow's parallel parsing, small enough that
# memory stays flat on logs larger than memory.
DEFAULT_CHUNK_BYTES = 16 << 20


@dataclass
class RequestTable:
    """Requests as columns, one entry per row.

    ``model_index`` maps each row to ``models`` (unique names, sorted), so that a conversion can
    evaluate one fit per model over all its rows at once. ``runtime_s`` is NaN where a row has
    no measured runtime (None when the column is absent altogether). ``source`` keeps the rows
    as read (a pyarrow Table for CSV, Parquet and DataFrames; raw JSON objects for JSONL) for
    writing them back with added columns.
    """

    models: list[str]
    model_index: NDArray[np.intp]
    num_prompt_tokens: NDArray[np.int64]
    num_output_tokens: NDArray[np.int64]
    runtime_s: NDArray[np.float64] | None = None
    path: str | None = None
    skipped_failed: int = 0
    source: Any = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.model_index.shape[0])

    @property
    def model_per_row(self) -> NDArray[np.object_]:
        return np.asarray(self.models, dtype=object)[self.model_index]

    def to_frame(self) -> Any:
        """The request columns as a pandas DataFrame."""
        import pandas as pd

        columns: dict[str, Any] = {
            MODEL: self.model_per_row,
            PROMPT: self.num_prompt_tokens,
            OUTPUT: self.num_output_tokens,
        }
        if self.runtime_s is not None:
            columns[RUNTIME] = self.runtime_s
        return pd.DataFrame(columns)

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
            _check_tokens(values, column, None)
        runtime = None
        if runtime_s is not None:
            runtime = np.asarray(runtime_s, dtype=np.float64)
            _check_runtimes(runtime, None)
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

    @classmethod
    def from_frame(cls, frame: Any, name: str = "DataFrame") -> RequestTable:
        """Build (and validate) a table from a pandas DataFrame (or pyarrow Table); NaN in
        runtime_s means "not measured". Errors name ``name`` and the 1-based row."""
        table = frame_to_arrow(frame, name)
        return _table_from_arrow(table, name, lambda: _locate_in_table(table, name, 0))


def _check_tokens(values: NDArray[Any], column: str, path: str | None) -> None:
    minimum = MIN_TOKENS.get(column, 1)
    bad = ~((values >= minimum) & (values <= MAX_TOKENS))
    if values.dtype.kind == "f":
        bad |= ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        first = int(np.argmax(bad))
        raise InputError(
            f"expected a whole number from {minimum} to {MAX_TOKENS}, got {_shown(values[first])}",
            path=path,
            row=first + 1,
            column=column,
        )


def _check_runtimes(values: NDArray[np.float64], path: str | None) -> None:
    # NaN means "no runtime for this row"; a given runtime must be a plausible duration.
    bad = np.isinf(values) | (values < MIN_RUNTIME_S) | (values > MAX_RUNTIME_S)
    if bad.any():
        first = int(np.argmax(bad))
        raise InputError(
            f"must be a finite number of seconds between {MIN_RUNTIME_S:g} and "
            f"{MAX_RUNTIME_S:g}, got {_shown(values[first])}",
            path=path,
            row=first + 1,
            column=RUNTIME,
        )


# Row-by-row checks: the one source of the error messages. The columnar readers only detect
# that a chunk has a bad value; these re-scan to say where, with the value as written.


def _check_request_row(
    get: Any, number: int, path: str | None, has_runtime: bool, nan_is_missing: bool
) -> None:
    where = {"path": path, "row": number}
    model = get(MODEL)
    if _is_missing(model) or not isinstance(model, str):
        raise InputError("expected a model name", column=MODEL, **where)
    parse_token_count(get(PROMPT), column=PROMPT, **where)
    parse_token_count(get(OUTPUT), column=OUTPUT, **where)
    if has_runtime:
        value = get(RUNTIME)
        if _is_missing(value) or (nan_is_missing and isinstance(value, float) and value != value):
            return
        parse_seconds(value, column=RUNTIME, **where)


def _locate_in_csv(path: str) -> None:
    """Scan a CSV file with the csv module; raise the first bad row's error (if any)."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            header = [cell.strip() for cell in next(reader, [])]
            width = len(header)
            has_runtime = RUNTIME in header
            positions = {c: header.index(c) for c in (*REQUEST_COLUMNS, RUNTIME) if c in header}
            for number, record in enumerate(reader, start=1):
                if not record or (len(record) == 1 and not record[0].strip()):
                    continue
                if len(record) != width:
                    raise InputError(
                        f"expected {width} fields as in the header, got {len(record)}",
                        path=path,
                        row=number,
                    )
                _check_request_row(
                    lambda c, r=record: r[positions[c]], number, path, has_runtime, False
                )
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file", path=path) from None
    except csv.Error as error:
        raise InputError(f"malformed CSV ({error})", path=path) from None


def _locate_in_table(table: Any, name: str, first_row: int) -> None:
    """Scan an in-memory table row by row (rows numbered from ``first_row + 1``)."""
    has_runtime = RUNTIME in table.column_names
    number = first_row
    for batch in table.to_batches(max_chunksize=65536):
        for record in batch.to_pylist():
            number += 1
            _check_request_row(record.get, number, name, has_runtime, True)


def _numpy(column: Any) -> NDArray[Any]:
    """A numeric pyarrow (chunked) array as numpy, nulls as NaN (float columns). Read from the
    buffers: pyarrow's own to_numpy imports pandas (0.4 s) on every call site's first use."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    kind = array.type
    if pa.types.is_floating(kind):
        code = "f"
    elif pa.types.is_signed_integer(kind):
        code = "i"
    elif pa.types.is_unsigned_integer(kind):
        code = "u"
    else:
        return array.to_numpy(zero_copy_only=False)
    if array.null_count:
        if code != "f":
            return array.to_numpy(zero_copy_only=False)
        array = pc.fill_null(array, math.nan)
    dtype = np.dtype(f"{code}{kind.bit_width // 8}")
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize
    )


def _table_from_arrow(
    table: Any, name: str, locate: Any, *, nan_is_missing: bool = True
) -> RequestTable:
    """Validate the request columns of a pyarrow Table vectorized; on any bad value call
    ``locate`` (which raises the precise, row-numbered error)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def bad() -> InputError:
        locate()
        return InputError("unreadable request columns", path=name)

    missing = [column for column in REQUEST_COLUMNS if column not in table.column_names]
    if missing:
        raise InputError(
            f"missing required column(s) {', '.join(missing)} "
            f"(columns: {', '.join(table.column_names)})",
            path=name,
            column=missing[0],
        )
    if table.num_rows == 0:
        raise InputError("no data rows", path=name)
    model = table.column(MODEL)
    if not pa.types.is_string(model.type) and not pa.types.is_large_string(model.type):
        raise bad()
    # (Comparisons in numpy: a Python scalar given to pyarrow.compute imports pandas.)
    if model.null_count or not _numpy(pc.utf8_length(pc.utf8_trim_whitespace(model))).all():
        raise bad()
    encoded = pc.dictionary_encode(model.combine_chunks())
    names = np.array(encoded.dictionary.to_pylist(), dtype=object)
    order = np.argsort(names)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    index = rank[_numpy(encoded.indices)]

    tokens: dict[str, NDArray[np.int64]] = {}
    for column in (PROMPT, OUTPUT):
        values = table.column(column)
        kind = values.type
        if values.null_count or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise bad()
        array = _numpy(values)
        minimum = MIN_TOKENS[column]
        ok = (array >= minimum) & (array <= MAX_TOKENS)
        if array.dtype.kind == "f":
            ok &= array == np.round(array)
        if not ok.all():
            raise bad()
        tokens[column] = array.astype(np.int64, copy=False)

    runtime = None
    if RUNTIME in table.column_names:
        values = table.column(RUNTIME)
        if not (pa.types.is_floating(values.type) or pa.types.is_integer(values.type)):
            if values.null_count != len(values):  # an all-empty column reads as strings/nulls
                raise bad()
            runtime = np.full(table.num_rows, np.nan)
        else:
            explicit_nan = False
            runtime = _numpy(values).astype(np.float64, copy=False)
            if pa.types.is_floating(values.type) and not nan_is_missing:
                # NaN where the cell held a value: "nan" written out (empty cells are null).
                explicit_nan = bool(np.isnan(runtime).sum() > values.null_count)
            if explicit_nan or (
                (np.isinf(runtime) | (runtime < MIN_RUNTIME_S) | (runtime > MAX_RUNTIME_S)).any()
            ):
                raise bad()
    return RequestTable(
        models=[str(n) for n in names[order]],
        model_index=index.astype(np.intp),
        num_prompt_tokens=tokens[PROMPT],
        num_output_tokens=tokens[OUTPUT],
        runtime_s=runtime,
        path=name,
        source=table,
    )


def _csv_header(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            header = next(csv.reader(handle), None)
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file", path=str(path)) from None
    except csv.Error as error:
        raise InputError(f"malformed CSV ({error})", path=str(path)) from None
    return _check_header(header, str(path), REQUEST_COLUMNS)


def _csv_options(header: list[str], block_bytes: int) -> tuple[Any, Any, Any]:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    # Other columns stay text, written back exactly as they were read.
    types = {column: pa.string() for column in header}
    types.update({PROMPT: pa.int64(), OUTPUT: pa.int64(), RUNTIME: pa.float64()})
    read = pacsv.ReadOptions(column_names=header, skip_rows=1, block_size=block_bytes)
    parse = pacsv.ParseOptions(newlines_in_values=False)
    convert = pacsv.ConvertOptions(column_types=types, null_values=[""], strings_can_be_null=False)
    return read, parse, convert


def _csv_pieces(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    """The data lines of a CSV file (header skipped) in pieces of about ``chunk_bytes``, each
    ending at a line end. Read here, not by pyarrow's streaming reader, whose read-ahead buffers
    as much of the file as it can: this bounds memory at a few pieces."""
    with open(path, "rb") as handle:
        handle.readline()  # the header (checked by _csv_header)
        while True:
            piece = handle.read(chunk_bytes)
            if not piece:
                return
            if not piece.endswith(b"\n"):
                piece += handle.readline()
            yield piece


def _slow_requests(path: Path) -> RequestTable:
    """The row-by-row reader (JSONL; CSV that pyarrow cannot type but Python can)."""
    rows = _read_rows(path, REQUEST_COLUMNS)
    records = rows.records if rows.format != "csv" else None
    if records is None:
        positions = {c: rows.columns.index(c) for c in rows.columns}
        records = [{c: r[i] for c, i in positions.items()} for r in rows.records]  # type: ignore[index]
    has_runtime = RUNTIME in rows.columns
    for record, number in zip(records, rows.numbers, strict=True):
        _check_request_row(record.get, number, rows.path, has_runtime, False)
    p = [parse_token_count(r.get(PROMPT), path=None, row=0, column=PROMPT) for r in records]
    o = [parse_token_count(r.get(OUTPUT), path=None, row=0, column=OUTPUT) for r in records]
    runtime = None
    if has_runtime:
        runtime = [math.nan if _is_missing(r.get(RUNTIME)) else float(r[RUNTIME]) for r in records]
    names, index = np.unique(
        np.asarray([r[MODEL] for r in records], dtype=object), return_inverse=True
    )
    return RequestTable(
        models=[str(n) for n in names],
        model_index=index.astype(np.intp),
        num_prompt_tokens=np.asarray(p, dtype=np.int64),
        num_output_tokens=np.asarray(o, dtype=np.int64),
        runtime_s=None if runtime is None else np.asarray(runtime, dtype=np.float64),
        path=rows.path,
        skipped_failed=rows.skipped_failed,
        source=rows,
    )


def iter_requests(
    source: str | Path | Any, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[RequestTable]:
    """Request tables chunk by chunk (CSV: about ``chunk_bytes`` of text each; Parquet: about
    ``chunk_bytes // 64`` rows each); JSONL and DataFrames come as one table. Memory stays flat
    however large the file. A bad value anywhere raises the same error, with the same file row,
    as ``read_requests``."""
    if not isinstance(source, (str, Path)):
        yield RequestTable.from_frame(source)
        return
    path = Path(source)
    kind = file_format(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    name = str(path)
    if kind == "jsonl":
        yield _slow_requests(path)
        return
    import pyarrow as pa

    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(path)
            batches = parquet.iter_batches(batch_size=max(1, chunk_bytes // 64))
        except Exception as error:
            raise InputError(f"not a readable Parquet file ({error})", path=name) from None
        first_row = 0
        for batch in batches:
            table = pa.Table.from_batches([batch])
            start = first_row
            yield _table_from_arrow(
                table, name, lambda t=table, s=start: _locate_in_table(t, name, s)
            )
            first_row += table.num_rows
        if first_row == 0:
            raise InputError("no data rows", path=name)
        return

    import pyarrow.csv as pacsv

    header = _csv_header(path)
    read, parse, convert = _csv_options(header, min(chunk_bytes, 1 << 20))
    read.skip_rows = 0
    rows = 0
    try:
        for piece in _csv_pieces(path, chunk_bytes):
            table = pacsv.read_csv(
                pa.py_buffer(piece), read_options=read, parse_options=parse, convert_options=convert
            )
            if table.num_rows == 0:
                continue
            rows += table.num_rows
            yield _table_from_arrow(table, name, lambda: _locate_in_csv(name), nan_is_missing=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        _locate_in_csv(name)
        # Nothing wrong row by row (e.g. spaces around numbers): the row-by-row reader.
        if rows:
            raise InputError(
                "values pyarrow cannot read; convert it in one piece", path=name
            ) from None
        yield _slow_requests(path)
        return
    if rows == 0:
        raise InputError("no data rows", path=name)


def read_requests(source: str | Path | Any) -> RequestTable:
    """Requests to convert, from a .csv, .jsonl or .parquet file or a pandas DataFrame: columns
    model, num_prompt_tokens, num_output_tokens (0 allowed) and optionally runtime_s (an empty
    cell / null / NaN in a DataFrame means "not measured"). Other columns are kept for output."""
    if not isinstance(source, (str, Path)):
        return RequestTable.from_frame(source)
    path = Path(source)
    kind = file_format(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    if kind == "jsonl":
        return _slow_requests(path)
    name = str(path)
    import pyarrow as pa

    if kind == "parquet":
        table = _read_parquet(path)
        return _table_from_arrow(table, name, lambda: _locate_in_table(table, name, 0))
    import pyarrow.csv as pacsv

    header = _csv_header(path)
    read, parse, convert = _csv_options(header, DEFAULT_CHUNK_BYTES)
    try:
        table = pacsv.read_csv(
            path, read_options=read, parse_options=parse, convert_options=convert
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        _locate_in_csv(name)
        return _slow_requests(path)
    return _table_from_arrow(table, name, lambda: _locate_in_csv(name), nan_is_missing=False)
