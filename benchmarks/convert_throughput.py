"""Conversion throughput: 1,000,000 requests over several models, fits from the A100 grid.

Times the conversion compute only (the table is built in memory, no file reading), ours
(vectorized per model) vs a naive per-row Python loop (timed on a subsample, extrapolated).
Run: python benchmarks/convert_throughput.py
"""

from __future__ import annotations

import time

import numpy as np

from cost_model.convert import convert_requests
from cost_model.fitting import fit_measurements
from cost_model.helm_format import import_helm_table
from cost_model.measurements_io import RequestTable
from idealized_runtime.core import catalog

ROWS = 1_000_000
NAIVE_SAMPLE = 20_000
REPEATS = 3


def naive_runtime(fit, p: int, o: int) -> float:
    """The per-row reference: the same formula, one request at a time in plain Python."""
    sizes, times = fit.prompt_sizes, fit.prompt_runtimes_s
    if fit.alpha_rule == "helm_scale_up":
        index = next((i for i, s in enumerate(sizes) if p <= s), len(sizes) - 1)
        alpha = times[index] * p / sizes[index]
    elif p <= sizes[0]:
        alpha = times[0]
    else:
        i = next((i for i in range(1, len(sizes)) if p <= sizes[i]), len(sizes) - 1)
        alpha = times[i - 1] + (times[i] - times[i - 1]) * (p - sizes[i - 1]) / (
            sizes[i] - sizes[i - 1]
        )
    steps = o - 1
    context = steps * p + steps * (steps - 1) / 2
    runtime = alpha + fit.beta_s * steps + fit.beta_per_context_token_s * context
    return runtime + (fit.overhead_s or 0.0)


def main() -> None:
    fits = fit_measurements(catalog.megatron_a100_measurements(), "default")
    denoised = import_helm_table(catalog.helm_table("denoised"), method="denoised")
    # Give the denoised fits the profile names so that both columns are computed for every row.
    denoised_fits = {
        model: denoised[helm].model_copy(update={"model": model})
        for model, helm in zip(fits, list(denoised) * 2, strict=False)
    }
    rng = np.random.default_rng(0)
    models = np.array(sorted(fits))
    names = models[rng.integers(0, models.size, ROWS)]
    p = rng.integers(1, 4096, ROWS)
    o = rng.integers(1, 512, ROWS)
    runtime = rng.random(ROWS) * 5 + 0.05
    table = RequestTable.from_columns(names, p, o, runtime)

    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = convert_requests(table, [fits, denoised_fits])
        best = min(best, time.perf_counter() - start)

    sample = rng.choice(ROWS, NAIVE_SAMPLE, replace=False)
    start = time.perf_counter()
    naive = [
        (
            naive_runtime(fits[str(names[i])], int(p[i]), int(o[i])),
            naive_runtime(denoised_fits[str(names[i])], int(p[i]), int(o[i])),
        )
        for i in sample
    ]
    naive_s = (time.perf_counter() - start) * ROWS / NAIVE_SAMPLE
    ours = np.column_stack(
        [
            result.columns["idealized_runtime_s"][sample],
            result.columns["denoised_runtime_s"][sample],
        ]
    )
    assert np.allclose(ours, np.array(naive), rtol=1e-9), "vectorized and naive results differ"

    print(
        f"{ROWS:,} requests, {models.size} models, 3 output columns (idealized, denoised, "
        "discrepancy)"
    )
    print(f"{'implementation':<38}{'seconds':>10}{'rows/s':>14}")
    print(f"{'ours (vectorized per model)':<38}{best:>10.3f}{ROWS / best:>14,.0f}")
    label = f"naive per-row loop (x{ROWS // NAIVE_SAMPLE} of {NAIVE_SAMPLE:,})"
    print(f"{label:<38}{naive_s:>10.3f}{ROWS / naive_s:>14,.0f}")
    print(f"speed-up: {naive_s / best:.0f}x   target < 2 s: {'met' if best < 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
