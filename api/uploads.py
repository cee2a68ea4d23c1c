"""Parse uploaded measurement CSV with the file reader's own validation
(``cost_model.fitting.measurements_io.parse_measurements``), errors naming ``upload`` as the
file."""

from __future__ import annotations

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Measurement
from idealized_runtime.cost_model.fitting.measurements_io import parse_measurements

UPLOAD_NAME = "upload"


def parse_measurements_csv(data: bytes) -> list[Measurement]:
    if not data.strip():
        raise InputError("empty body: expected CSV with a header row and data rows")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", path=UPLOAD_NAME) from None
    try:
        return parse_measurements(text, name=UPLOAD_NAME, kind="csv")
    except InputError:
        raise
    except ValueError as error:  # pydantic's, from a value the reader let through
        raise InputError(str(error), path=UPLOAD_NAME) from None
