"""Fitting methods on the A100 grid, error paths, and invariants (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core import catalog
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Measurement
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.fitting.fit_files import read_fit_file, write_fit_file
from idealized_runtime.cost_model.fitting.methods import fit_measurements


def held_out_errors(grid: list[Measurement], method: str) -> tuple[float, float, float]:
    """(in-grid MAPE, held-out MAPE, mean per-model held-out max error), every other size out."""
    sizes = sorted({m.num_prompt_tokens for m in grid})
    train = set(sizes[0::2])
    full = fit_measurements(grid, method)
    held = fit_measurements([m for m in grid if m.num_prompt_tokens in train], method)
    in_grid, held_mape, held_max = [], [], []
    for model, fit in full.items():
        in_grid.append(fit.quality.mape)
        test = [m for m in grid if m.model == model and m.num_prompt_tokens not in train]
        p = np.array([m.num_prompt_tokens for m in test])
        o = np.array([m.num_output_tokens for m in test])
        y = np.array([m.runtime_s for m in test])
        error = np.abs(predict_runtime(held[model], p, o) - y) / y
        held_mape.append(error.mean())
        held_max.append(error.max())
    return float(np.mean(in_grid)), float(np.mean(held_mape)), float(np.mean(held_max))


def test_helm_method_matches_the_documented_figures(a100_grid) -> None:
    in_grid, held, held_max = held_out_errors(a100_grid, "helm")
    assert in_grid == pytest.approx(0.0045, abs=0.0002)
    assert held == pytest.approx(0.0323, abs=0.0003)
    assert 0.45 < held_max < 0.55


def test_default_method_meets_its_targets(a100_grid) -> None:
    in_grid, held, held_max = held_out_errors(a100_grid, "default")
    assert in_grid <= 0.004
    assert held <= 0.010
    assert held_max <= 0.10


def test_fits_carry_quality_and_stack(a100_grid) -> None:
    fits = fit_measurements(a100_grid, "default", stack=catalog.MEGATRON_A100_STACK)
    fit = fits["megatron-gptj-6b"]
    assert fit.quality.n_points == 270 and fit.quality.r2 > 0.999
    assert fit.alpha_rule == "interpolate" and fit.stack == catalog.MEGATRON_A100_STACK
    # The grid (o <= 64) shows a measurable KV-cache slowdown for a few models only.
    assert sum(f.beta_per_context_token_s > 0 for f in fits.values()) >= 3


def test_helm_method_needs_two_output_lengths_at_a_prompt_size() -> None:
    rows = [
        Measurement(model="m", num_prompt_tokens=p, num_output_tokens=o, runtime_s=o * 0.1)
        for p, o in ((8, 2), (16, 4))
    ]
    with pytest.raises(InputError, match="two output lengths"):
        fit_measurements(rows, "helm")
    # Two lengths at one size are enough: HELM's line reaches o = 1 without a timing there.
    rows.append(rows[0].model_copy(update={"num_output_tokens": 4, "runtime_s": 0.4}))
    fit = fit_measurements(rows, "helm")["m"]
    assert fit.prompt_sizes == [8]
    assert fit.prompt_runtimes_s == pytest.approx([0.1]) and fit.beta_s == pytest.approx(0.1)


def test_fits_need_several_output_lengths() -> None:
    rows = [
        Measurement(model="m", num_prompt_tokens=p, num_output_tokens=1, runtime_s=0.1 + p)
        for p in (1, 2)
    ]
    for method in ("helm", "default", "denoised"):
        with pytest.raises(InputError, match="m"):
            fit_measurements(rows, method)


def test_unknown_method_and_empty_input_are_input_errors(a100_grid) -> None:
    with pytest.raises(InputError, match="unknown method"):
        fit_measurements(a100_grid, "nope")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="no measurements"):
        fit_measurements([], "helm")


# --- invariants ---------------------------------------------------------------------------------

token_counts = st.integers(min_value=1, max_value=100_000)


@st.composite
def monotone_profiles(draw) -> list[Measurement]:
    """Noise-free timings of a model whose runtime grows with p and o."""
    sizes = sorted(draw(st.sets(st.integers(1, 4096), min_size=2, max_size=12)))
    increments = draw(st.lists(st.floats(0, 0.05), min_size=len(sizes), max_size=len(sizes)))
    alpha = np.cumsum(increments) + draw(st.floats(0.001, 0.2))
    beta = draw(st.floats(1e-4, 0.1))
    context = draw(st.floats(0, 1e-6))
    rows = []
    for size, a in zip(sizes, alpha, strict=True):
        for o in (1, 2, 8, 32):
            steps = o - 1
            runtime = a + beta * steps + context * (steps * size + steps * (steps - 1) / 2)
            rows.append(
                Measurement(
                    model="m", num_prompt_tokens=size, num_output_tokens=o, runtime_s=float(runtime)
                )
            )
    return rows


@settings(max_examples=40, deadline=None)
@given(
    rows=monotone_profiles(),
    method=st.sampled_from(["helm", "default"]),
    p=token_counts,
    o=token_counts,
)
def test_runtime_is_finite_positive_and_grows_with_output(rows, method, p, o) -> None:
    fit = fit_measurements(rows, method)["m"]
    at_o, at_more = predict_runtime(fit, [p, p], [o, o + 1])
    assert np.isfinite(at_o) and at_o > 0
    assert at_more >= at_o


@settings(max_examples=40, deadline=None)
@given(rows=monotone_profiles(), p=token_counts, o=st.integers(1, 2000))
def test_default_runtime_grows_with_prompt_on_monotone_data(rows, p, o) -> None:
    fit = fit_measurements(rows, "default")["m"]
    smaller, larger = predict_runtime(fit, [p, p + 1], [o, o])
    assert larger >= smaller - 1e-12


@settings(max_examples=25, deadline=None)
@given(rows=monotone_profiles(), method=st.sampled_from(["helm", "default", "denoised"]))
def test_native_fit_file_round_trip_is_exact(rows, method, tmp_path_factory) -> None:
    fits = fit_measurements(rows, method, bootstrap_samples=5)
    path = tmp_path_factory.mktemp("fits") / "fit.json"
    write_fit_file(fits, path)
    assert read_fit_file(path) == fits


# --- edge cases and more invariants ---------------------------------------------------------------


def test_default_method_needs_two_output_lengths() -> None:
    # One output length: alpha(p) and beta cannot be told apart (the fit used to split the
    # runtime arbitrarily, e.g. alpha = 0 at p = 1 and 512 but not at 256).
    rows = [
        Measurement(model="m", num_prompt_tokens=p, num_output_tokens=8, runtime_s=0.1 + p / 1e3)
        for p in (1, 256, 512)
    ]
    with pytest.raises(InputError, match="at least two output lengths"):
        fit_measurements(rows, "default")


def test_default_method_needs_a_prompt_size_at_two_output_lengths() -> None:
    # Two output lengths, but each at its own prompt size: alpha(p) alone fits every timing
    # (the fit answered beta = 0 with R^2 = 1). One size at two lengths separates them.
    rows = [
        Measurement(model="m", num_prompt_tokens=p, num_output_tokens=o, runtime_s=0.1 + 0.01 * o)
        for p, o in ((100, 10), (300, 20), (1000, 10))
    ]
    with pytest.raises(InputError, match="each prompt size was timed at one output length"):
        fit_measurements(rows, "default")
    rows.append(Measurement(model="m", num_prompt_tokens=100, num_output_tokens=20, runtime_s=0.3))
    fit = fit_measurements(rows, "default")["m"]
    assert fit.beta_s > 0


def test_alpha_is_never_extrapolated_downwards() -> None:
    # Noisy data whose last profiled size came out faster than the one before it.
    rows = [
        Measurement(model="m", num_prompt_tokens=p, num_output_tokens=o, runtime_s=a + 0.01 * o)
        for p, a in ((1, 0.10), (512, 0.30), (1024, 0.25))
        for o in (1, 2, 4)
    ]
    for method in ("default", "denoised"):
        fit = fit_measurements(rows, method, bootstrap_samples=0)["m"]
        far = predict_runtime(fit, [1024, 100_000, 10_000_000], [1, 1, 1])
        assert np.all(far > 0), (method, far)
        assert far[1] == pytest.approx(far[0]) and far[2] == pytest.approx(far[0])


@st.composite
def noisy_profiles(draw) -> list[Measurement]:
    """Timings with positive noise (contention), several sizes and output lengths."""
    sizes = sorted(draw(st.sets(st.integers(1, 4096), min_size=2, max_size=6)))
    outputs = sorted(draw(st.sets(st.integers(1, 256), min_size=2, max_size=5)))
    base = draw(st.floats(0.001, 0.5))
    per_prompt = draw(st.floats(0, 1e-4))
    beta = draw(st.floats(1e-4, 0.05))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = []
    for size in sizes:
        for o in outputs:
            for _ in range(2):
                runtime = (base + per_prompt * size + beta * (o - 1)) * (1 + rng.exponential(0.2))
                rows.append(
                    Measurement(
                        model="m", num_prompt_tokens=size, num_output_tokens=o, runtime_s=runtime
                    )
                )
    if 1 not in outputs:  # helm reads alpha from o = 1
        rows += [m.model_copy(update={"num_output_tokens": 1}) for m in rows[:: len(outputs)]]
    return rows


def _parameters(fit) -> np.ndarray:
    return np.array([*fit.prompt_runtimes_s, fit.beta_s, fit.beta_per_context_token_s])


@settings(max_examples=30, deadline=None)
@given(
    rows=noisy_profiles(),
    method=st.sampled_from(["helm", "default", "denoised"]),
    seed=st.integers(0, 1000),
)
def test_fits_do_not_depend_on_row_order(rows, method, seed) -> None:
    shuffled = list(rows)
    np.random.default_rng(seed).shuffle(shuffled)
    fit = fit_measurements(rows, method, bootstrap_samples=0)["m"]
    again = fit_measurements(shuffled, method, bootstrap_samples=0)["m"]
    p = np.array([1, 100, 1000, 5000])
    o = np.array([1, 10, 100, 500])
    scale = float(np.mean([m.runtime_s for m in rows]))
    # Predictions agree (a quantile LP may have several optimal vertices with the same loss:
    # compare where it matters, relative to the runtimes).
    assert np.allclose(predict_runtime(fit, p, o), predict_runtime(again, p, o), rtol=1e-6,
                       atol=1e-6 * scale)  # fmt: skip
    if method != "denoised":
        assert np.allclose(_parameters(fit), _parameters(again), rtol=1e-6, atol=1e-9 * scale)


@settings(max_examples=30, deadline=None)
@given(
    rows=noisy_profiles(),
    method=st.sampled_from(["helm", "default", "denoised"]),
    k=st.sampled_from([1e-3, 0.37, 3.0, 1e3]),
)
def test_scaling_every_runtime_by_k_scales_the_fit_by_k(rows, method, k) -> None:
    scaled = [m.model_copy(update={"runtime_s": m.runtime_s * k}) for m in rows]
    fit = fit_measurements(rows, method, bootstrap_samples=0)["m"]
    big = fit_measurements(scaled, method, bootstrap_samples=0)["m"]
    p = np.array([1, 100, 1000, 5000])
    o = np.array([1, 10, 100, 500])
    if method == "denoised":
        # A quantile LP can have several optimal vertices of (nearly) equal loss, and the
        # solver's tolerances scale with the data: scaled data may land on another one. The
        # loss and the fit where the data are scale; far extrapolations need not.
        p = np.array([m.num_prompt_tokens for m in rows])
        o = np.array([m.num_output_tokens for m in rows])
        base = predict_runtime(fit, p, o)
        assert np.allclose(
            predict_runtime(big, p, o), k * base, rtol=2e-2, atol=1e-3 * k * base.max()
        )
        assert big.quality.mape == pytest.approx(fit.quality.mape, rel=2e-2, abs=1e-6)
        return
    base = predict_runtime(fit, p, o)
    assert np.allclose(predict_runtime(big, p, o), k * base, rtol=1e-5, atol=1e-9 * k * base.max())
    assert big.quality.mape == pytest.approx(fit.quality.mape, rel=1e-5, abs=1e-9)
    if method != "denoised":
        assert np.allclose(_parameters(big), k * _parameters(fit), rtol=1e-5,
                           atol=1e-9 * k * base.max())  # fmt: skip
