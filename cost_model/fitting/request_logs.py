"""Request logs to convert, from CSV, JSONL or Parquet files or a pandas DataFrame: a columnar
``RequestTable`` (numpy arrays) for logs of millions of requests. CSV and Parquet go through
pyarrow (columnar parsing, checks vectorized per chunk, a Python re-scan only to locate a bad
value), JSONL through the json module. The table keeps the input's rows so that a conversion can
write them back with added columns. Values are checked as ``file_rows`` says.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    MAX_RUNTIME_S,
    MAX_TOKENS,
    MIN_RUNTIME_S,
)
from idealized_runtime.cost_model.fitting.file_rows import (
    MIN_TOKENS,
    MODEL,
    OUTPUT,
    PROMPT,
    REQUEST_COLUMNS,
    RUNTIME,
    check_header,
    check_table_columns,
    file_format,
    frame_to_arrow,
    is_missing,
    parse_seconds,
    parse_token_count,
    read_parquet,
    read_rows,
    shown,
)

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
            f"expected a whole number from {minimum} to {MAX_TOKENS}, got {shown(values[first])}",
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
            f"{MAX_RUNTIME_S:g}, got {shown(values[first])}",
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
    if is_missing(model) or not isinstance(model, str):
        raise InputError("expected a model name", column=MODEL, **where)
    parse_token_count(get(PROMPT), column=PROMPT, **where)
    parse_token_count(get(OUTPUT), column=OUTPUT, **where)
    if has_runtime:
        value = get(RUNTIME)
        if is_missing(value) or (nan_is_missing and isinstance(value, float) and value != value):
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

    check_table_columns(table, name, REQUEST_COLUMNS)
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
    return check_header(header, str(path), REQUEST_COLUMNS)


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
    rows = read_rows(path, REQUEST_COLUMNS)
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
        runtime = [math.nan if is_missing(r.get(RUNTIME)) else float(r[RUNTIME]) for r in records]
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
        table = read_parquet(path)
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
