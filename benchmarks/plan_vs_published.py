"""Frontier points of the plan against published ones, held out by source.

Published points: InferenceX's DeepSeek-R1 serving runs, aggregated (single node, in
``data/published/measurements.csv``) and disaggregated (Dynamo xPyD, multi-node, in
``data/published/disaggregated.csv``), each a deployment at a concurrency with its median TPOT
and output tokens/s per GPU (over all its GPUs, both pools). Within each source (one benchmark
run) and (GPU, engine, weights, speculative decoding, lengths, mode), the published frontier is
the points no other point of the same group beats on both tokens/s per user (1 / TPOT) and
throughput per GPU. Two comparisons, each point predicted without anything from its source:

- the same deployment: the published point's own layout, workers and concurrency on the plan's
  steady-state estimator (``serving.steady_state``): predicted / published throughput per GPU
  and tokens/s per user;
- the frontier: the plan's search (``cost_model.planning.plan``: every layout of up to 8 GPUs
  per instance, xPyD pairs up to 64 GPUs, concurrency 1 to 16384) for the group's GPU, engine,
  weights, lengths and mode, its frontier's throughput per GPU at the published point's tokens/s
  per user (linear between frontier points; its top throughput below the frontier's slowest
  point; "beyond" when the published point is faster per user than any planned one). Points
  with multi-token prediction are left out of this one (the plan searches without it here,
  ``mtp=False``).

The workload is the client's: lengths drawn from 80-100% of the stated ones, taken at their
means; multi-token prediction as 3 draft tokens accepted at 0.7 (the sources state neither).
Nothing in the engine stacks, the estimator or the plan is fitted on these measurements (the
engines' request path comes from their code and measurements; their residual request overhead
is fitted across models only, 0 while one model has figures at load), so every source is held
out of its own prediction; the table per source shows it.

Usage: python benchmarks/plan_vs_published.py [--sources]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.published import load_published
from idealized_runtime.core.published_disaggregated import load_disaggregated
from idealized_runtime.core.types import Deployment, Disaggregation, SpeculativeDecoding
from idealized_runtime.cost_model.planning.frontier import pareto_frontier
from idealized_runtime.cost_model.planning.request import PlanRequest, PlanWorkload
from idealized_runtime.cost_model.planning.search import plan
from idealized_runtime.cost_model.serving.disaggregated import Server
from idealized_runtime.cost_model.serving.engines import default_precision, engine_server
from idealized_runtime.cost_model.serving.steady_state import (
    MeanRequest,
    aggregated_steady_state,
    disaggregated_steady_state,
)

MTP = SpeculativeDecoding(draft_tokens=3, acceptance_rate=0.7)
SHORTEST = 0.8  # the client draws lengths from 80-100% of the stated ones
LEVELS = [2**k for k in range(15)]  # 1 .. 16384 clients


@dataclass(frozen=True)
class Layout:
    workers: int
    tp: int
    ep: int
    attention_dp: bool


@dataclass(frozen=True)
class Published:
    """One published serving point and what it measured."""

    source_id: str
    engine: str
    gpu: str
    model: str
    weights: str
    speculative: str
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    decode: Layout
    prefill: Layout | None  # None: aggregated
    tpot_s: float
    tput_per_gpu: float

    @property
    def mode(self) -> str:
        return "aggregated" if self.prefill is None else "disaggregated"

    @property
    def group(self) -> tuple:
        return (self.source_id, self.gpu, self.engine, self.weights, self.speculative,
                self.prompt_tokens, self.output_tokens, self.mode)  # fmt: skip

    @property
    def per_user(self) -> float:
        return 1.0 / self.tpot_s


def published_points() -> list[Published]:
    figures: dict[str, dict[str, float]] = defaultdict(dict)
    first = {}
    for row in load_published():
        if not row.source_id.startswith("inferencex-") or row.concurrency is None:
            continue
        if row.statistic not in (None, "median"):
            continue
        key = row.row_id.rsplit("-", 2)[0]  # the point's id, without the metric's suffix
        figures[key][row.metric] = row.value
        first.setdefault(key, row)
    points = []
    for key, values in figures.items():
        row = first[key]
        tpot = values.get("time_per_output_token_s")
        tput = values.get("output_throughput_tokens_per_s_per_gpu")
        if tpot is None or tput is None:
            continue
        layout = Layout(1, row.tensor_parallel_size, row.expert_parallel_size or 1,
                        bool(row.attention_dp))  # fmt: skip
        points.append(Published(
            row.source_id, row.engine, row.gpu, row.model, row.weights, row.speculative or "",
            row.prompt_tokens or 0, row.output_tokens or 0, row.concurrency or 0, layout, None,
            tpot, tput,
        ))  # fmt: skip
    for p in load_disaggregated():
        # Per worker: its GPUs (some records state tp 1 for a worker of several GPUs).
        prefill = Layout(p.prefill_workers, p.prefill_gpus // p.prefill_workers, p.prefill_ep,
                         p.prefill_attention_dp)  # fmt: skip
        decode = Layout(p.decode_workers, p.decode_gpus // p.decode_workers, p.decode_ep,
                        p.decode_attention_dp)  # fmt: skip
        points.append(Published(
            p.source_id, p.engine, p.gpu, p.model, p.weights, p.speculative, p.prompt_tokens,
            p.output_tokens, p.concurrency, decode, prefill, p.tpot_s_median,
            p.output_tokens_per_s_per_gpu,
        ))  # fmt: skip
    return points


def published_frontier(points: list[Published]) -> list[Published]:
    groups: dict[tuple, list[Published]] = defaultdict(list)
    for point in points:
        groups[point.group].append(point)
    return [
        p
        for members in groups.values()
        for p in pareto_frontier(members, lambda q: q.per_user, lambda q: q.tput_per_gpu)
    ]


def _deployment(point: Published) -> Deployment:
    arch = get_architecture(point.model)
    decode, prefill = point.decode, point.prefill
    split = None
    if prefill is not None:
        split = Disaggregation(
            prefill_workers=prefill.workers, decode_workers=decode.workers,
            prefill_tp=prefill.tp, prefill_ep=prefill.ep,
            prefill_attention_dp=prefill.tp if prefill.attention_dp else 1,
        )  # fmt: skip
    return Deployment(
        architecture=arch,
        hardware=get_hardware(point.gpu),
        tp=decode.tp,
        ep=decode.ep,
        attention_dp=decode.tp if decode.attention_dp else 1,
        precision=default_precision(arch, weights=point.weights),
        speculative=MTP if point.speculative == "mtp" else None,
        disaggregation=split,
    )


def _mean(point: Published) -> MeanRequest:
    middle = (1 + SHORTEST) / 2
    return MeanRequest(point.prompt_tokens * middle, point.output_tokens * middle,
                       longest_new_tokens=point.prompt_tokens)  # fmt: skip


def same_deployment(point: Published) -> tuple[float, float]:
    """Predicted (tokens/s per user, output tokens/s per GPU) of the point's own deployment."""
    deployment, mean = _deployment(point), _mean(point)
    # The engine's defaults, its budget sized for the prompts where it sizes it (TensorRT-LLM).
    sized = {"longest_prompt": point.prompt_tokens, "running": point.concurrency}
    decode = Server(*engine_server(point.engine, deployment.decode_instance(), **sized))
    if deployment.disaggregation is None:
        state = aggregated_steady_state(decode, mean, [point.concurrency])
    else:
        prefill = Server(*engine_server(point.engine, deployment.prefill_instance(), **sized))
        state = disaggregated_steady_state(deployment, prefill, decode, mean, [point.concurrency])
    tokens = float(state.output_tokens_per_s(mean)[0])
    return 1.0 / float(state.tpot_s[0]), tokens / deployment.num_gpus


def planned_frontier(point: Published) -> list[tuple[float, float]]:
    """(tokens/s per user, output tokens/s per GPU) along the plan's frontier for the point's
    GPU, engine, weights, lengths and mode."""
    result = plan(PlanRequest(
        architecture=get_architecture(point.model), hardware=[get_hardware(point.gpu)],
        stacks=[point.engine], weights=[point.weights], modes=[point.mode],  # type: ignore[list-item]
        workload=PlanWorkload(prompt_tokens=point.prompt_tokens,
                              output_tokens=point.output_tokens, min_length_fraction=SHORTEST),
        max_gpus=8 if point.prefill is None else 64, concurrency=LEVELS, verify=False,
        mtp=False,  # the points compared ran without speculative decoding
    ))  # fmt: skip
    return [(p.tokens_per_s_per_user, p.output_tokens_per_s_per_gpu)
            for f in result.frontiers for p in f.points]  # fmt: skip


def at_per_user(frontier: list[tuple[float, float]], per_user: float) -> float | None:
    """The frontier's throughput per GPU at ``per_user`` (None beyond its fastest point)."""
    xs = np.array([x for x, _ in frontier])
    ys = np.array([y for _, y in frontier])
    if per_user > xs[-1]:
        return None
    return float(np.interp(per_user, xs, ys))


def _stats(errors: list[float]) -> str:
    """Median and p90 of |error|, the signed median (bias), and the count."""
    if not errors:
        return f"{'-':>6} {'-':>6} {'-':>7} {0:>4}"
    a = np.abs(errors)
    return (f"{np.median(a):>6.1%} {np.percentile(a, 90):>6.1%} {np.median(errors):>+7.1%} "
            f"{a.size:>4}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", action="store_true", help="print every source's errors")
    args = parser.parse_args()
    points = published_points()
    front = published_frontier(points)
    same: dict[Published, tuple[float, float]] = {}
    along: dict[Published, float | None] = {}
    refused: dict[str, int] = defaultdict(int)
    plans: dict[tuple, list[tuple[float, float]]] = {}
    for point in front:
        try:
            same[point] = same_deployment(point)
        except (InputError, ValueError) as error:
            problems = getattr(error, "errors", None)  # a Deployment's validation: its message
            reason = problems()[0]["msg"] if callable(problems) else str(error)
            refused[reason.removeprefix("Value error, ")[:160]] += 1
        if point.speculative:
            continue
        key = point.group[1:]
        try:
            if key not in plans:
                plans[key] = planned_frontier(point)
            along[point] = at_per_user(plans[key], point.per_user)
        except InputError as error:
            refused[f"plan: {error}"[:160]] += 1
    print(f"{len(points)} published points ({sum(p.prefill is None for p in points)} "
          f"aggregated), {len(front)} on their source's frontiers, "
          f"{len({p.source_id for p in front})} sources")  # fmt: skip
    for reason, count in sorted(refused.items()):
        print(f"  not predicted ({count}): {reason}")
    print("\npredicted / published - 1 of frontier points: median and p90 of |error|, signed "
          "median, n (held out by source)")  # fmt: skip
    print(f"{'mode':<14} {'gpu':<9} {'engine':<13} | {'same: tok/s/GPU':^26} | "
          f"{'same: tok/s/user':^26} | {'frontier: tok/s/GPU':^26} | beyond")  # fmt: skip
    groups: dict[tuple, list[Published]] = defaultdict(list)
    for p in front:
        groups[(p.mode, p.gpu, p.engine)].append(p)
        groups[(p.mode, "all", "")].append(p)
        groups[("all", "", "")].append(p)
    for key in sorted(groups, key=lambda k: (k[0] == "all", k[0], k[1] == "all", k)):
        cells = _cells(groups[key], same, along)
        print(f"{key[0]:<14} {key[1]:<9} {key[2]:<13} | " + " | ".join(cells))
    sources: dict[str, list[Published]] = defaultdict(list)
    for p in front:
        sources[p.source_id].append(p)
    medians = [
        float(np.median([abs(same[p][1] / p.tput_per_gpu - 1) for p in members if p in same]))
        for members in sources.values()
        if any(p in same for p in members)
    ]
    print(
        f"\nper source (same deployment, tok/s/GPU): median of the {len(medians)} sources' "
        f"median errors {np.median(medians):.1%}, worst source {max(medians):.1%}"
    )
    if args.sources:
        for source, members in sorted(sources.items()):
            print(f"{source:<28} | " + " | ".join(_cells(members, same, along)))


def _cells(
    members: list[Published],
    same: dict[Published, tuple[float, float]],
    along: dict[Published, float | None],
) -> list[str]:
    tput = [same[p][1] / p.tput_per_gpu - 1 for p in members if p in same]
    user = [same[p][0] / p.per_user - 1 for p in members if p in same]
    planned = [along[p] / p.tput_per_gpu - 1 for p in members if along.get(p) is not None]
    beyond = sum(1 for p in members if p in along and along[p] is None)
    return [_stats(tput), _stats(user), _stats(planned), f"{beyond:>6}"]


if __name__ == "__main__":
    sys.exit(main())
