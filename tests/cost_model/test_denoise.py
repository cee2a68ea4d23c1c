"""Denoised fits recover known parameters from contended timings."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import QuantileRegressor

from idealized_runtime.cost_model.fitting.denoise import fit_denoised, quantile_regression
from idealized_runtime.cost_model.fitting.evaluate import predict_alpha
from idealized_runtime.cost_model.fitting.timings import ModelTimings

SIZES = np.array([1, 256, 512, 1024, 1536])
TRUE_ALPHA = np.array([0.02, 0.07, 0.13, 0.26, 0.40])  # alpha(1) = beta, HELM's convention
BETA, OVERHEAD = 0.02, 0.15


def simulate(n: int, seed: int, with_ttft: bool) -> ModelTimings:
    rng = np.random.default_rng(seed)
    index = rng.integers(0, SIZES.size, n)
    o = rng.integers(1, 129, n).astype(float)
    base_ttft = OVERHEAD + TRUE_ALPHA[index]
    # Contention: 40% of requests run alone, the rest wait a heavy-tailed extra time.
    delay = np.where(rng.random(n) < 0.4, 0.0, rng.pareto(1.5, n) * 0.2)
    ttft = base_ttft + delay
    runtime = ttft + BETA * (o - 1) * np.where(rng.random(n) < 0.5, 1.0, 1 + rng.random(n))
    return ModelTimings.from_arrays("m", SIZES[index], o, runtime, ttft if with_ttft else None)


@pytest.mark.parametrize("with_ttft", [False, True])
def test_denoised_fit_recovers_known_parameters(with_ttft: bool) -> None:
    fit = fit_denoised(simulate(600, seed=3, with_ttft=with_ttft), bootstrap_samples=30)
    assert fit.method == "denoised"
    assert fit.prompt_sizes == SIZES.tolist()
    assert fit.prompt_runtimes_s[0] == pytest.approx(fit.beta_s)  # HELM's convention
    assert fit.beta_s == pytest.approx(BETA, rel=0.05)
    assert fit.overhead_s == pytest.approx(OVERHEAD, rel=0.05)
    np.testing.assert_allclose(predict_alpha(fit, SIZES), TRUE_ALPHA, rtol=0.05)
    low, high = fit.confidence_intervals["beta_s"]
    assert low <= fit.beta_s <= high
    assert set(fit.confidence_intervals) >= {"overhead_s", "alpha_s[256]", "alpha_s[1536]"}


def test_least_squares_would_be_far_off() -> None:
    t = simulate(600, seed=3, with_ttft=False)
    design = np.column_stack([np.ones(len(t)), t.num_output_tokens - 1])
    ols = np.linalg.lstsq(design, t.runtime_s, rcond=None)[0]
    mean_fixed_cost = OVERHEAD + TRUE_ALPHA.mean()
    # The mean is dragged up by the delays: the fixed cost is off by far more than 5%.
    assert abs(ols[0] - mean_fixed_cost) / mean_fixed_cost > 0.3


def test_dual_quantile_regression_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(300), rng.random(300), rng.random(300)])
    y = x @ np.array([1.0, 2.0, -1.0]) + rng.standard_t(2, 300)
    ours = quantile_regression(x, y, 0.2)
    reference = QuantileRegressor(quantile=0.2, alpha=0, fit_intercept=False).fit(x, y)
    np.testing.assert_allclose(ours, reference.coef_, atol=1e-6)


def test_without_single_token_prompts_the_first_segment_is_extrapolated() -> None:
    t = simulate(400, seed=1, with_ttft=False)
    keep = t.num_prompt_tokens > 1
    fit = fit_denoised(t.subset(keep), bootstrap_samples=0)
    assert fit.prompt_sizes[0] == 1 and 256 not in fit.prompt_sizes
    assert fit.beta_s == pytest.approx(BETA, rel=0.05)
    assert fit.confidence_intervals == {}


def test_globbing_from_a_start_gives_the_exact_optimum() -> None:
    rng = np.random.default_rng(5)
    x = np.column_stack([np.ones(2000), rng.random(2000), rng.random(2000)])
    y = x @ np.array([1.0, 2.0, 3.0]) + rng.pareto(1.5, 2000)
    full = quantile_regression(x, y, 0.1)
    weights = rng.multinomial(2000, np.full(2000, 1 / 2000)).astype(float)
    drawn = weights > 0
    direct = quantile_regression(x[drawn], y[drawn], 0.1, weights[drawn])
    globbed = quantile_regression(x[drawn], y[drawn], 0.1, weights[drawn], start=full)
    np.testing.assert_allclose(globbed, direct, atol=1e-8)


def test_intervals_are_of_the_reported_non_negative_values() -> None:
    # Heavy contention: alpha at some sizes comes out at 0 (clamped); its interval must be of
    # the clamped value too, so that it contains the estimate and never goes below 0.
    rng = np.random.default_rng(3)
    p = rng.choice([1, 256, 512, 1024], 60).astype(float)
    o = rng.choice([1, 4, 16, 64], 60).astype(float)
    y = 0.05 + 0.001 * (o - 1) + 1e-6 * p + rng.exponential(0.05, 60)
    fit = fit_denoised(ModelTimings.from_arrays("m", p, o, y), bootstrap_samples=100, seed=1)
    values = {"beta_s": fit.beta_s}
    sizes, alphas = fit.prompt_sizes, fit.prompt_runtimes_s
    values.update({f"alpha_s[{s}]": a for s, a in zip(sizes, alphas, strict=True)})
    assert min(fit.prompt_runtimes_s) == 0.0  # the case this is about
    for name, value in values.items():
        low, high = fit.confidence_intervals[name]
        assert 0.0 <= low <= value <= high, (name, low, value, high)
