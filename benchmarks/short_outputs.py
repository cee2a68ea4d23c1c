"""The plan's steady-state estimate against the simulator where outputs are short.

With few output tokens a server spends its steps on prompts: the prompt tokens a step can take
(what the budget leaves beside the decoders) bound the throughput, and clients beyond that queue
for them. This benchmark puts the estimate (``planning.search.estimate_point``) beside the
request-by-request simulation the plan verifies with (``planning.search.verify``) for
Llama-3.1-8B fp8 on one H100, 1000-token prompts, a 4096-token budget, each engine stack, a few
output lengths and loads, and prints estimate / simulated for output tokens/s per GPU and the
median TTFT.

Usage: python benchmarks/short_outputs.py [--clients 16,64,256] [--outputs 2,16,128]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.types import Deployment, Slo
from idealized_runtime.cost_model.planning.request import PlanRequest, PlanWorkload
from idealized_runtime.cost_model.planning.search import estimate_point, point_servers, verify
from idealized_runtime.cost_model.serving.engines import default_precision

STACKS = ("vllm", "tensorrt-llm", "sglang")
PROMPT_TOKENS = 1000
TOKEN_BUDGET = 4096


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="16,64,256")
    parser.add_argument("--outputs", default="2,16,128")
    args = parser.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    outputs = [int(o) for o in args.outputs.split(",")]
    arch, gpu = get_architecture("llama-3.1-8b"), get_hardware("h100-sxm")
    deployment = Deployment(architecture=arch, hardware=gpu, tp=1,
                            precision=default_precision(arch, weights="fp8"))  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f}; llama-3.1-8b fp8, 1 H100, {PROMPT_TOKENS}-token"
          f" prompts, budget {TOKEN_BUDGET}; estimate / simulated")  # fmt: skip
    print(f"{'stack':<13} {'output':>6} {'clients':>7} {'tok/s/GPU est':>13} {'sim':>7} "
          f"{'ratio':>6} {'TTFT est':>9} {'sim':>7} {'ratio':>6}")  # fmt: skip
    ratios: list[tuple[float, float]] = []
    started = time.perf_counter()
    for stack in STACKS:
        for output in outputs:
            request = PlanRequest(
                architecture=arch, hardware=[gpu], stacks=[stack], weights=["fp8"],
                workload=PlanWorkload(prompt_tokens=PROMPT_TOKENS, output_tokens=output),
                slo=Slo(), requests_per_client=3,
            )  # fmt: skip
            for count in clients:
                point = estimate_point(request, stack, deployment, count, token_budget=TOKEN_BUDGET)
                check = verify(request, point, point_servers(request, point))
                tput = point.output_tokens_per_s_per_gpu / check.output_tokens_per_s_per_gpu
                ttft = point.ttft_s / check.ttft_p50_s
                ratios.append((tput, ttft))
                print(f"{stack:<13} {output:>6} {count:>7} "
                      f"{point.output_tokens_per_s_per_gpu:>13,.0f} "
                      f"{check.output_tokens_per_s_per_gpu:>7,.0f} {tput:>6.2f} "
                      f"{point.ttft_s:>9.3f} {check.ttft_p50_s:>7.3f} {ttft:>6.2f}")  # fmt: skip
    errors = np.abs(np.array(ratios) - 1.0)
    for column, name in enumerate(("output tokens/s per GPU", "median TTFT")):
        print(
            f"|estimate / simulated - 1|, {name}: median {np.median(errors[:, column]):.1%}, "
            f"p90 {np.percentile(errors[:, column], 90):.1%}, worst "
            f"{errors[:, column].max():.1%} ({len(ratios)} points)"
        )
    print(f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
