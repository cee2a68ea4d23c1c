"""Accuracy of HELM's fitting method vs ours (default) on the paper's A100 Megatron grid.

Per model: in-grid MAPE and max error (fit on all 270 points, evaluated on them), and held-out
MAPE and max error (every other profiled prompt size held out: fit on sizes[0::2], predict all
(p, o) of sizes[1::2]). Then, for the models of HELM's shipped idealized table, how far the helm
method's alphas and beta, fitted from the grid, are from that table: at full precision and
rounded as HELM's tables are. Run: python benchmarks/cost_model_accuracy.py
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from idealized_runtime.core import catalog
from idealized_runtime.core.types import Measurement
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.fitting.methods import HELM_TABLE_DECIMALS, fit_measurements

METHODS = ("helm", "default")


def errors(fit, rows: list[Measurement]) -> tuple[float, float]:
    p = np.array([r.num_prompt_tokens for r in rows])
    o = np.array([r.num_output_tokens for r in rows])
    y = np.array([r.runtime_s for r in rows])
    relative = np.abs(predict_runtime(fit, p, o) - y) / y
    return float(relative.mean()), float(relative.max())


def helm_table_deviations(grid: list[Measurement]) -> None:
    """Max |alpha - HELM| and |beta - HELM| per profile of HELM's shipped idealized table."""
    table = catalog.helm_table("idealized")
    profile_entries: dict[str, dict] = {}
    for helm_name, profile in catalog.helm_model_shapes().items():
        if helm_name in table:  # aliases share one entry (and one profile)
            profile_entries.setdefault(profile, table[helm_name])
    rounding = {"full precision": None, "HELM's rounding": HELM_TABLE_DECIMALS}
    fits = {label: fit_measurements(grid, "helm", helm_decimals=d) for label, d in rounding.items()}
    out = Table(title="helm method on the grid vs HELM's shipped idealized table (ms)")
    out.add_column("model")
    for label in rounding:
        out.add_column(f"max |alpha diff|\n{label}", justify="right")
        out.add_column(f"|beta diff|\n{label}", justify="right")
    worst = dict.fromkeys(rounding, (0.0, 0.0))
    values = 0
    for profile, entry in sorted(profile_entries.items()):
        cells = []
        for label in rounding:
            fit = fits[label][profile]
            fitted = dict(zip(fit.prompt_sizes, fit.prompt_runtimes_s, strict=True))
            shipped = entry["runtime_for_prompt_tokens"]
            alpha = max(abs(fitted[int(size)] - value) for size, value in shipped.items())
            beta = abs(fit.beta_s - entry["runtime_per_output_token"])
            worst[label] = (max(worst[label][0], alpha), max(worst[label][1], beta))
            cells += [f"{alpha * 1e3:.3f}", f"{beta * 1e3:.3f}"]
        values += len(entry["runtime_for_prompt_tokens"]) + 1
        out.add_row(profile, *cells)
    out.add_row("max", *[f"{w * 1e3:.3f}" for label in rounding for w in worst[label]])
    Console(width=200).print(out)
    print(f"{len(profile_entries)} models, {values} table values (alphas and betas) compared")


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
    helm_table_deviations(grid)


if __name__ == "__main__":
    main()
