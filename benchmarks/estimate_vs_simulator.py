"""The plan's steady-state estimate against its own verification, on random frontier points.

The plan ranks (deployment, load) points with the steady-state estimator
(``serving.steady_state``) and verifies its answer with the request-by-request simulator
(``planning.search.verify``: ``simulate``, or ``simulate_closed_loop`` for xPyD, at the point's
concurrency, five requests per client, at most 1,000). Where the two disagree the simulator is the
reference. This benchmark searches a few cases (dense and MoE, 1k-8k prompts, H100/H200/B200,
every engine stack, aggregated and xPyD), pools the engine stacks' frontier points of up to
``--max-clients`` clients, draws ``--points`` of them at random (seeded), verifies each, and
prints per point and in all the median and p90 of |estimate / simulated - 1| of the median TTFT,
the median TPOT and the output tokens/s per GPU. Each case runs with the lengths fixed (the
plan's default and AIConfigurator's: closed-loop clients stay in step) and drawn from 80-100%
(InferenceX's client). Beside the estimate, the same points on the estimator without its
closed-loop terms (the "baseline" column: without the lockstep waves, the full steps at chunk
boundaries and the nearly even arrivals at a prefill instance, i.e. this project's estimator
before them).

Usage: python benchmarks/estimate_vs_simulator.py [--points 30] [--seed 0] [--max-clients 256]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

import numpy as np

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.types import Slo
from idealized_runtime.cost_model.planning.request import (
    PlanPoint,
    PlanRequest,
    PlanWorkload,
    Verification,
)
from idealized_runtime.cost_model.planning.search import (
    estimate_point,
    mean_request,
    plan,
    point_servers,
    verify,
)


def cases() -> list[tuple[str, PlanRequest]]:
    def request(model: str, gpu: str, prompt: int, output: int, **options: object) -> PlanRequest:
        settings: dict[str, object] = {
            "architecture": get_architecture(model),
            "hardware": [get_hardware(gpu)],
            "workload": PlanWorkload(prompt_tokens=prompt, output_tokens=output),
            "slo": Slo(ttft_s=2.0, tpot_s=0.05),
            "max_gpus": 8,
            "stacks": ["vllm", "sglang", "tensorrt-llm"],
            "verify": False,
        }
        return PlanRequest(**{**settings, **options})  # type: ignore[arg-type]

    spread = PlanWorkload(prompt_tokens=1, output_tokens=2, min_length_fraction=0.8)
    fixed = [
        ("llama-3.3-70b fp8 8k/1k h200", request("llama-3.3-70b", "h200", 8192, 1024,
                                                 weights=["fp8"])),
        ("qwen3-32b 4000/500 h100", request("qwen3-32b", "h100-sxm", 4000, 500,
                                            weights=["fp8"])),
        ("deepseek-v3 fp8 1k/1k h200", request("deepseek-v3", "h200", 1024, 1024)),
        ("gpt-oss-120b 1k/8k b200", request("gpt-oss-120b", "b200", 1024, 8192)),
    ]  # fmt: skip
    drawn = [
        (f"{label}, 80-100%", r.model_copy(update={"workload": r.workload.model_copy(
            update={"min_length_fraction": spread.min_length_fraction})}))
        for label, r in fixed
    ]  # fmt: skip
    return [(f"{label}, fixed", r) for label, r in fixed] + drawn


def baseline(request: PlanRequest, point: PlanPoint) -> PlanPoint:
    """The point on the estimator without its closed-loop terms (see the module docstring)."""
    mean = replace(mean_request(request), same_lengths=False, length_cv2=None)
    deployment = point_servers(request, point)[0]
    return estimate_point(request, point.stack, deployment, point.concurrency, mean=mean,
                          memory_fraction=point.memory_fraction,
                          token_budget=point.token_budget)  # fmt: skip


def _ratios(point: PlanPoint, check: Verification) -> tuple[float, float, float]:
    """Estimate / simulated: median TTFT, median TPOT, output tokens/s per GPU."""
    return (point.ttft_s / check.ttft_p50_s, point.tpot_s / check.tpot_p50_s,
            point.output_tokens_per_s_per_gpu / check.output_tokens_per_s_per_gpu)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-clients", type=int, default=256)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    pool: list[tuple[PlanRequest, PlanPoint]] = []
    for label, request in cases():
        result = plan(request)
        points = [
            p for f in result.frontiers for p in f.points if p.concurrency <= args.max_clients
        ]
        print(f"{label}: {result.deployments} deployments, {len(points)} frontier points")
        pool += [(request, p) for p in points]
    rng = np.random.default_rng(args.seed)
    chosen = [pool[i] for i in sorted(rng.choice(len(pool), args.points, replace=False))]
    errors, before = [], []
    for request, point in chosen:
        start = time.perf_counter()
        check = verify(request, point, point_servers(request, point))
        seconds = time.perf_counter() - start
        ratios, old = _ratios(point, check), _ratios(baseline(request, point), check)
        errors.append([abs(r - 1) for r in ratios])
        before.append([abs(r - 1) for r in old])
        print(f"  {request.architecture.name:<14} {point.hardware:<8} {point.label:<46} "
              f"TTFT {point.ttft_s:7.3f}/{check.ttft_p50_s:7.3f} s  "
              f"est/sim TTFT {ratios[0]:5.2f} TPOT {ratios[1]:5.2f} tok/s {ratios[2]:5.2f} "
              f"(baseline TTFT {old[0]:5.2f}; {seconds:.1f} s)")  # fmt: skip
    print(f"{len(errors)} points, |estimate / simulated - 1| (median, p90):")
    print(f"  {'':<22} {'estimate':>16} {'baseline':>16}")
    now, then = np.array(errors), np.array(before)
    for column, name in enumerate(("TTFT (median)", "TPOT (median)", "output tok/s per GPU")):
        cells = [
            f"{np.median(t[:, column]):6.1%} {np.percentile(t[:, column], 90):7.1%}"
            for t in (now, then)
        ]
        print(f"  {name:<22} {cells[0]:>16} {cells[1]:>16}")


if __name__ == "__main__":
    sys.exit(main())
