"""Serving at load: the simulator on the engine stacks against published serving measurements.

Every row of ``data/published/measurements.csv`` measured at a concurrency (closed-loop
clients) is simulated as a user would: ``simulate`` with the row's engine stack (``vllm``,
``sglang``, ``tensorrt-llm``), GPU, tensor-parallel, expert-parallel and attention
data-parallel sizes, weight format (the KV cache in the engine's default for the checkpoint:
fp8 for NVFP4 checkpoints, else the 16-bit compute dtype), and the benchmark client's workload
(ten requests per client, prompt and output lengths drawn from 80-100% of the stated ones).
Speculative decoding (``mtp``) runs 3 draft tokens accepted at 0.7 each (the sources state
neither). Nothing here is fitted on serving measurements: the engine stacks come from kernel
measurements and the engines' defaults, so every figure is held out, whatever its source.

Printed per engine, GPU and model family: median and 90th percentile of |predicted / published
- 1| for median TTFT, median TPOT and output throughput per GPU, at concurrency >= 8 and at
all concurrencies; beside them, with ``--aiconfigurator PYTHON`` (an interpreter with
``aiconfigurator==0.12.0``, e.g. a venv under a git-ignored folder), the same figures from
NVIDIA's AIConfigurator on the points it covers, and both on the points both cover.
Rows the model cannot express are counted with the one-line reason.

Usage: python benchmarks/serving_vs_published.py [--aiconfigurator PYTHON] [--min-concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.published import PublishedRow, load_published
from idealized_runtime.core.types import Deployment, SpeculativeDecoding, parse_precision
from idealized_runtime.cost_model.serving.engines import engine_server
from idealized_runtime.cost_model.serving.simulator import simulate
from idealized_runtime.cost_model.serving.workload import RequestShape

METRICS = {
    "ttft_s": "ttft",
    "time_per_output_token_s": "tpot",
    "output_throughput_tokens_per_s_per_gpu": "tput/gpu",
}
MTP = SpeculativeDecoding(draft_tokens=3, acceptance_rate=0.7)
REQUESTS_PER_CLIENT = 10
LENGTH_RANGE = 0.8  # the client draws lengths from 80-100% of the stated ones
AIC_SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm"}
AIC_BACKENDS = {"sglang": "sglang", "tensorrt-llm": "trtllm", "vllm": "vllm"}
AIC_MODELS = {"deepseek-r1": "deepseek-ai/DeepSeek-R1"}
AIC_FORMATS = {"fp8-block": "fp8_block", "nvfp4": "nvfp4", "fp8": "fp8", "bf16": "bfloat16"}


@dataclass(frozen=True)
class Point:
    """One measured serving configuration (its figures are separate rows)."""

    engine: str
    gpu: str
    model: str
    weights: str
    tp: int
    ep: int
    attention_dp: bool
    speculative: str
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    source_id: str


def points_of(rows: list[PublishedRow]) -> dict[Point, dict[str, float]]:
    found: dict[Point, dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row.concurrency is None or row.metric not in METRICS:
            continue
        if row.statistic not in (None, "median"):
            continue
        point = Point(
            row.engine, row.gpu, row.model, row.weights, row.tensor_parallel_size,
            row.expert_parallel_size or 1, bool(row.attention_dp), row.speculative or "",
            row.prompt_tokens or 0, row.output_tokens or 0, row.concurrency, row.source_id,
        )  # fmt: skip
        found[point][row.metric] = row.value
    return found


def deployment_of(point: Point) -> Deployment:
    kv = "fp8" if point.weights == "nvfp4" else None  # the engines' default for the checkpoint
    return Deployment(
        architecture=get_architecture(point.model),
        hardware=get_hardware(point.gpu),
        tp=point.tp,
        ep=point.ep,
        attention_dp=point.tp if point.attention_dp else 1,
        precision=parse_precision(point.weights, kv),
        speculative=MTP if point.speculative == "mtp" else None,
    )


def predict(point: Point) -> dict[str, float]:
    """Simulated median TTFT, median TPOT and output tokens/s per GPU of ``point``."""
    step_time, config = engine_server(point.engine, deployment_of(point))
    rng = np.random.default_rng(0)
    count = REQUESTS_PER_CLIENT * point.concurrency

    def lengths(stated: int) -> np.ndarray:
        return rng.integers(int(stated * LENGTH_RANGE), stated + 1, size=count)

    shapes = [
        RequestShape(int(p), int(o))
        for p, o in zip(lengths(point.prompt_tokens), lengths(point.output_tokens), strict=True)
    ]
    rows = simulate(shapes, step_time, config, concurrency=point.concurrency)
    ok = [r for r in rows if r["ok"]]
    if len(ok) < len(rows):
        raise InputError(f"{len(rows) - len(ok)} requests never fit the KV cache")
    ttft = np.median([r["ttft_s"] for r in ok])
    tpot = np.median([
        (r["runtime_s"] - r["ttft_s"]) / max(r["num_output_tokens"] - 1, 1) for r in ok
    ])  # fmt: skip
    span = max(r["finished_at_s"] for r in ok) - min(r["started_at_s"] for r in ok)
    output = sum(r["num_output_tokens"] for r in ok) / span / point.tp
    return {"ttft_s": float(ttft), "time_per_output_token_s": float(tpot),
            "output_throughput_tokens_per_s_per_gpu": float(output)}  # fmt: skip


def aiconfigurator(points: list[Point], python: str) -> list[dict]:
    """AIConfigurator's predictions of ``points``, run in its own interpreter."""
    requests = []
    for p in points:
        fmt = AIC_FORMATS.get(p.weights)
        requests.append({
            "model_path": AIC_MODELS.get(p.model, p.model), "system": AIC_SYSTEMS.get(p.gpu, p.gpu),
            "backend": AIC_BACKENDS[p.engine], "isl": p.prompt_tokens, "osl": p.output_tokens,
            "concurrency": p.concurrency, "tp": p.tp, "ep": p.ep,
            "attention_dp": p.tp if p.attention_dp else 1, "gemm": fmt,
            "moe": fmt if get_architecture(p.model).num_experts > 1 else None, "kv": None,
            "nextn": MTP.draft_tokens if p.speculative == "mtp" else 0,
        })  # fmt: skip
    helper = Path(__file__).with_name("aiconfigurator_points.py")
    done = subprocess.run(
        [python, str(helper)], input=json.dumps(requests), capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def _stats(errors: list[float]) -> str:
    if not errors:
        return f"{'-':>6} {'-':>6} {0:>4}"
    a = np.abs(errors)
    return f"{np.median(a):>6.1%} {np.percentile(a, 90):>6.1%} {a.size:>4}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", help="python of a venv with aiconfigurator 0.12")
    parser.add_argument("--min-concurrency", type=int, default=8)
    args = parser.parse_args()
    measured = points_of(load_published())
    points = sorted(
        measured, key=lambda p: (p.engine, p.gpu, p.weights, p.concurrency, p.source_id)
    )
    ours: dict[Point, dict[str, float]] = {}
    refused: dict[str, int] = defaultdict(int)
    for point in points:
        try:
            ours[point] = predict(point)
        except InputError as error:
            refused[str(error)] += 1
    theirs: dict[Point, dict[str, float]] = {}
    if args.aiconfigurator:
        for point, result in zip(points, aiconfigurator(points, args.aiconfigurator), strict=True):
            if "error" in result:
                refused[f"AIConfigurator: {result['error']}"] += 1
                continue
            theirs[point] = {
                "ttft_s": result["ttft_s"], "time_per_output_token_s": result["tpot_s"],
                "output_throughput_tokens_per_s_per_gpu": result["output_tokens_per_s_per_gpu"],
            }  # fmt: skip
    print(f"{len(points)} measured serving points, {len(ours)} simulated, "
          f"{len(theirs)} predicted by AIConfigurator" if args.aiconfigurator else
          f"{len(points)} measured serving points, {len(ours)} simulated")  # fmt: skip
    for reason, count in sorted(refused.items()):
        print(f"  not predicted ({count}): {reason}")
    for low, label in ((args.min_concurrency, f"concurrency >= {args.min_concurrency}"),
                       (1, "all concurrencies")):  # fmt: skip
        print()
        print(f"|predicted / published - 1|, {label}: median, p90, n (held out: nothing is "
              "fitted on serving measurements)")  # fmt: skip
        head = " | ".join(f"{name:^18}" for name in METRICS.values())
        print(f"{'engine':<13} {'gpu':<8} {'model':<12} {'who':<6} | {head}")
        groups: dict[tuple, list[Point]] = defaultdict(list)
        for p in points:
            if p.concurrency >= low:
                groups[(p.engine, p.gpu, p.model)].append(p)
                groups[("all", "", "")].append(p)
        for key, members in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
            for who, predictions in (("ours", ours), ("aic", theirs), ("ours*", ours),
                                     ("aic*", theirs)):  # fmt: skip
                if (who.startswith("aic") or who.endswith("*")) and not args.aiconfigurator:
                    continue
                both = [p for p in members if p in ours and p in theirs]
                chosen = both if who.endswith("*") else [p for p in members if p in predictions]
                cells = []
                for metric in METRICS:
                    errors = [
                        predictions[p][metric] / measured[p][metric] - 1.0
                        for p in chosen if metric in measured[p]
                    ]  # fmt: skip
                    cells.append(_stats(errors))
                print(f"{key[0]:<13} {key[1]:<8} {key[2]:<12} {who:<6} | " + " | ".join(cells))
    if args.aiconfigurator:
        print("* on the points both predict")
    print()
    print("Targets (concurrency >= 8): TPOT median <= 10% (p90 <= 25%), TTFT median <= 20% "
          "(p90 <= 50%), throughput per GPU median <= 10%.")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
