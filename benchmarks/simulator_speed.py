"""How fast the request-by-request serving simulator verifies a plan's best deployments at high
concurrency: the simulation and the summaries ``plan``'s verification makes of its rows.

The cases are ``plan``'s own: gpt-oss-120b on B200 with TensorRT-LLM, 1k-token prompts and
answers, TTFT 1 s, TPOT 20 ms, up to 8 GPUs; its best aggregated deployment that meets the SLO
(``simulate``, closed loop) and its best deployment overall (xPyD, ``simulate_closed_loop``,
which simulates both pools again until the arrivals settle), each at its concurrency with
``--requests-per-client`` requests per client; and ``sglang-xpyd``: the best xPyD deployment
of gpt-oss-120b on B200 with SGLang under the today's-models board's standard (1k/1k from 80%
of the lengths, TTFT 2 s, TPOT 50 ms), thousands of clients under SGLang's admission rule
(which reads the running requests' outputs left at every scheduling point). Printed per case:
requests, passes, seconds to simulate and to summarize (``summarize_level`` of all rows and of
the rows after the start-up burst's rounds, ``burst_rounds``, as ``verify`` judges them),
requests per second, and a hash of the rows (equal hashes: the same results); with
``--per-round``, each round's median TTFT and TPOT (round k: every client's k-th request),
which shows how many rounds the start-up burst takes to drain.

Usage: python benchmarks/simulator_speed.py [--requests-per-client 3]
    [--cases aggregated,xpyd,sglang-xpyd] [--per-round]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import numpy as np

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.types import Slo
from idealized_runtime.cost_model.planning.request import PlanPoint, PlanRequest, PlanWorkload
from idealized_runtime.cost_model.planning.search import (
    burst_rounds,
    plan,
    point_servers,
    simulate_point,
    workload_shapes,
)
from idealized_runtime.timing.summary import summarize_level

CASES = ("aggregated", "xpyd", "sglang-xpyd")


def best_points(request: PlanRequest) -> dict[str, PlanPoint]:
    """The plan's best aggregated point that meets the SLO, and its best xPyD point."""
    result = plan(request)
    meeting = sorted(
        (p for frontier in result.frontiers for p in frontier.points if p.meets_slo),
        key=lambda p: -p.output_tokens_per_s_per_gpu,
    )
    best = {"aggregated": next(p for p in meeting if p.mode == "aggregated")}
    best["xpyd"] = next(p for p in meeting if p.mode != "aggregated")
    return best


def requests(requests_per_client: int) -> dict[str, PlanRequest]:
    """Each case's plan request (without verification: the benchmark simulates the points)."""
    trt = PlanRequest(
        architecture=get_architecture("gpt-oss-120b"),
        hardware=[get_hardware("b200")],
        stacks=["tensorrt-llm"],
        workload=PlanWorkload(prompt_tokens=1024, output_tokens=1024),
        slo=Slo(ttft_s=1.0, tpot_s=0.020),
        max_gpus=8,
        verify=False,
    )
    sglang = trt.model_copy(update={
        "stacks": ["sglang"],
        "workload": PlanWorkload(prompt_tokens=1024, output_tokens=1024, min_length_fraction=0.8),
        "slo": Slo(ttft_s=2.0, tpot_s=0.050),
    })  # fmt: skip
    more = {"requests_per_client": requests_per_client, "max_verify_requests": 100_000}
    return {"tensorrt-llm": trt.model_copy(update=more), "sglang": sglang.model_copy(update=more)}


def run_case(request: PlanRequest, point: PlanPoint) -> dict[str, object]:
    servers = point_servers(request, point)
    shapes = workload_shapes(request, request.requests_per_client * point.concurrency)
    started = time.perf_counter()
    rows, passes = simulate_point(shapes, point.concurrency, servers)
    simulated = time.perf_counter()
    summary = summarize_level("plan", "plan", rows, request.slo)
    skipped = burst_rounds(len(shapes), point.concurrency) * point.concurrency
    steady = [row for row in rows if row["request_index"] >= skipped]
    summarize_level("plan", "plan", steady, request.slo)
    summarized = time.perf_counter()
    text = json.dumps(rows, sort_keys=True) + summary.model_dump_json()
    return {
        "deployment": f"{point.stack} {point.layout}",
        "clients": point.concurrency,
        "requests": len(rows),
        "passes": passes,
        "simulate_s": simulated - started,
        "summarize_s": summarized - simulated,
        "hash": hashlib.sha256(text.encode()).hexdigest()[:12],
        "rounds": per_round(rows, point.concurrency),
    }


def per_round(rows: list[dict], clients: int) -> list[tuple[float, float]]:
    """(median TTFT, median TPOT) of each round: every client's k-th request."""
    rounds: dict[int, list[tuple[float, float]]] = {}
    for row in rows:
        if row["ok"] and row["num_output_tokens"] > 1:
            tpot = (row["runtime_s"] - row["ttft_s"]) / (row["num_output_tokens"] - 1)
            rounds.setdefault(row["request_index"] // clients, []).append((row["ttft_s"], tpot))
    return [tuple(np.median(rounds[k], axis=0).tolist()) for k in sorted(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests-per-client", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--per-round", action="store_true", help="each round's medians")
    args = parser.parse_args()
    names = args.cases.split(",")
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; known: {', '.join(CASES)}")
    plans = requests(args.requests_per_client)
    points: dict[str, PlanPoint] = {}
    if {"aggregated", "xpyd"} & set(names):
        points.update(best_points(plans["tensorrt-llm"]))
    if "sglang-xpyd" in names:
        points["sglang-xpyd"] = best_points(plans["sglang"])["xpyd"]
    print(
        f"{'case':<11} {'clients':>7} {'requests':>8} {'passes':>6} {'simulate s':>10} "
        f"{'summarize s':>11} {'requests/s':>10}  rows hash     deployment"
    )
    for name in names:
        request = plans["sglang" if name.startswith("sglang") else "tensorrt-llm"]
        figures = run_case(request, points[name])
        total = figures["simulate_s"] + figures["summarize_s"]  # type: ignore[operator]
        print(
            f"{name:<11} {figures['clients']:>7} {figures['requests']:>8} {figures['passes']:>6} "
            f"{figures['simulate_s']:>10.2f} {figures['summarize_s']:>11.2f} "
            f"{figures['requests'] / total:>10.0f}  {figures['hash']}  "  # type: ignore[operator]
            f"{figures['deployment']}",
            flush=True,
        )
        if args.per_round:
            for k, (ttft, tpot) in enumerate(figures["rounds"]):  # type: ignore[arg-type]
                print(f"  round {k}: median TTFT {ttft:.3g} s, TPOT {tpot * 1e3:.3g} ms")


if __name__ == "__main__":
    main()
