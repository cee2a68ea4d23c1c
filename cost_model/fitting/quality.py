"""How well a fit reproduces timings: R^2, mean and max absolute percentage error."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from idealized_runtime.core.types import FitQuality


def fit_quality(actual: ArrayLike, predicted: ArrayLike) -> FitQuality:
    """Quality of ``predicted`` against ``actual`` runtimes (same shape, actual > 0).

    Percentage errors are relative to the actual runtime, as fractions (0.01 = 1%): they are
    what matters when an estimate is compared with a measured request, whatever its size.
    """
    y = np.asarray(actual, dtype=np.float64).ravel()
    y_hat = np.asarray(predicted, dtype=np.float64).ravel()
    if y.shape != y_hat.shape:
        raise ValueError(f"actual {y.shape} and predicted {y_hat.shape} differ in shape")
    if y.size == 0:
        return FitQuality(n_points=0, r2=float("nan"), mape=float("nan"), max_error=float("nan"))
    residual = y_hat - y
    ss_res = float(np.dot(residual, residual))
    centred = y - y.mean()
    ss_tot = float(np.dot(centred, centred))
    # A constant target has no variance to explain: R^2 is 1 if it is hit exactly, else 0.
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    relative = np.abs(residual) / np.abs(y)
    return FitQuality(
        n_points=int(y.size),
        r2=float(r2),
        mape=float(relative.mean()),
        max_error=float(relative.max()),
    )
