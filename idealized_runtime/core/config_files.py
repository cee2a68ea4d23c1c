"""Configuration files in YAML (``bench``, ``monitor``), read and validated into a pydantic
model; every problem is one ``InputError`` line naming the file and, for a value, where it
is (``endpoints.0.base_url: ...``)."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, TypeVar

from pydantic import AfterValidator, BaseModel, Field, ValidationError

from idealized_runtime.core.errors import InputError

Config = TypeVar("Config", bound=BaseModel)


def _http_url(value: str) -> str:
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(f"must be an http(s):// URL, got {value!r}")
    return value


# An API's base URL in a configuration file: checked when the file is read, so a typo is one
# error line naming the entry instead of a failed request in the middle of a run.
BaseUrl = Annotated[str, Field(min_length=1), AfterValidator(_http_url)]


def validation_line(error: ValidationError, skip: Collection[str] = ()) -> str:
    """The first error as one line: where (dotted, ``skip`` left out: tags of a union) and what."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"] if part not in skip)
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def load_yaml_config(
    path: str | Path, schema: type[Config], *, what: str, expected: str, skip: Collection[str] = ()
) -> Config:
    """``path`` read as YAML and validated as ``schema``. ``what`` names the file in the
    message of a missing one ("benchmark file"); ``expected`` says what a file that is not a
    mapping should hold."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError(f"no such {what}", path=str(path))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(f"not valid YAML{where}", path=str(path)) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(
            f"cannot read: {getattr(error, 'strerror', None) or error}", path=str(path)
        ) from None
    if not isinstance(data, dict):
        raise InputError(expected, path=str(path))
    try:
        return schema.model_validate(data)
    except ValidationError as error:
        raise InputError(validation_line(error, skip), path=str(path)) from None
