"""How fast the plan searches, and how close its estimator stays to the simulator.

On one CPU core (the process pins itself to the first CPU it may use):

1. the plan's search over a realistic space: Llama-3.3-70B, 8k-token prompts and 1k-token
   answers, on H100, H200 and B200, every engine stack and the ideal line, every precision,
   layout and xPyD pair of up to 16 GPUs, 12 concurrency levels; and DeepSeek-R1 (a mixture of
   experts: expert parallel and attention data parallel too), 1k/1k on H200 and B200. Printed:
   deployments, (deployment, load) points and points per second, the unit the plan counts;
2. the same points simulated request by request and judged as the plan's verification judges
   them (``verify``: ten requests per client, at most ``--requests`` but at least three per
   client; TTFT after the start-up burst, tokens/s while every client cycles) on a sample,
   seconds per point, and how far the estimate is from the simulation (median and p90 of
   |estimate / simulated - 1| for median TTFT, median TPOT and output tokens/s);
3. with ``--aiconfigurator PYTHON`` (an interpreter with ``aiconfigurator==0.12.0``), NVIDIA
   AIConfigurator's seconds per point on the sample's aggregated points (its Llama-3.1-70B
   config, the same architecture as 3.3), in its own process, after one warm-up point.

Usage: python benchmarks/plan_speed.py [--sample 12] [--requests 400] [--aiconfigurator PYTHON]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.types import Slo
from idealized_runtime.cost_model.planning.request import PlanPoint, PlanRequest, PlanWorkload
from idealized_runtime.cost_model.planning.search import plan, point_servers, verify

AIC_SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm"}
AIC_BACKENDS = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}
AIC_FORMATS = {"fp8": "fp8", "bf16": "bfloat16", "nvfp4": "nvfp4"}
# Runs in AIConfigurator's interpreter: times each point's estimate after a warm-up.
AIC_TIMER = """
import json, sys, time
from aiconfigurator.cli.api import cli_estimate
points = json.load(sys.stdin)
def run(p):
    try:
        cli_estimate(model_path="meta-llama/Meta-Llama-3.1-70B", system_name=p["system"],
            mode="agg", backend_name=p["backend"], backend_version=None, isl=p["isl"],
            osl=p["osl"], batch_size=p["concurrency"], tp_size=p["tp"], pp_size=1,
            attention_dp_size=1, moe_tp_size=None, moe_ep_size=None, gemm_quant_mode=p["gemm"],
            moe_quant_mode=None, kvcache_quant_mode=None, nextn=0)
        return True
    except Exception:
        return False
run(points[0])
times = []
for p in points:
    start = time.perf_counter()
    ok = run(p)
    times.append((time.perf_counter() - start, ok))
json.dump(times, sys.stdout)
"""


def searches() -> list[tuple[str, PlanRequest]]:
    llama = PlanRequest(
        architecture=get_architecture("llama-3.3-70b"),
        hardware=[get_hardware(g) for g in ("h100-sxm", "h200", "b200")],
        workload=PlanWorkload(prompt_tokens=8192, output_tokens=1024, min_length_fraction=0.8),
        slo=Slo(ttft_s=2.0, tpot_s=1 / 30),
        rate=50.0,
        verify=False,
    )
    deepseek = PlanRequest(
        architecture=get_architecture("deepseek-r1"),
        hardware=[get_hardware(g) for g in ("h200", "b200")],
        workload=PlanWorkload(prompt_tokens=1024, output_tokens=1024, min_length_fraction=0.8),
        slo=Slo(ttft_s=2.0, tpot_s=1 / 30),
        verify=False,
    )
    return [("llama-3.3-70b 8k/1k, 3 GPUs", llama), ("deepseek-r1 1k/1k, 2 GPUs", deepseek)]


def simulated(request: PlanRequest, point: PlanPoint, requests: int) -> tuple[float, ...]:
    """(seconds, median TTFT, median TPOT, output tokens/s) of ``point`` simulated and judged
    as the plan's verification judges it (``verify``: ten requests per client, at most
    ``requests`` but at least three per client, TTFT after the start-up burst)."""
    judged = request.model_copy(update={"requests_per_client": 10,
                                        "max_verify_requests": requests})  # fmt: skip
    # The servers the plan evaluated: the point's token budget (or the engine's, sized).
    servers = point_servers(judged, point)
    start = time.perf_counter()
    check = verify(judged, point, servers)
    seconds = time.perf_counter() - start
    tokens = check.output_tokens_per_s_per_gpu * point.gpus
    return seconds, check.ttft_p50_s, check.tpot_p50_s, tokens


def sample_points(points: list[PlanPoint], count: int) -> list[PlanPoint]:
    """Engine points up to 128 clients spread over the list, half aggregated, half not."""
    chosen = []
    for mode in ("aggregated", "disaggregated"):
        eligible = [
            p for p in points if p.stack != "ideal" and p.concurrency <= 128 and p.mode == mode
        ]
        step = max(len(eligible) // (count // 2), 1)
        chosen += eligible[::step][: count // 2]
    return chosen


def aiconfigurator_points() -> list[dict]:
    """Aggregated Llama 70B points, 8k/1k in fp8: every engine, TP 4 and 8, 4 and 32 clients."""
    return [
        {"system": AIC_SYSTEMS[gpu], "backend": AIC_BACKENDS[stack], "isl": 8192, "osl": 1024,
         "concurrency": clients, "tp": tp, "gemm": "fp8"}
        for gpu in ("h100-sxm", "h200") for stack in AIC_BACKENDS for tp in (4, 8)
        for clients in (4, 32)
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=12)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--aiconfigurator", help="python of a venv with aiconfigurator 0.12")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(f"one core; load average {os.getloadavg()[0]:.1f}")
    results = []
    for label, request in searches():
        start = time.perf_counter()
        result = plan(request)
        wall = time.perf_counter() - start
        results.append((request, result))
        print(f"plan {label}: {result.deployments} deployments, {result.evaluated} points in "
              f"{wall:.2f} s: {result.evaluated / wall:.0f} points/s "
              f"({1e3 * wall / result.evaluated:.2f} ms each)")  # fmt: skip
    request, result = results[0]
    every = [p for f in result.frontiers for p in f.points]
    sample = sample_points(every, args.sample)
    rows = []
    for point in sample:
        seconds, ttft, tpot, tokens = simulated(request, point, args.requests)
        estimate = point.output_tokens_per_s_per_gpu * point.gpus
        rows.append((point, seconds, point.ttft_s / ttft - 1, point.tpot_s / tpot - 1,
                     estimate / tokens - 1))  # fmt: skip
        print(f"  {point.hardware:<9} {point.label:<48} simulated in {seconds:6.2f} s; "
              f"estimate/simulated TTFT {point.ttft_s / ttft:.2f} TPOT {point.tpot_s / tpot:.2f}"
              f" tok/s {estimate / tokens:.2f}")  # fmt: skip
    seconds = np.array([r[1] for r in rows])
    print(f"simulator: {np.median(seconds):.2f} s per point (median of {len(rows)}; "
          f"{1 / np.median(seconds):.2f} points/s)")  # fmt: skip
    for name, index in (("TTFT", 2), ("TPOT", 3), ("output tok/s", 4)):
        errors = np.abs([r[index] for r in rows])
        print(f"estimate vs simulated {name}: median {np.median(errors):.1%}, "
              f"p90 {np.percentile(errors, 90):.1%}")  # fmt: skip
    if args.aiconfigurator:
        done = subprocess.run(
            [args.aiconfigurator, "-c", AIC_TIMER], input=json.dumps(aiconfigurator_points()),
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        times = [t for t, ok in json.loads(done.stdout) if ok]
        per_point = float(np.median(times))
        ours = result.seconds / result.evaluated
        print(
            f"AIConfigurator 0.12: {per_point:.2f} s per point (median of {len(times)}); "
            f"the plan's search: {ours * 1e3:.2f} ms per point, {per_point / ours:.0f}x less"
        )


if __name__ == "__main__":
    sys.exit(main())
