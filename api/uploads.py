"""Uploads turned into stored rows as they stream in, with the file readers' own checks
(``cost_model.measurements_io``, ``timing.importers.helm``, ``timing.summary``): errors name
``upload`` as the file, then the row (CSV), the archive member, run and instance (HELM), or
the line (JSONL). A row limit is enforced at the row that passes it, not after reading all."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator
from typing import IO, Any

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Measurement
from idealized_runtime.cost_model.measurements_io import (
    check_model_name,
    iter_csv_measurements,
    parse_seconds,
    parse_token_count,
)

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

    def append(self, measurement: Measurement) -> None:
        if len(self._model) >= self.max_rows:
            raise InputError(
                f"more than {self.max_rows} measurements in one upload (this server's limit): "
                "split the upload",
                path=UPLOAD_NAME,
            )
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
