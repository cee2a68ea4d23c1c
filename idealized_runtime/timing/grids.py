"""Grids of (prompt tokens, output tokens) points for timing black-box APIs.

``helm-synthetic`` is the grid HELM's synthetic efficiency scenario was run with (its run-spec
generator: prompt sizes 1, 256, 512, 1024, 1536 x output lengths 1, 2, 4, 8, 16, 32, 64; the
scenario module also ships prompts of 16, 32, 64, 768 and 1920 tokens, which were not run).
``quick`` is a 3 x 3 grid for smoke tests and small local models. Anything else is a CSV or JSON
file of points.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, NamedTuple

from idealized_runtime.core.errors import InputError, plain
from idealized_runtime.core.types import MAX_TOKENS

HELM_PROMPT_SIZES = (1, 256, 512, 1024, 1536)
HELM_OUTPUT_LENGTHS = (1, 2, 4, 8, 16, 32, 64)
QUICK_PROMPT_SIZES = (1, 64, 256)
QUICK_OUTPUT_LENGTHS = (1, 4, 16)
NAMED_GRIDS = ("helm-synthetic", "quick")

PROMPT_COLUMN, OUTPUT_COLUMN = "num_prompt_tokens", "num_output_tokens"


class GridPoint(NamedTuple):
    num_prompt_tokens: int
    num_output_tokens: int


def _product(prompts: tuple[int, ...], outputs: tuple[int, ...]) -> list[GridPoint]:
    return [GridPoint(p, o) for p in prompts for o in outputs]


def load_grid(spec: str) -> list[GridPoint]:
    """A named grid, or the points of a CSV/JSON file; duplicates are dropped, order kept."""
    if spec == "helm-synthetic":
        return _product(HELM_PROMPT_SIZES, HELM_OUTPUT_LENGTHS)
    if spec == "quick":
        return _product(QUICK_PROMPT_SIZES, QUICK_OUTPUT_LENGTHS)
    path = Path(spec)
    if not path.is_file():
        raise InputError(
            f"grid must be one of {', '.join(NAMED_GRIDS)} or an existing .csv/.json file",
            path=spec,
        )
    try:
        if path.suffix.lower() == ".csv":
            points = _read_csv(path)
        elif path.suffix.lower() == ".json":
            points = _read_json(path)
        else:
            raise InputError("grid file must be .csv or .json", path=spec)
    except UnicodeDecodeError:
        raise InputError("not a UTF-8 text file", path=spec) from None
    except csv.Error as error:
        raise InputError(f"malformed CSV ({error})", path=spec) from None
    except OSError as error:
        raise InputError(f"cannot read ({error.strerror or error})", path=spec) from None
    if not points:
        raise InputError("grid file has no points", path=spec)
    return list(dict.fromkeys(points))


def _count(value: Any, *, path: str, row: int, column: str) -> int:
    if isinstance(value, bool):
        value = None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise InputError(
            f"expected an integer from 1 to {MAX_TOKENS}, got {plain(value)!r}",
            path=path,
            row=row,
            column=column,
        )
    return value


def _read_csv(path: Path) -> list[GridPoint]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        header = [name.strip() for name in reader.fieldnames or []]
        for column in (PROMPT_COLUMN, OUTPUT_COLUMN):
            if column not in header:
                raise InputError(
                    f"missing column (header: {header})", path=str(path), column=column
                )
        points = []
        for row, record in enumerate(reader, start=1):
            record = {(key or "").strip(): value for key, value in record.items()}
            points.append(
                GridPoint(
                    *(
                        _count(record.get(column), path=str(path), row=row, column=column)
                        for column in (PROMPT_COLUMN, OUTPUT_COLUMN)
                    )
                )
            )
    return points


def _read_json(path: Path) -> list[GridPoint]:
    """A list of ``{"num_prompt_tokens": p, "num_output_tokens": o}`` objects or ``[p, o]``
    pairs, or an object ``{"points": [...]}``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON: {error}", path=str(path)) from None
    if isinstance(data, dict):
        data = data.get("points")
    if not isinstance(data, list):
        raise InputError("expected a list of points", path=str(path))
    points = []
    for row, item in enumerate(data, start=1):
        if isinstance(item, dict):
            values = [item.get(PROMPT_COLUMN), item.get(OUTPUT_COLUMN)]
        elif isinstance(item, list) and len(item) == 2:
            values = item
        else:
            raise InputError(
                "expected an object or a [prompt, output] pair", path=str(path), row=row
            )
        points.append(
            GridPoint(
                *(
                    _count(value, path=str(path), row=row, column=column)
                    for value, column in zip(values, (PROMPT_COLUMN, OUTPUT_COLUMN), strict=True)
                )
            )
        )
    return points
