"""Fitting and evaluating runtime models: HELM's method, a better default, denoised fits,
HELM JSON import/export, and the analytic hardware (roofline) model."""

from cost_model.evaluate import predict_alpha, predict_runtime

__all__ = ["predict_alpha", "predict_runtime"]
