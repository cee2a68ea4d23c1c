"""Accuracy of HELM's fitting method vs ours (default) on the paper's A100 Megatron grid.

Per model: in-grid MAPE and max error (fit on all 270 points, evaluated on them), and held-out
MAPE and max error (every other profiled prompt size held out: fit on sizes[0::2], predict all
(p, o) of sizes[1::2]). Run: python benchmarks/cost_model_accuracy.py
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from idealized_runtime.core import catalog
from idealized_runtime.core.types import Measurement
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.fitting.methods import fit_measurements

METHODS = ("helm", "default")


def errors(fit, rows: list[Measurement]) -> tuple[float, float]:
    p = np.array([r.num_prompt_tokens for r in rows])
    o = np.array([r.num_output_tokens for r in rows])
    y = np.array([r.runtime_s for r in rows])
    relative = np.abs(predict_runtime(fit, p, o) - y) / y
    return float(relative.mean()), float(relative.max())


def main() -> None:
    # The shipped copy of ../shared/reference/helm_efficiency/megatron_a100_runtimes.csv, with
    # mt_nlg scaled from its 35 profiled layers to 105 as in the paper.
    grid = catalog.megatron_a100_measurements()
    sizes = sorted({r.num_prompt_tokens for r in grid})
    train_sizes = set(sizes[0::2])
    train = [r for r in grid if r.num_prompt_tokens in train_sizes]
    results: dict[str, dict[str, tuple[float, float, float, float]]] = {}
    timings = {}
    for method in METHODS:
        start = time.perf_counter()
        full = fit_measurements(grid, method)
        timings[method] = (time.perf_counter() - start) / len(full)
        held = fit_measurements(train, method)
        for model, fit in full.items():
            rows = [r for r in grid if r.model == model]
            test = [r for r in rows if r.num_prompt_tokens not in train_sizes]
            results.setdefault(model, {})[method] = (*errors(fit, rows), *errors(held[model], test))

    table = Table(title="A100 grid: HELM's method vs ours (percent errors; lower is better)")
    table.add_column("model")
    for label in ("in-grid MAPE", "in-grid max", "held-out MAPE", "held-out max"):
        for method in METHODS:
            table.add_column(f"{label}\n{method}", justify="right")
    rows_out = [(model, values) for model, values in results.items()]
    for model, values in rows_out:
        cells = [f"{values[m][i] * 100:.2f}" for i in range(4) for m in METHODS]
        table.add_row(model, *cells)
    means = {m: np.mean([v[m] for _, v in rows_out], axis=0) for m in METHODS}
    table.add_row(
        "mean", *[f"{means[m][i] * 100:.2f}" for i in range(4) for m in METHODS], style="bold"
    )
    Console(width=200).print(table)
    for method in METHODS:
        print(f"fit time per model ({method}, 270 points): {timings[method] * 1e3:.2f} ms")
    ratio = means["helm"][2] / means["default"][2]
    print(
        f"held-out MAPE: helm {means['helm'][2]:.2%}, default {means['default'][2]:.2%} "
        f"({ratio:.1f}x lower)"
    )


if __name__ == "__main__":
    main()
