"""Denoised fit vs ordinary least squares on simulated contended API timings.

Timings come from a known runtime = overhead + alpha(p) + beta * (o - 1) plus contention:
  heavy-tail  additive delays, 30% of requests uncontended, the rest lognormal or Pareto;
  queueing    an M/M/1 queue in front of the server (load 0.7): waits are 0 with probability
              0.3, else exponential; contended requests also decode up to 2x slower (batching);
  ttft        the heavy-tail case with a time to first token per request as well.
Every timing also has 3 ms of symmetric jitter.
Both fits have the same form (denoised.py's design); OLS minimises squared error, the denoised
fit is a 10% quantile regression. Run: python benchmarks/denoise_accuracy.py
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from idealized_runtime.cost_model.fitting.denoise import _design, _knots, fit_denoised
from idealized_runtime.cost_model.fitting.evaluate import predict_alpha
from idealized_runtime.cost_model.fitting.timings import ModelTimings

SIZES = np.array([1, 256, 512, 1024, 1536])
BETA, OVERHEAD = 0.025, 0.2
ALPHA = BETA + np.array([0.0, 0.05, 0.11, 0.24, 0.38])  # alpha(1) = beta: HELM's convention
N = 3000
JITTER_S = 0.003


def simulate(kind: str, seed: int = 0) -> ModelTimings:
    rng = np.random.default_rng(seed)
    index = rng.integers(0, SIZES.size, N)
    o = rng.integers(1, 257, N).astype(float)
    contended = rng.random(N) >= 0.3
    if kind == "queueing":
        delay = np.where(contended, rng.exponential(1.0 / (1.0 - 0.7), N) * 0.3, 0.0)
        slowdown = np.where(contended, 1.0 + rng.random(N), 1.0)
    else:
        heavy = np.where(rng.random(N) < 0.5, rng.lognormal(-1.0, 1.0, N), rng.pareto(1.2, N))
        delay = np.where(contended, heavy, 0.0)
        slowdown = np.ones(N)
    # Every timing also carries a little symmetric jitter (clock, network): nothing is exact.
    jitter = rng.normal(0.0, JITTER_S, (2, N))
    ttft = OVERHEAD + ALPHA[index] + delay + jitter[0]
    runtime = ttft + BETA * slowdown * (o - 1) + jitter[1]
    return ModelTimings.from_arrays(
        kind, SIZES[index], o, runtime, ttft if kind == "ttft" else None
    )


def ols(t: ModelTimings) -> tuple[float, NDArray[np.float64], float]:
    knots = _knots(t.num_prompt_tokens)
    design = _design(t.num_prompt_tokens, t.num_output_tokens, knots)
    target = t.runtime_s
    if np.isfinite(t.ttft_s).all():
        design = np.vstack([design, _design(t.num_prompt_tokens, np.ones(len(t)), knots)])
        target = np.concatenate([target, t.ttft_s])
    coef = np.linalg.lstsq(design, target, rcond=None)[0]
    beta = coef[1]
    return beta, beta + np.concatenate([[0.0], coef[2:]]), coef[0]


def pct(estimate, truth) -> float:
    return float(np.max(np.abs(np.asarray(estimate) / truth - 1.0)) * 100.0)


def main() -> None:
    print(
        f"{N} simulated requests per scenario; true beta {BETA}, overhead {OVERHEAD}, "
        f"alpha {ALPHA.round(3).tolist()} at p = {SIZES.tolist()}"
    )
    print(
        f"{'scenario':<11}{'fit':<9}{'beta':>8}{'err %':>8}{'alpha max err %':>17}"
        f"{'overhead':>10}{'seconds':>9}"
    )
    for kind in ("heavy-tail", "queueing", "ttft"):
        t = simulate(kind)
        start = time.perf_counter()
        fit = fit_denoised(t, bootstrap_samples=200)
        seconds = time.perf_counter() - start
        alpha = predict_alpha(fit, SIZES)
        low, high = fit.confidence_intervals["beta_s"]
        print(
            f"{kind:<11}{'denoised':<9}{fit.beta_s:>8.4f}{pct(fit.beta_s, BETA):>8.1f}"
            f"{pct(alpha, ALPHA):>17.1f}{fit.overhead_s:>10.3f}{seconds:>9.2f}"
            f"   beta 95% CI [{low:.5f}, {high:.5f}]"
        )
        beta, alpha, overhead = ols(t)
        print(
            f"{'':<11}{'OLS':<9}{beta:>8.4f}{pct(beta, BETA):>8.1f}{pct(alpha, ALPHA):>17.1f}"
            f"{overhead:>10.3f}"
        )
    print("the overhead absorbs the smallest contention delays (only differences are identified)")

    client = Path(__file__).with_name("client_overhead.py")
    if client.exists():  # the timing client's benchmark, when that part is present
        spec = importlib.util.spec_from_file_location("client_overhead", client)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "main"):
            print("\n--- benchmarks/client_overhead.py ---")
            module.main()


if __name__ == "__main__":
    main()
