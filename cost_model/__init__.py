"""Fitting and evaluating runtime models: HELM's method, a better default, denoised fits,
HELM JSON import/export, fit files, request-log conversion (files or pandas DataFrames).

Names are imported on first use (PEP 562): ``import cost_model`` stays cheap, and scikit-learn
or scipy load only when a fit runs.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "FIT_METHODS": "idealized_runtime.cost_model.fitting",
    "fit_measurements": "idealized_runtime.cost_model.fitting",
    "fit_frame": "idealized_runtime.cost_model.fitting",
    "Conversion": "idealized_runtime.cost_model.convert",
    "convert_requests": "idealized_runtime.cost_model.convert",
    "convert_file": "idealized_runtime.cost_model.convert",
    "convert_frame": "idealized_runtime.cost_model.convert",
    "write_conversion": "idealized_runtime.cost_model.convert",
    "predict_alpha": "idealized_runtime.cost_model.evaluate",
    "predict_runtime": "idealized_runtime.cost_model.evaluate",
    "read_fit_file": "idealized_runtime.cost_model.fit_files",
    "write_fit_file": "idealized_runtime.cost_model.fit_files",
    "export_helm_table": "idealized_runtime.cost_model.helm_format",
    "import_helm_table": "idealized_runtime.cost_model.helm_format",
    "RequestTable": "idealized_runtime.cost_model.measurements_io",
    "iter_requests": "idealized_runtime.cost_model.measurements_io",
    "parse_measurements": "idealized_runtime.cost_model.measurements_io",
    "read_measurements": "idealized_runtime.cost_model.measurements_io",
    "read_requests": "idealized_runtime.cost_model.measurements_io",
    "fit_quality": "idealized_runtime.cost_model.quality",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'cost_model' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
