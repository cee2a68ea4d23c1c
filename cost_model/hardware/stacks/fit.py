"""Fitting a stack's parameters to its targets.

``fit_stack``: least squares on log errors of the stack's 16-bit figures over the physical
parameters of ``roofline.Efficiency`` (``FITTED``: bounds, typical values, scales), lightly pulled
toward typical values (or toward another calibration's, for a stack with few figures);
``fit_format_factors``: per quantized weight format, a few kernel factors on top of the 16-bit
parameters (``FORMAT_FACTORS``), fitted with a robust loss; ``pooled_fit``: the other stacks'
averaged calibration that a thin held-out group leans on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache

import numpy as np

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Efficiency
from idealized_runtime.cost_model.hardware.stacks.targets import Target, fittable, predict_target

# Fitted parameters: (lower, upper, typical value the fit is lightly pulled toward, scale).
# The all-reduce's achieved fraction of the link bandwidth has a floor of 0.4: NCCL's own
# all-reduce benchmark (nccl-tests) reaches 200-230 of an A100's 300 GB/s over NVLink and, per
# its maintainers, 370 of an H100's 450 GB/s, so a fit that asks for less is explaining
# figures that are slow for another reason (e.g. an engine's MoE kernels) by the interconnect.
FITTED: dict[str, tuple[float, float, float, float]] = {
    "compute": (0.05, 1.0, 0.6, 0.1),
    "bandwidth": (0.2, 1.0, 0.75, 0.1),
    "interconnect": (0.4, 1.0, 0.6, 0.1),
    "layer_overhead_s": (0.0, 2e-4, 5e-6, 1e-5),
    "allreduce_latency_s": (0.0, 1e-4, 1e-5, 1e-5),
    "fixed_overhead_s": (0.0, 0.02, 5e-4, 1e-3),
    "compute_memory_serialization": (0.0, 1.0, 0.3, 0.1),
    "gemm_half_tokens": (0.0, 512.0, 16.0, 16.0),
}
# A held-out calibration left with fewer of its stack's own figures than twice the fitted
# parameters pools them with the other stacks' figures.
MIN_OWN_ROWS = 2 * len(FITTED)
# What only figures on several GPUs reveal: the all-reduce's achieved bandwidth and latency.
TP_PARAMETERS = ("interconnect", "allreduce_latency_s")
PRIOR_WEIGHT = 0.05  # pull toward the typical values, per parameter, in units of its scale
# Per weight format, what its kernels reach relative to the stack's 16-bit ones: multipliers of
# the achieved bandwidth (dequantizing int4 costs bandwidth; fp8 GEMMs may beat bf16 ones) and
# of the achieved compute, bounded; fitted on the format's figures, pulled toward 1.
FORMAT_FACTORS: dict[str, tuple[float, float]] = {
    "bandwidth": (0.2, 2.0),
    "compute": (0.2, 2.0),
    "gemm_half_tokens": (0.05, 20.0),
}
FORMAT_PRIOR_WEIGHT = 0.1  # per factor, on log(factor)
# Kernel factors are fitted with a robust loss (soft L1: quadratic up to this log error, then
# linear): a format's figures span engine releases, and a few of them were measured with kernels
# their release called experimental (TensorRT-LLM 0.8's fp8 GQA) or conflict with the same
# workload published elsewhere; three factors describing the format's typical kernels should
# not bend toward those.
FORMAT_LOSS_SCALE = 0.1


def _efficiency(x: np.ndarray) -> Efficiency:
    values = dict(zip(FITTED, (float(v) for v in x), strict=True))
    return Efficiency(**values, host_overlap=1.0, attention_score_passes=0.0)


def fit_stack(
    targets: Sequence[Target],
    *,
    prior: Efficiency | None = None,
    tp_prior: Efficiency | None = None,
) -> Efficiency:
    """Least squares on log errors over ``targets`` (marked rows left out: ``fittable``),
    lightly pulled toward typical values (or toward ``prior``'s, e.g. other stacks' calibration
    when ``targets`` are few). Figures all at TP 1 cannot pin the cost of tensor parallelism:
    with ``tp_prior`` those parameters (``TP_PARAMETERS``) are taken from it instead."""
    from scipy.optimize import least_squares  # only calibration needs scipy, not estimates

    if not targets:
        raise InputError("a stack needs at least one published figure to calibrate on")
    targets = fittable(targets) or list(targets)
    lower = np.array([b[0] for b in FITTED.values()])
    upper = np.array([b[1] for b in FITTED.values()])
    typical = np.array([b[2] for b in FITTED.values()])
    if prior is not None:
        typical = np.clip([getattr(prior, name) for name in FITTED], lower, upper)
    scale = np.array([b[3] for b in FITTED.values()])
    full = typical.copy()
    free = np.ones(len(FITTED), dtype=bool)
    if tp_prior is not None and all(t.tp == 1 for t in targets):
        for i, name in enumerate(FITTED):
            if name in TP_PARAMETERS:
                full[i] = np.clip(getattr(tp_prior, name), lower[i], upper[i])
                free[i] = False

    def parameters(x: np.ndarray) -> np.ndarray:
        values = full.copy()
        values[free] = x
        return values

    def residuals(x: np.ndarray) -> np.ndarray:
        eff = _efficiency(parameters(x))
        fit = [np.log(predict_target(t, eff) / t.value) for t in targets]
        prior = PRIOR_WEIGHT * (x - typical[free]) / scale[free] * 0.1
        return np.concatenate([fit, prior])

    result = least_squares(
        residuals,
        typical[free],
        bounds=(lower[free], upper[free]),
        x_scale=scale[free],
        ftol=1e-6,
        xtol=1e-6,
    )
    return _efficiency(parameters(result.x))


def kernel_format(weights: str) -> str:
    """The kernel family of a weight format: int4 kernels dequantize alike whatever the group
    size, so formats share their factors by kind (``int4-g32`` and ``int4-g64``: ``int4``)."""
    return weights.split("-g")[0]


def format_efficiency(efficiency: Efficiency, factors: Mapping[str, float] | None) -> Efficiency:
    """``efficiency`` with a weight format's kernel factors applied (capped at the peak)."""
    if not factors:
        return efficiency
    scaled = {name: getattr(efficiency, name) * float(factors[name]) for name in factors}
    for fraction in ("compute", "bandwidth"):  # fractions of a peak: at most 1
        if fraction in scaled:
            scaled[fraction] = min(1.0, scaled[fraction])
    return replace(efficiency, **scaled)


def fit_format_factors(targets: Sequence[Target], efficiency: Efficiency) -> dict[str, float]:
    """The kernel factors of one weight format (``FORMAT_FACTORS``) that best predict
    ``targets`` (figures in that format) on top of the stack's 16-bit ``efficiency``."""
    from scipy.optimize import least_squares

    targets = fittable(targets)
    if not targets:
        return {}
    names = list(FORMAT_FACTORS)
    lower = np.log([FORMAT_FACTORS[n][0] for n in names])
    upper = np.log([FORMAT_FACTORS[n][1] for n in names])

    def residuals(x: np.ndarray) -> np.ndarray:
        eff = format_efficiency(efficiency, dict(zip(names, np.exp(x), strict=True)))
        fit = [np.log(predict_target(t, eff) / t.value) for t in targets]
        return np.concatenate([fit, FORMAT_PRIOR_WEIGHT * x])

    result = least_squares(
        residuals,
        np.zeros(len(names)),
        bounds=(lower, upper),
        loss="soft_l1",
        f_scale=FORMAT_LOSS_SCALE,
    )
    return {n: float(v) for n, v in zip(names, np.exp(result.x), strict=True)}


def fit_all_format_factors(
    targets: Sequence[Target], efficiency: Efficiency
) -> dict[str, dict[str, float]]:
    """Kernel factors per quantized weight format among ``targets``."""
    kinds = sorted({kernel_format(t.weights) for t in targets if t.quantized})
    return {
        kind: fit_format_factors(
            [t for t in targets if t.quantized and kernel_format(t.weights) == kind], efficiency
        )
        for kind in kinds
    }


@lru_cache(maxsize=16)
def pooled_fit(targets: tuple[Target, ...]) -> Efficiency:
    """The other stacks' calibration a thin held-out group leans on: each engine family among
    ``targets`` calibrated on its own figures, their parameters averaged, so that every engine
    counts once (one fit over all their rows lets the engine that publishes the most figures
    set the typical all-reduce and overhead costs for the others). Fitted once however many
    held-out groups lean on it."""
    families = sorted({t.family for t in targets})
    fits = [fit_stack([t for t in targets if t.family == family]) for family in families]
    return _efficiency(np.array([np.mean([getattr(f, name) for f in fits]) for name in FITTED]))
