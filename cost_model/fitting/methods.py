"""Fit runtime(p, o) = alpha(p) + beta(p, o) * (o - 1) [+ overhead] to timings, per model.

Three methods (``FitMethod``):

``helm``
    HELM's procedure (the fit that made HELM's shipped tables; docs/cost_model.md cites it): per
    profiled prompt size, a least-squares line of runtime against o; alpha(p) is that line at
    o = 1, raised to at least alpha of the smallest size. beta is the least-squares slope (with
    an intercept, then dropped) of runtime - alpha(p) against o - 1, pooled over prompt sizes.
    Optionally rounded as HELM's tables are. Off-grid prompts use HELM's scale-up lookup.
``default``
    Fixes HELM's two biases. (1) Prompt processing has a fixed part (weights are read once
    whatever p is): alpha is tabulated and *interpolated*, never scaled down towards zero.
    (2) A decode step reads the whole KV cache, so its time grows with the context: the
    per-token time is beta + beta_per_context_token * context. alpha at every size, beta and
    the context slope are fitted jointly from all (p, o) by non-negative least squares on
    relative errors, which denoises alpha with every output length instead of only o = 1.
    Between profiled sizes, alpha follows the step shape of tiled GEMM kernels (time grows
    in steps of a tile of prompt tokens) when the data show one.
``denoised``
    Robust lower-envelope fit of contended API timings with a fixed overhead: ``denoise.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import get_args

import numpy as np
from numpy.typing import NDArray

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import FitMethod, FittedCostModel, Measurement, Provenance
from idealized_runtime.cost_model.fitting.basis import alpha_knots, finish_fit, interpolation_basis
from idealized_runtime.cost_model.fitting.timings import (
    ModelTimings,
    decode_context_tokens,
    group_by_model,
)

FIT_METHODS: tuple[str, ...] = get_args(FitMethod)
# Candidate GEMM tile heights (prompt tokens per tile) for the step shape of alpha(p).
TILE_CANDIDATES = (32, 64, 128, 256)
# A tile model must explain at least this much more of alpha's shape than a smooth one.
TILE_MIN_IMPROVEMENT = 0.6
MIN_SIZES_FOR_TILES = 6
# HELM's tables hold seconds rounded to 3 decimals (the millisecond).
HELM_TABLE_DECIMALS = 3


def check_method(method: str) -> FitMethod:
    if method not in FIT_METHODS:
        raise InputError(f"unknown method {method!r}; choose one of {', '.join(FIT_METHODS)}")
    return method  # type: ignore[return-value]


def fit_measurements(
    measurements: Sequence[Measurement],
    method: FitMethod = "default",
    *,
    stack: Provenance | None = None,
    bootstrap_samples: int = 200,
    seed: int = 0,
    helm_decimals: int | None = None,
) -> dict[str, FittedCostModel]:
    """One fit per model name, each with its quality on its own data.

    ``bootstrap_samples`` and ``seed`` drive the confidence intervals of denoised fits (0: none).
    ``helm_decimals`` rounds ``helm`` fits (HELM_TABLE_DECIMALS: as HELM's tables; None: not).
    Raises InputError for data a method cannot use (e.g. one output length for ``helm``).
    """
    check_method(method)
    groups = group_by_model(measurements)
    if method == "helm":
        return {
            model: fit_helm(t, stack=stack, decimals=helm_decimals) for model, t in groups.items()
        }
    if method == "default":
        return fit_default_group(groups, stack=stack)
    from idealized_runtime.cost_model.fitting.denoise import fit_denoised

    return {
        model: fit_denoised(t, stack=stack, bootstrap_samples=bootstrap_samples, seed=seed)
        for model, t in groups.items()
    }


# --- HELM -------------------------------------------------------------------------------------


def _rounded(values: NDArray[np.float64], decimals: int | None) -> NDArray[np.float64]:
    # np.round, as HELM's fitting code rounds numpy floats (round() on np.float64).
    return values if decimals is None else np.round(values, decimals)


def _slopes(
    x: NDArray[np.float64], y: NDArray[np.float64], group: NDArray[np.intp], groups: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Least-squares line y = slope * x + intercept per group (NaN slope: x constant there)."""
    count = np.bincount(group, minlength=groups).astype(np.float64)
    mean_x = np.bincount(group, x, groups) / count
    mean_y = np.bincount(group, y, groups) / count
    dx = x - mean_x[group]
    sxx = np.bincount(group, dx * dx, groups)
    sxy = np.bincount(group, dx * (y - mean_y[group]), groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = np.where(sxx > 0, sxy / sxx, np.nan)
    return slope, mean_y - np.nan_to_num(slope) * mean_x


def fit_helm(
    timings: ModelTimings, *, stack: Provenance | None = None, decimals: int | None = None
) -> FittedCostModel:
    """HELM's method (see the module docstring), as its fitting code does it.

    ``decimals``: None keeps full precision; HELM_TABLE_DECIMALS rounds as HELM's code did
    (each line's slope and intercept, then alpha, then beta), which reproduces HELM's shipped
    table from the grid it was fitted to exactly. A prompt size timed at one output length
    above 1 cannot tell alpha from the decode steps and is left out; one timed at o = 1 only
    gets the mean of those timings (the flat line HELM's regression gives).
    """
    p, o, y = timings.num_prompt_tokens, timings.num_output_tokens, timings.runtime_s
    all_sizes, size_index = np.unique(p, return_inverse=True)
    slope, intercept = _slopes(o, y, size_index, all_sizes.size)
    longest = np.zeros(all_sizes.size)
    np.maximum.at(longest, size_index, o)
    # NaN slope: one output length at that size; usable only if that length is 1.
    usable = ~np.isnan(slope) | (longest == 1)
    if not usable.any():
        raise InputError(
            f"model {timings.model!r}: the helm method fits a line of runtime against output "
            "tokens per prompt size and needs, at some prompt size, timings at two output "
            "lengths or at num_output_tokens = 1",
            column="num_output_tokens",
        )
    line_slope = _rounded(np.nan_to_num(slope[usable]), decimals)
    alphas = _rounded(line_slope + _rounded(intercept[usable], decimals), decimals)
    # HELM keeps no profiled size cheaper than the smallest one.
    alphas[1:] = np.maximum(alphas[1:], alphas[0])
    sizes = all_sizes[usable]
    position = np.cumsum(usable) - 1  # index into sizes of each usable size
    on_table = usable[size_index]
    steps = o[on_table] - 1.0
    decode_time = y[on_table] - alphas[position[size_index[on_table]]]
    beta, _ = _slopes(steps, decode_time, np.zeros(steps.size, dtype=np.intp), 1)
    if np.isnan(beta[0]):
        raise InputError(
            f"model {timings.model!r} has timings at one output length only at its profiled "
            "prompt sizes: beta cannot be fitted",
            column="num_output_tokens",
        )
    return finish_fit(
        timings,
        method="helm",
        alpha_rule="helm_scale_up",
        sizes=sizes,
        alphas=alphas,
        beta=float(_rounded(beta, decimals)[0]),
        stack=stack,
    )


# --- default ----------------------------------------------------------------------------------


def _scaled_nnls(
    design: NDArray[np.float64], target: NDArray[np.float64], weights: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Non-negative weighted least squares (``weights`` multiply the residuals), with columns
    scaled to unit size first (context sums are ~10^5 times larger than the one-hot columns)."""
    scale = np.abs(design * weights[:, None]).max(axis=0)
    scale[scale == 0] = 1.0
    from sklearn.linear_model import LinearRegression  # heavy: imported when a fit runs

    regression = LinearRegression(fit_intercept=False, positive=True)
    regression.fit(design / scale, target, sample_weight=weights**2)
    return regression.coef_ / scale


@dataclass(frozen=True)
class JointFit:
    """alpha at knots, beta and the context slope, fitted together."""

    knots: NDArray[np.float64]
    alphas: NDArray[np.float64]
    beta_s: float
    beta_per_context_token_s: float


def fit_joint(timings: ModelTimings, *, context_term: bool = True) -> JointFit:
    """Non-negative least squares of relative errors for alpha(knots), beta, context slope."""
    p, o, y = timings.num_prompt_tokens, timings.num_output_tokens, timings.runtime_s
    if not (o > 1).any():
        raise InputError(
            f"model {timings.model!r} has no timing with more than one output token: "
            "beta cannot be fitted",
            column="num_output_tokens",
        )
    if np.unique(o).size < 2:
        # One output length: any split of the runtime between alpha(p) and beta fits equally.
        raise InputError(
            f"model {timings.model!r}: every timing has {int(o[0])} output tokens; the default "
            "method needs at least two output lengths to separate alpha(p) from beta",
            column="num_output_tokens",
        )
    knots = alpha_knots(p)
    if knots.size == np.unique(p).size and _one_output_length_per_prompt(p, o):
        # alpha gets a value per prompt size, so alpha alone fits every timing: beta could be
        # anything (the least squares answer 0 with a perfect fit).
        raise InputError(
            f"model {timings.model!r}: each prompt size was timed at one output length, so "
            "alpha(p) alone fits every timing and beta is undetermined; the default method "
            "needs some prompt size timed at two output lengths",
            column="num_output_tokens",
        )
    columns = [interpolation_basis(p, knots), (o - 1.0)[:, None]]
    if context_term:
        columns.append(decode_context_tokens(p, o)[:, None])
    # Weights 1 / runtime: minimise relative errors, as short requests matter as much.
    solution = _scaled_nnls(np.hstack(columns), y, 1.0 / y)
    k = knots.size
    return JointFit(
        knots, solution[:k], float(solution[k]), float(solution[k + 1]) if context_term else 0.0
    )


def _one_output_length_per_prompt(p: NDArray[np.float64], o: NDArray[np.float64]) -> bool:
    pairs = np.unique(np.stack([p, o], axis=1), axis=0)
    return bool(np.unique(pairs[:, 0]).size == pairs.shape[0])


def _tile_design(sizes: NDArray[np.float64], tile: int | None) -> NDArray[np.float64]:
    """Smooth alpha shape (constant, linear in p, quadratic attention) plus, with a tile,
    a step per tile of prompt tokens (tiled GEMMs cost the same for a partly filled tile)."""
    columns = [np.ones_like(sizes), sizes, sizes * sizes]
    if tile:
        columns.append(np.ceil(sizes / tile))
    return np.stack(columns, axis=1)


def _shape_fit(
    sizes: NDArray[np.float64], alphas: NDArray[np.float64], tile: int | None
) -> tuple[NDArray[np.float64], float]:
    """Coefficients and relative sum of squares of the alpha shape model."""
    weights = 1.0 / np.maximum(alphas, 1e-12)
    design = _tile_design(sizes, tile)
    coef = _scaled_nnls(design, alphas, weights)
    residual = (design @ coef - alphas) * weights
    return coef, float(np.dot(residual, residual))


def choose_prompt_tile(
    alpha_tables: Sequence[tuple[NDArray[np.float64], NDArray[np.float64]]],
) -> int | None:
    """The tile height (prompt tokens) that best explains the steps of alpha(p), pooled over
    models profiled on one stack; None when a smooth shape is as good.

    Pooled because a sparse grid of one model can alias with several tile heights, while the
    kernels (hence the tile) are the same for every model of one profiling run.
    """
    usable = [(s, a) for s, a in alpha_tables if s.size >= MIN_SIZES_FOR_TILES and a.max() > 0]
    if not usable:
        return None
    smooth = sum(_shape_fit(s, a, None)[1] for s, a in usable)
    scores = {tile: sum(_shape_fit(s, a, tile)[1] for s, a in usable) for tile in TILE_CANDIDATES}
    best = min(scores, key=scores.__getitem__)
    return best if scores[best] < TILE_MIN_IMPROVEMENT * smooth else None


def tabulate_alpha(
    sizes: NDArray[np.float64], alphas: NDArray[np.float64], tile: int | None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Table (sizes, values) for the "interpolate" rule that reproduces alpha at the fitted
    sizes exactly and, between them, follows the tile steps of the shape model.

    Knots are added at both sides of each tile boundary (k*tile, k*tile + 1) inside the
    profiled range, valued by the shape model plus the interpolated residual at the fitted
    sizes, and kept between their two neighbouring fitted values (so a monotone alpha stays
    monotone). The last tile gets no start knot: extrapolation past the largest size then
    continues with the average growth per token, not the flat slope inside a tile.
    """
    if tile is None or sizes.size < 2:
        return sizes, alphas
    coef, _ = _shape_fit(sizes, alphas, tile)
    residual = alphas - _tile_design(sizes, tile) @ coef
    boundaries = np.arange(tile * math.ceil(sizes[0] / tile), sizes[-1], tile, dtype=np.float64)
    extra = np.concatenate([boundaries, boundaries + 1.0])
    last_tile_start = tile * (math.ceil(sizes[-1] / tile) - 1) + 1.0
    extra = extra[(extra > sizes[0]) & (extra < sizes[-1]) & (extra != last_tile_start)]
    extra = np.setdiff1d(extra, sizes)
    if extra.size == 0:
        return sizes, alphas
    values = _tile_design(extra, tile) @ coef + np.interp(extra, sizes, residual)
    # Keep each inserted knot between the fitted values around it, in order.
    right = np.searchsorted(sizes, extra)
    low = np.minimum(alphas[right - 1], alphas[right])
    high = np.maximum(alphas[right - 1], alphas[right])
    values = np.clip(values, low, high)
    for segment in np.unique(right):
        inside = right == segment
        ordered = (
            np.maximum.accumulate
            if alphas[segment] >= alphas[segment - 1]
            else np.minimum.accumulate
        )
        values[inside] = ordered(values[inside])
    table_sizes = np.concatenate([sizes, extra])
    order = np.argsort(table_sizes)
    return table_sizes[order], np.concatenate([alphas, values])[order]


def fit_default_group(
    groups: Mapping[str, ModelTimings],
    *,
    stack: Provenance | None = None,
    prompt_tile: int | str | None = "auto",
) -> dict[str, FittedCostModel]:
    """The default method for models profiled together (one tile height for all of them).

    ``prompt_tile``: "auto" (chosen from the data), an integer, or None (plain interpolation).
    """
    joints = {model: fit_joint(t) for model, t in groups.items()}
    if prompt_tile == "auto":
        tile = choose_prompt_tile([(j.knots, j.alphas) for j in joints.values()])
    else:
        tile = prompt_tile  # type: ignore[assignment]
    fits = {}
    for model, joint in joints.items():
        sizes, alphas = tabulate_alpha(joint.knots, joint.alphas, tile)
        fits[model] = finish_fit(
            groups[model],
            method="default",
            alpha_rule="interpolate",
            sizes=sizes,
            alphas=alphas,
            beta=joint.beta_s,
            beta_context=joint.beta_per_context_token_s,
            stack=stack,
        )
    return fits


def fit_default(
    timings: ModelTimings,
    *,
    stack: Provenance | None = None,
    prompt_tile: int | str | None = "auto",
) -> FittedCostModel:
    """The default method for one model."""
    return fit_default_group({timings.model: timings}, stack=stack, prompt_tile=prompt_tile)[
        timings.model
    ]


def fit_frame(frame: object, method: str = "default") -> dict[str, FittedCostModel]:
    """``fit_measurements`` of a pandas DataFrame of timings (columns as in a timings file:
    model, num_prompt_tokens, num_output_tokens, runtime_s; optional batch_size, ttft_s)."""
    from idealized_runtime.cost_model.fitting.measurements_io import read_measurements

    return fit_measurements(read_measurements(frame), check_method(method))
