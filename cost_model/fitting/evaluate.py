"""Evaluate a fitted cost model at many (p, o) at numpy speed."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idealized_runtime.core.types import FittedCostModel


def predict_alpha(fit: FittedCostModel, num_prompt_tokens: ArrayLike) -> NDArray[np.float64]:
    """alpha(p): prompt processing time including the first output token."""
    p = np.asarray(num_prompt_tokens, dtype=np.float64)
    sizes = np.asarray(fit.prompt_sizes, dtype=np.float64)
    times = np.asarray(fit.prompt_runtimes_s, dtype=np.float64)
    if fit.alpha_rule in ("helm_scale_up", "helm_next_size"):
        # HELM: the smallest profiled size >= p, scaled by p / size (older tables: unscaled);
        # beyond the largest, the largest scaled by p / size under both rules.
        index = np.minimum(np.searchsorted(sizes, p, side="left"), len(sizes) - 1)
        if fit.alpha_rule == "helm_next_size":
            return np.where(p > sizes[-1], times[-1] * p / sizes[-1], times[index])
        return times[index] * p / sizes[index]
    if len(sizes) == 1:
        return np.full_like(p, times[0])
    inside = np.interp(p, sizes, times)
    # Linear extrapolation past the largest profiled size with the slope of the last segment
    # (never downwards: a falling last segment, noise or an alignment effect, would reach
    # negative runtimes); below the smallest size alpha stays at its first value (the fixed
    # cost does not shrink).
    slope = max(0.0, (times[-1] - times[-2]) / (sizes[-1] - sizes[-2]))
    return np.where(p > sizes[-1], times[-1] + slope * (p - sizes[-1]), inside)


def predict_runtime(
    fit: FittedCostModel,
    num_prompt_tokens: ArrayLike,
    num_output_tokens: ArrayLike,
    include_overhead: bool = True,
) -> NDArray[np.float64]:
    """runtime(p, o) in seconds, vectorized over arrays of p and o (broadcast together).

    o = 0 (a prompt-only request, e.g. HELM's language-modeling scenarios) costs alpha(p) alone,
    as in HELM: the prompt pass, no decode steps."""
    p = np.asarray(num_prompt_tokens, dtype=np.float64)
    o = np.asarray(num_output_tokens, dtype=np.float64)
    decode_steps = np.maximum(o - 1.0, 0.0)
    runtime = predict_alpha(fit, p) + fit.beta_s * decode_steps
    if fit.beta_per_context_token_s:
        context_tokens = decode_steps * p + decode_steps * (decode_steps - 1.0) / 2.0
        runtime = runtime + fit.beta_per_context_token_s * context_tokens
    if include_overhead and fit.overhead_s:
        runtime = runtime + fit.overhead_s
    return runtime
