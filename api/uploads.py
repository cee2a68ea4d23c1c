"""Parse uploaded measurement CSV with the file reader's own validation.

``cost_model.measurements_io.read_measurements`` reads a path; the upload is spooled to a
temporary ``.csv`` file so that uploads and files are validated by the same code, and its
errors are re-labelled with ``upload`` instead of the temporary path.
"""

from __future__ import annotations

import os
import tempfile

from cost_model.measurements_io import read_measurements
from idealized_runtime.errors import InputError
from idealized_runtime.types import Measurement

UPLOAD_NAME = "upload"


def parse_measurements_csv(data: bytes) -> list[Measurement]:
    if not data.strip():
        raise InputError("empty body: expected CSV with a header row and data rows")
    handle, path = tempfile.mkstemp(suffix=".csv", prefix="ir-upload-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        return read_measurements(path)
    except InputError as error:
        raise InputError(
            error.message, path=UPLOAD_NAME, row=error.row, column=error.column
        ) from None
    except ValueError as error:  # pydantic's, from a value the reader let through
        raise InputError(str(error), path=UPLOAD_NAME) from None
    finally:
        os.unlink(path)
