"""Fitting and evaluating runtime models: HELM's method, a better default, denoised fits,
HELM JSON import/export, fit files, request-log conversion."""

from cost_model.convert import Conversion, convert_requests, write_conversion
from cost_model.evaluate import predict_alpha, predict_runtime
from cost_model.fit_files import read_fit_file, write_fit_file
from cost_model.fitting import FIT_METHODS, fit_measurements
from cost_model.helm_format import export_helm_table, import_helm_table
from cost_model.measurements_io import (
    RequestTable,
    parse_measurements,
    read_measurements,
    read_requests,
)
from cost_model.quality import fit_quality

__all__ = [
    "FIT_METHODS",
    "Conversion",
    "RequestTable",
    "convert_requests",
    "export_helm_table",
    "fit_measurements",
    "fit_quality",
    "import_helm_table",
    "parse_measurements",
    "predict_alpha",
    "predict_runtime",
    "read_fit_file",
    "read_measurements",
    "read_requests",
    "write_conversion",
    "write_fit_file",
]
