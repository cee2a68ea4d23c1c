"""The rows of a timing or request file (CSV, JSONL, Parquet) or of a DataFrame, and the checks
on their values: every bad value is an InputError naming the file, the 1-based data row (for
JSONL: the line number) and the column, so a user can fix it in an editor.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from idealized_runtime.core.errors import InputError, plain
from idealized_runtime.core.types import (
    MAX_TOKENS,
    check_runtime,
)

# Numbers as a file writes them: ASCII digits, an optional sign, point and exponent. Python's
# int() and float() also take "1_000", full-width and other Unicode digits: a typo or a paste
# from elsewhere should be refused, not read as a number.
_WHOLE_NUMBER = re.compile(r"\s*\+?[0-9]+\s*")
DECIMAL = re.compile(
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


def shown(value: Any) -> str:
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
            f"expected {expected}, got {shown(value)}", path=path, row=row, column=column
        )
    number: int | float
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        number = value  # compared as given: int(1e308) would be a 309-digit message
    elif isinstance(value, str) and _WHOLE_NUMBER.fullmatch(value):
        number = int(value)
    else:
        raise InputError(
            f"expected {expected}, got {shown(value)}", path=path, row=row, column=column
        )
    if number < minimum:
        raise InputError(
            f"must be at least {minimum}, got {shown(number)}", path=path, row=row, column=column
        )
    if number > MAX_TOKENS:
        raise InputError(
            f"at most {MAX_TOKENS} tokens, got {shown(number)}", path=path, row=row, column=column
        )
    return int(number)


def parse_seconds(value: Any, *, path: str | None, row: int | None, column: str) -> float:
    """A duration in seconds: a finite positive number."""
    if isinstance(value, np.generic):
        value = value.item()
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, str))
        or (isinstance(value, str) and not DECIMAL.fullmatch(value))
    ):
        raise InputError(
            f"expected a number of seconds, got {shown(value)}", path=path, row=row, column=column
        )
    number = float(value)
    if problem := check_runtime(number):
        raise InputError(f"{problem}, got {shown(value)}", path=path, row=row, column=column)
    return number


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def parse_non_negative(value: Any, *, path: str, row: int, column: str) -> float:
    if isinstance(value, (int, float)) or (isinstance(value, str) and DECIMAL.fullmatch(value)):
        number = math.nan if isinstance(value, bool) else float(value)
        if math.isfinite(number) and number >= 0:
            return number
    raise InputError(
        f"expected a non-negative number, got {plain(value)!r}", path=path, row=row, column=column
    )


def check_model_name(name: Any, *, path: str | None, row: int | None) -> str:
    """A model name as a measurement stores it: text of 1 to 200 characters, none of them a
    control (NUL included) or bidirectional-formatting character."""
    if is_missing(name) or not isinstance(name, str):
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


# --- row sources -------------------------------------------------------------------------------


@dataclass
class Rows:
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


def check_header(header: list[str] | None, name: str, required: Sequence[str]) -> list[str]:
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


def csv_records(
    reader: Iterator[list[str]], width: int, name: str
) -> Iterator[tuple[int, list[str]]]:
    """The data rows after the header with their 1-based numbers; blank lines are passed over, a
    row of another width than the header's is an InputError."""
    for number, record in enumerate(reader, start=1):
        if not record or (len(record) == 1 and not record[0].strip()):
            continue  # blank line
        if len(record) != width:
            raise InputError(
                f"expected {width} fields as in the header, got {len(record)}",
                path=name,
                row=number,
            )
        yield number, record


def _read_csv(text: str, name: str, required: Sequence[str]) -> Rows:
    with io.StringIO(text, newline="") as handle:
        reader = csv.reader(handle)
        header = check_header(next(reader, None), name, required)
        records: list[list[str]] = []
        numbers: list[int] = []
        for number, record in csv_records(reader, len(header), name):
            records.append(record)
            numbers.append(number)
    if not records:
        raise InputError("no data rows", path=name)
    return Rows(name, "csv", header, records, numbers)


def _read_jsonl(text: str, name: str, required: Sequence[str]) -> Rows:
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
    return Rows(name, "jsonl", list(columns), records, numbers, skipped_failed)


def rows_from_text(text: str, name: str, kind: str, required: Sequence[str]) -> Rows:
    try:
        if kind == "csv":
            return _read_csv(text, name, required)
        return _read_jsonl(text, name, required)
    except csv.Error as error:
        raise InputError(f"malformed CSV ({error})", path=name) from None


def read_rows(path: str | Path, required: Sequence[str]) -> Rows:
    path = Path(path)
    kind = file_format(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    if kind == "parquet":
        return rows_from_arrow(read_parquet(path), str(path), required)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file", path=str(path)) from None
    return rows_from_text(text, str(path), kind, required)


def read_parquet(path: Path) -> Any:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except Exception as error:  # pyarrow raises ArrowInvalid, OSError, ... for a bad file
        raise InputError(f"not a readable Parquet file ({error})", path=str(path)) from None


def check_table_columns(table: Any, name: str, required: Sequence[str]) -> None:
    """An InputError naming the first required column a pyarrow Table lacks, if any."""
    missing = [column for column in required if column not in table.column_names]
    if missing:
        raise InputError(
            f"missing required column(s) {', '.join(missing)} "
            f"(columns: {', '.join(table.column_names)})",
            path=name,
            column=missing[0],
        )


def rows_from_arrow(table: Any, name: str, required: Sequence[str]) -> Rows:
    """Rows of an in-memory table (pyarrow Table), numbered 1.. in order, as Python values."""
    check_table_columns(table, name, required)
    records = table.to_pylist()
    for record in records:  # NaN in a float column of a DataFrame means "no value"
        for key, value in record.items():
            if isinstance(value, float) and math.isnan(value):
                record[key] = None
    if not records:
        raise InputError("no data rows", path=name)
    return Rows(name, "table", list(table.column_names), records, list(range(1, len(records) + 1)))


def frame_to_arrow(frame: Any, name: str = "DataFrame") -> Any:
    """A pandas DataFrame (or a pyarrow Table) as a pyarrow Table, the index dropped."""
    import pyarrow as pa

    if isinstance(frame, pa.Table):
        return frame
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as error:
        raise InputError(f"cannot read the columns ({error})", path=name) from None
