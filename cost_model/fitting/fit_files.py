"""Fit files: our native JSON (every field of FittedCostModel) or HELM's table format.

Native files look like ``{"format": "idealized-runtime/fit", "version": 1, "fits": {model:
FittedCostModel}}``. ``read_fit_file`` recognises both kinds by their content.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import FittedCostModel
from idealized_runtime.cost_model.fitting.helm_format import (
    OVERHEAD_KEY,
    export_helm_table,
    import_helm_table,
)
from idealized_runtime.cost_model.fitting.helm_format import (
    looks_like_helm_table as _looks_like_helm_table,
)

NATIVE_FORMAT = "idealized-runtime/fit"
NATIVE_VERSION = 1
FitFileFormat = Literal["native", "helm"]


def fits_to_native(fits: Mapping[str, FittedCostModel]) -> dict[str, Any]:
    return {
        "format": NATIVE_FORMAT,
        "version": NATIVE_VERSION,
        "fits": {model: fit.model_dump(mode="json") for model, fit in fits.items()},
    }


def fits_from_json(data: Any, *, path: str | None = None) -> dict[str, FittedCostModel]:
    """Parse either format from already-decoded JSON."""
    if isinstance(data, Mapping) and data.get("format") == NATIVE_FORMAT:
        if data.get("version") != NATIVE_VERSION:
            raise InputError(f"unsupported fit file version {data.get('version')!r}", path=path)
        entries = data.get("fits")
        if not isinstance(entries, Mapping) or not entries:
            raise InputError("'fits' must be a non-empty object of models", path=path)
        fits = {}
        for model, entry in entries.items():
            try:
                fits[model] = FittedCostModel.model_validate(entry)
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                raise InputError(
                    f"model {model!r}: {where}: {first['msg']}", path=path, column=where or None
                ) from None
        return fits
    if _looks_like_helm_table(data):
        # HELM's denoised tables are the ones with a fixed overhead.
        denoised = any(OVERHEAD_KEY in entry for entry in data.values())
        try:
            return import_helm_table(data, method="denoised" if denoised else "helm")
        except InputError as error:
            raise InputError(error.message, path=path) from None
    raise InputError(
        'not a fit file: expected our fit JSON (with "format": "idealized-runtime/fit") or '
        "HELM's runtime table ({model: {runtime_per_output_token, runtime_for_prompt_tokens}}; "
        "older tables: runtime_for_input_tokens)",
        path=path,
    )


def read_fit_file(path: str | Path) -> dict[str, FittedCostModel]:
    """Fits from our native JSON or HELM's JSON, detected from the content."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", path=name) from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read ({error})", path=name) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"not valid JSON ({error.msg}, line {error.lineno})", path=name) from None
    return fits_from_json(data, path=name)


def write_fit_file(
    fits: Mapping[str, FittedCostModel], path: str | Path, format: FitFileFormat = "native"
) -> None:
    """Write fits atomically: native (lossless) or HELM's table (HELM's form; see helm_form)."""
    if format == "native":
        data = fits_to_native(fits)
    elif format == "helm":
        data = export_helm_table(fits)
    else:
        raise InputError(f"unknown fit file format {format!r}; choose native or helm")
    with atomic_writer(path) as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
