"""Uploads turned into stored rows as they stream in, with the file readers' own checks
(``cost_model.fitting.measurements_io`` and ``.file_rows``, ``timing.importers.helm``,
``timing.summary``): errors name
``upload`` as the file, then the row (CSV), the archive member, run and instance (HELM), or
the line (JSONL); a JSON measurement set is validated measurement by measurement. A row limit
is enforced at the row that passes it, not after reading all."""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterable, Iterator
from typing import IO, Any

from pydantic import TypeAdapter, ValidationError

from idealized_runtime.api.errors import MAX_VALIDATION_ERRORS, CountedValidationError
from idealized_runtime.api.json_stream import JsonSyntaxError, StreamedObject
from idealized_runtime.api.schemas import MeasurementIn, MeasurementSetEnvelope
from idealized_runtime.api.settings import DEFAULT_MAX_STRING_BYTES
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Measurement
from idealized_runtime.cost_model.fitting.file_rows import (
    check_model_name,
    parse_seconds,
    parse_token_count,
)
from idealized_runtime.cost_model.fitting.measurements_io import iter_csv_measurements

UPLOAD_NAME = "upload"


class MeasurementColumns:
    """Validated measurements held column by column: about 52 bytes a row (model names once),
    where a Measurement object per row costs some 600. Appending the row after ``max_rows`` is
    an InputError, so an upload stops at the limit."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self._model_ids: dict[str, int] = {}
        self._model = array("I")
        self._prompt, self._output, self._batch = array("q"), array("q"), array("q")
        self._runtime, self._ttft, self._std = array("d"), array("d"), array("d")

    def __len__(self) -> int:
        return len(self._model)

    def too_many(self) -> InputError:
        return InputError(
            f"more than {self.max_rows} measurements in one upload (this server's limit): "
            "split the upload",
            path=UPLOAD_NAME,
        )

    def append(self, measurement: Measurement) -> None:
        if len(self._model) >= self.max_rows:
            raise self.too_many()
        model_id = self._model_ids.setdefault(measurement.model, len(self._model_ids))
        self._model.append(model_id)
        self._prompt.append(measurement.num_prompt_tokens)
        self._output.append(measurement.num_output_tokens)
        self._batch.append(measurement.batch_size)
        self._runtime.append(measurement.runtime_s)
        self._ttft.append(math.nan if measurement.ttft_s is None else measurement.ttft_s)
        self._std.append(math.nan if measurement.std_s is None else measurement.std_s)

    def extend(self, measurements: Iterable[Measurement]) -> MeasurementColumns:
        for measurement in measurements:
            self.append(measurement)
        return self

    @property
    def models(self) -> list[str]:
        return sorted(self._model_ids)

    def records(self) -> Iterator[dict[str, Any]]:
        """The rows as the measurements table's columns, one dict at a time."""
        names = list(self._model_ids)
        for i, model_id in enumerate(self._model):
            ttft, std = self._ttft[i], self._std[i]
            yield {
                "model": names[model_id],
                "num_prompt_tokens": self._prompt[i],
                "num_output_tokens": self._output[i],
                "batch_size": self._batch[i],
                "runtime_s": self._runtime[i],
                "ttft_s": None if math.isnan(ttft) else ttft,
                "std_s": None if math.isnan(std) else std,
            }


MEASUREMENTS = TypeAdapter(list[MeasurementIn])
ENVELOPE = TypeAdapter(MeasurementSetEnvelope)
# Measurements validated in one pydantic call (one call per row costs more than the row).
VALIDATION_BATCH = 1000


def json_measurement_set(
    chunks: Iterable[bytes], max_rows: int, max_string_bytes: int = DEFAULT_MAX_STRING_BYTES
) -> tuple[MeasurementSetEnvelope, MeasurementColumns]:
    """A JSON measurement set (MeasurementSetCreate) as it streams in: each measurement
    validated strictly on its own and stored in columns, the other members validated at the
    end. Errors as FastAPI's (the first 20 and their count), under ``body``."""
    document = StreamedObject(chunks, "measurements", max_string_bytes)
    columns = MeasurementColumns(max_rows)
    errors: list[dict[str, Any]] = []
    count = rows = 0

    def refuse(items: list[dict[str, Any]], prefix: tuple[Any, ...]) -> None:
        nonlocal count
        for item in items:
            count += 1
            if len(errors) < MAX_VALIDATION_ERRORS:
                errors.append({**item, "loc": (*prefix, *item["loc"])})

    batch: list[Any] = []

    def validate() -> None:
        first = rows - len(batch)
        # The parser gives JSON's types (str, int, float, bool, None, dict, list): strict
        # validation of these is strict validation of the JSON text.
        try:
            valid = MEASUREMENTS.validate_python(batch, strict=True)
        except ValidationError as error:
            for item in error.errors(include_url=False):
                index, *loc = item["loc"]
                refuse([{**item, "loc": tuple(loc)}], ("body", "measurements", first + index))
        else:
            if not errors:  # past the first error only errors are collected
                columns.extend(valid)
        batch.clear()

    try:
        for _index, item in document.items():
            rows += 1
            if rows > max_rows:
                raise columns.too_many()
            batch.append(item)
            if len(batch) == VALIDATION_BATCH:
                validate()
        if batch:
            validate()
    except JsonSyntaxError as error:
        where = ("body",) if error.item is None else ("body", "measurements", error.item)
        refuse([{"type": "json_invalid", "loc": (), "msg": f"Invalid JSON: {error}"}], where)
        raise CountedValidationError(errors, count) from None
    try:
        envelope = ENVELOPE.validate_json(json.dumps(document.others), strict=True)
    except ValidationError as error:
        refuse(error.errors(include_url=False), ("body",))
        raise CountedValidationError(errors, count) from None
    if not document.array_given and not envelope.measurements:
        refuse([{"type": "missing", "loc": ("measurements",), "msg": "Field required"}], ("body",))
    elif document.array_given and rows == 0:
        too_short = "List should have at least 1 item after validation, not 0"
        refuse([{"type": "too_short", "loc": ("measurements",), "msg": too_short}], ("body",))
    if errors:
        raise CountedValidationError(errors, count)
    return envelope, columns.extend(envelope.measurements)


def csv_measurements(lines: Iterable[str], max_rows: int) -> MeasurementColumns:
    """A CSV upload (its lines as they arrive) as stored rows."""
    return MeasurementColumns(max_rows).extend(iter_csv_measurements(lines, name=UPLOAD_NAME))


def helm_measurements(
    file: IO[bytes], *, max_rows: int, max_bytes: int, max_members: int
) -> tuple[MeasurementColumns, int]:
    """The requests with a measured inference_runtime in an uploaded archive of HELM runs, and
    the number of runs read. A bad value is an error naming its run and instance."""
    from idealized_runtime.timing.importers.helm import ArchiveLimits, iter_archive_rows

    limits = ArchiveLimits(max_bytes=max_bytes, max_members=max_members)
    columns = MeasurementColumns(max_rows)
    runs: set[str] = set()
    for row in iter_archive_rows(file, name=UPLOAD_NAME, limits=limits):
        runs.add(row["run"])
        if row["runtime_s"] is None:
            continue
        where = f"{UPLOAD_NAME}, run {row['run']!r}, instance {row['instance_id']!r}"
        if row["perturbation"]:
            where += f" ({row['perturbation']})"
        columns.append(
            Measurement(
                model=check_model_name(row["model"], path=where, row=None),
                num_prompt_tokens=parse_token_count(
                    row["num_prompt_tokens"], path=where, row=None, column="num_prompt_tokens"
                ),
                num_output_tokens=parse_token_count(
                    row["num_output_tokens"], path=where, row=None, column="num_output_tokens"
                ),
                runtime_s=parse_seconds(
                    row["runtime_s"], path=where, row=None, column="inference_runtime"
                ),
            )
        )
    if not columns:
        raise InputError("the HELM runs hold no request with a measured inference_runtime")
    return columns, len(runs)


def raw_load_rows(lines: Iterable[str], max_rows: int) -> list[dict[str, Any]]:
    """Raw ``measure`` rows (JSONL lines as they arrive), at most ``max_rows``."""
    from idealized_runtime.timing.summary import iter_raw_lines

    rows: list[dict[str, Any]] = []
    for row in iter_raw_lines(lines, path=UPLOAD_NAME):
        if len(rows) >= max_rows:
            raise InputError(
                f"more than {max_rows} rows in one upload (this server's limit): split it",
                path=UPLOAD_NAME,
            )
        rows.append(row)
    return rows
