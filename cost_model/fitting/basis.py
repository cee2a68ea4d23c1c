"""What the fitting methods share: the prompt sizes alpha is fitted at, the interpolation basis
that matches ``evaluate``'s rule, and the finished ``FittedCostModel`` with its fit quality.

``fitting`` (the ``helm`` and ``default`` methods, and the dispatcher) and ``denoise`` both build
on this module, so neither imports the other's internals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from idealized_runtime.core.types import FitMethod, FittedCostModel, Provenance
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.fitting.quality import fit_quality
from idealized_runtime.cost_model.fitting.timings import ModelTimings

# Up to this many distinct prompt sizes, alpha gets one value per size (a profiling grid);
# beyond it (e.g. request logs with arbitrary prompts) alpha is fitted at quantile knots.
MAX_TABLE_SIZES = 64
QUANTILE_KNOTS = 32


def finish_fit(
    timings: ModelTimings,
    *,
    method: FitMethod,
    alpha_rule: str,
    sizes: Sequence[float],
    alphas: Sequence[float],
    beta: float,
    beta_context: float = 0.0,
    overhead: float | None = None,
    stack: Provenance | None,
    confidence_intervals: Mapping[str, tuple[float, float]] | None = None,
) -> FittedCostModel:
    fit = FittedCostModel(
        model=timings.model,
        method=method,
        alpha_rule=alpha_rule,  # type: ignore[arg-type]
        prompt_sizes=[int(s) for s in sizes],
        prompt_runtimes_s=[max(0.0, float(a)) for a in alphas],
        beta_s=max(0.0, float(beta)),
        beta_per_context_token_s=max(0.0, float(beta_context)),
        overhead_s=None if overhead is None else float(overhead),
        stack=stack,
        confidence_intervals=dict(confidence_intervals or {}),
    )
    predicted = predict_runtime(fit, timings.num_prompt_tokens, timings.num_output_tokens)
    return fit.model_copy(update={"quality": fit_quality(timings.runtime_s, predicted)})


def alpha_knots(num_prompt_tokens: NDArray[np.float64]) -> NDArray[np.float64]:
    """Prompt sizes at which alpha is fitted: every size of a grid, or quantiles of a log."""
    sizes = np.unique(num_prompt_tokens)
    if sizes.size <= MAX_TABLE_SIZES:
        return sizes
    return np.unique(np.round(np.quantile(num_prompt_tokens, np.linspace(0, 1, QUANTILE_KNOTS))))


def interpolation_basis(
    num_prompt_tokens: NDArray[np.float64], knots: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Matrix B with B @ values == evaluate's "interpolate" rule through (knots, values):
    piecewise linear, flat below the first knot, extrapolated with the last slope."""
    p = np.asarray(num_prompt_tokens, dtype=np.float64)
    basis = np.zeros((p.size, knots.size))
    if knots.size == 1:
        basis[:, 0] = 1.0
        return basis
    segment = np.clip(np.searchsorted(knots, p, side="right") - 1, 0, knots.size - 2)
    weight = (p - knots[segment]) / (knots[segment + 1] - knots[segment])
    weight = np.maximum(weight, 0.0)  # flat below the first knot; > 1 extrapolates past the last
    rows = np.arange(p.size)
    basis[rows, segment] = 1.0 - weight
    basis[rows, segment + 1] += weight
    return basis
