"""Denoised fits of contended API timings: runtime = overhead + alpha(p) + beta * (o - 1).

Contention (queueing, batching with other users, network jitter) only ever *adds* time, so the
runtime of an uncontended request is the lower envelope of the timings, not their mean. We fit
a low quantile (10% by default) by linear programming (quantile regression): unlike a least-
squares fit it ignores how far above the envelope the slow requests are, so heavy tails and
queueing waits cannot drag it up.

Parametrization, following HELM's denoised tables: the first output token costs like a decode
step, alpha(1) = beta, and alpha(p) = beta + g(p) with g piecewise linear through the prompt
sizes present (quantile knots for logs of arbitrary sizes), g(1) = 0; the rest of the fixed
intercept is the overhead. Without timings at p = 1, the first segment extends linearly from
the smallest sizes down to p = 1, which is what separates the overhead from alpha.
With a time to first token, each request contributes a second equation:
ttft = overhead + alpha(p), which pins alpha and the overhead down far better.

Confidence intervals: bootstrap over requests (percentile 2.5-97.5%).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import linprog

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import FittedCostModel, Provenance
from idealized_runtime.cost_model.fitting.basis import alpha_knots, finish_fit, interpolation_basis
from idealized_runtime.cost_model.fitting.timings import ModelTimings

DEFAULT_QUANTILE = 0.1
CONFIDENCE = 0.95


def _solve_dual(
    x: NDArray[np.float64], target: NDArray[np.float64], w: NDArray[np.float64], quantile: float
) -> NDArray[np.float64]:
    result = linprog(
        -target,
        A_eq=x.T,
        b_eq=(1.0 - quantile) * (x.T @ w),
        bounds=np.column_stack([np.zeros_like(w), w]),
        method="highs",
    )
    if result.status != 0:
        raise InputError(f"quantile regression failed: {result.message}")
    return -np.asarray(result.eqlin.marginals)


def quantile_regression(
    design: NDArray[np.float64],
    target: NDArray[np.float64],
    quantile: float,
    weights: NDArray[np.float64] | None = None,
    start: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """Coefficients b minimising the (weighted) pinball loss of target - design @ b.

    Solved through the LP dual (Koenker): max y'a s.t. X'a = (1 - q) X'w, 0 <= a <= w. It has
    only as many equality constraints as coefficients, so HiGHS solves thousands of rows in
    milliseconds (the primal form, as in sklearn's QuantileRegressor, has one per row); the
    coefficients are the duals of the equalities.

    ``start`` (a nearby solution, e.g. the full-data fit during a bootstrap) enables Portnoy &
    Koenker's "globbing": rows far above it are merged into one row carrying their summed
    weight and design, which leaves the optimum unchanged as long as they stay above the new
    fit. That is checked, and the full problem solved if it fails: the result is exact.
    """
    scale = np.abs(design).max(axis=0)
    scale[scale == 0] = 1.0
    x = design / scale
    w = np.ones_like(target) if weights is None else weights
    if start is not None:
        residual = target - design @ start
        above = residual > np.quantile(residual, min(0.9, 3.0 * quantile))
        if above.any() and (~above).sum() > 4 * x.shape[1]:
            glob_weight = w[above].sum()
            glob_x = (x[above] * w[above, None]).sum(axis=0) / glob_weight
            # High enough to stay above any plausible fit (its value only shifts the loss).
            glob_y = target.max() + 10.0 * (np.ptp(target) + 1.0)
            coef = _solve_dual(
                np.vstack([x[~above], glob_x]),
                np.append(target[~above], glob_y),
                np.append(w[~above], glob_weight),
                quantile,
            )
            if (target[above] - x[above] @ coef >= 0).all():
                return coef / scale
    return _solve_dual(x, target, w, quantile) / scale


def _knots(p: NDArray[np.float64]) -> NDArray[np.float64]:
    """Knots of g, starting at 1. Without data at 1, the smallest knot is dropped so that the
    first segment runs from 1 through the data (a segment with no data would make the
    overhead and alpha indistinguishable)."""
    knots = alpha_knots(p)
    if knots[0] > 1:
        knots = np.concatenate([[1.0], knots[1:]])
    return knots


def _design(
    p: NDArray[np.float64], o: NDArray[np.float64], knots: NDArray[np.float64]
) -> NDArray[np.float64]:
    # Columns: overhead, beta (times o: o - 1 decode steps plus alpha(1) = beta), g at knots > 1.
    g = interpolation_basis(p, knots)[:, 1:]
    return np.column_stack([np.ones_like(p), o, g])


def _rows(
    t: ModelTimings, knots: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Design and target of every equation: one per runtime, one per measured ttft."""
    has_ttft = np.isfinite(t.ttft_s)
    p_ttft = t.num_prompt_tokens[has_ttft]
    design = np.vstack(
        [
            _design(t.num_prompt_tokens, t.num_output_tokens, knots),
            _design(p_ttft, np.ones_like(p_ttft), knots),
        ]
    )
    return design, np.concatenate([t.runtime_s, t.ttft_s[has_ttft]])


def _parameters(coef: NDArray[np.float64], knots: NDArray[np.float64]) -> dict[str, float]:
    overhead, beta = float(coef[0]), float(coef[1])
    values = {"overhead_s": overhead, "beta_s": beta}
    alphas = beta + np.concatenate([[0.0], coef[2:]])
    values.update({f"alpha_s[{int(k)}]": float(a) for k, a in zip(knots, alphas, strict=True)})
    return values


def fit_denoised(
    timings: ModelTimings,
    *,
    stack: Provenance | None = None,
    bootstrap_samples: int = 200,
    seed: int = 0,
    quantile: float = DEFAULT_QUANTILE,
) -> FittedCostModel:
    """Denoised fit of one model's timings (see the module docstring)."""
    if not 0 < quantile < 0.5:
        raise InputError(f"quantile must be in (0, 0.5), got {quantile}")
    knots = _knots(timings.num_prompt_tokens)
    design, target = _rows(timings, knots)
    n_params = design.shape[1]
    has_ttft = bool(np.isfinite(timings.ttft_s).any())
    if len(np.unique(timings.num_output_tokens)) < 2 and not has_ttft:
        raise InputError(
            f"model {timings.model!r}: the timings need at least two output lengths (or a time "
            "to first token) to separate beta from the fixed costs",
            column="num_output_tokens",
        )
    if target.size < 2 * n_params:
        raise InputError(
            f"model {timings.model!r}: {len(timings)} timings are too few for {n_params} "
            f"parameters (need at least {2 * n_params} equations)"
        )
    coef = quantile_regression(design, target, quantile)
    intervals = (
        _bootstrap(timings, knots, quantile, bootstrap_samples, seed, coef)
        if bootstrap_samples
        else {}
    )
    params = _parameters(coef, knots)
    alphas = [params[f"alpha_s[{int(k)}]"] for k in knots]
    return finish_fit(
        timings,
        method="denoised",
        alpha_rule="interpolate",
        sizes=knots,
        alphas=alphas,
        beta=params["beta_s"],
        overhead=params["overhead_s"],
        stack=stack,
        confidence_intervals=intervals,
    )


def _bootstrap(
    timings: ModelTimings,
    knots: NDArray[np.float64],
    quantile: float,
    samples: int,
    seed: int,
    estimate: NDArray[np.float64],
) -> dict[str, tuple[float, float]]:
    """Percentile intervals from refits on requests resampled with replacement (a request's
    runtime and ttft stay together). A resample is fitted as the distinct requests weighted by
    how often they were drawn: the same fit as with the repeats, on ~37% fewer rows."""
    rng = np.random.default_rng(seed)
    n = len(timings)
    draws: list[dict[str, float]] = []
    for _ in range(samples):
        counts = rng.multinomial(n, np.full(n, 1.0 / n))
        drawn = np.flatnonzero(counts)
        resampled = timings.subset(drawn)
        design, target = _rows(resampled, knots)
        has_ttft = np.isfinite(resampled.ttft_s)
        weights = np.concatenate([counts[drawn], counts[drawn][has_ttft]]).astype(np.float64)
        try:
            coef = quantile_regression(design, target, quantile, weights, start=estimate)
            draws.append(_parameters(coef, knots))
        except InputError:
            continue  # a degenerate resample (e.g. one output length only): skip it
    if not draws:
        return {}
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    intervals = {}
    for name in draws[0]:
        values = np.array([d[name] for d in draws])
        low, high = np.percentile(values, [tail, 100.0 - tail])
        if name != "overhead_s":
            # The fit reports max(0, estimate) for beta and alpha; percentile intervals follow a
            # monotone map, so the interval of the reported value is the clamped interval.
            low, high = max(0.0, low), max(0.0, high)
        intervals[name] = (float(low), float(high))
    return intervals
