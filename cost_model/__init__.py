"""The cost models: runtimes fitted to timings, and runtimes predicted from the hardware.

Three subpackages, one per stage of the pipeline they serve (see docs/architecture.md):

``fitting``
    Runtime models fitted to timings: read measurements and request logs (``measurements_io``,
    ``request_logs``, both on ``file_rows``),
    fit runtime(p, o) = alpha(p) + beta * (o - 1) by HELM's method, ours or the denoised method
    (``methods``, ``basis``, ``denoise``), evaluate a fit (``evaluate``, ``quality``), store it
    (``fit_files``, ``helm_format``) and convert request logs with it (``convert``).
``hardware``
    The hardware model: the work of a forward pass counted from the architecture (``counts``),
    turned into seconds on a GPU (``roofline``) at a stack's efficiency (``stacks``: engine
    stacks calibrated on published measurements; ``calibration``: the efficiency of a profiled
    stack), the GPUs a deployment needs (``planner``) and one request's figures and costs
    (``estimate``).
``serving``
    The serving simulator: a continuous-batching server under load (``simulator``), its step
    times (``step_time``) and workloads (``workload``).

The documented Python API is importable from this package (PEP 562: names load on first use, so
``import idealized_runtime.cost_model`` stays cheap and scikit-learn or scipy load only when a
fit runs): ``fit_frame``, ``fit_measurements``, ``convert_frame``, ``convert_file``,
``convert_requests``, ``read_fit_file``, ``write_fit_file``, ``import_helm_table``,
``export_helm_table``, ``read_measurements``, ``read_requests``, ``iter_requests``,
``predict_runtime``, ``predict_alpha``, ``fit_quality``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "FIT_METHODS": "idealized_runtime.cost_model.fitting.methods",
    "fit_measurements": "idealized_runtime.cost_model.fitting.methods",
    "fit_frame": "idealized_runtime.cost_model.fitting.methods",
    "Conversion": "idealized_runtime.cost_model.fitting.convert",
    "convert_requests": "idealized_runtime.cost_model.fitting.convert",
    "convert_file": "idealized_runtime.cost_model.fitting.convert",
    "convert_frame": "idealized_runtime.cost_model.fitting.convert",
    "write_conversion": "idealized_runtime.cost_model.fitting.convert",
    "predict_alpha": "idealized_runtime.cost_model.fitting.evaluate",
    "predict_runtime": "idealized_runtime.cost_model.fitting.evaluate",
    "read_fit_file": "idealized_runtime.cost_model.fitting.fit_files",
    "write_fit_file": "idealized_runtime.cost_model.fitting.fit_files",
    "export_helm_table": "idealized_runtime.cost_model.fitting.helm_format",
    "import_helm_table": "idealized_runtime.cost_model.fitting.helm_format",
    "RequestTable": "idealized_runtime.cost_model.fitting.request_logs",
    "iter_requests": "idealized_runtime.cost_model.fitting.request_logs",
    "parse_measurements": "idealized_runtime.cost_model.fitting.measurements_io",
    "read_measurements": "idealized_runtime.cost_model.fitting.measurements_io",
    "read_requests": "idealized_runtime.cost_model.fitting.request_logs",
    "fit_quality": "idealized_runtime.cost_model.fitting.quality",
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
