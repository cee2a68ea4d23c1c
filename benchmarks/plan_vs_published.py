"""Frontier points of the plan against published ones, every model with published figures at
load, held out by source and by model.

Published points at load (closed-loop clients, a median or mean TPOT and output tokens/s):

- InferenceX's DeepSeek-R1 serving runs, aggregated (single node, ``data/published/
  measurements.csv``) and disaggregated (Dynamo xPyD, multi-node, ``data/published/
  disaggregated.csv``); its client draws each length from 80-100% of the stated one;
- SGLang's cookbook: Qwen3-235B-A22B (bf16) and DeepSeek-R1 (fp8) on 8 B200 at tensor
  parallel 8, 1-100 clients; ``sglang.bench_serving``'s random dataset draws each length from 1
  to the stated one;
- NVIDIA NIM's Llama-3.3-70B table (fp8, 2 H100, 5000/500 tokens, 1-250 clients; fixed
  lengths): its TPOT is a mean (the page names no statistic; its client averages), and the page
  does not say which engine the NIM profile ran, so its points are predicted on each engine
  stack it could be (``NIM_STACKS``), each a row of its own.

Each point is a deployment at a concurrency with its TPOT and output tokens/s per GPU (over all
its GPUs, both pools). The published frontier of a model is drawn from its points, as
InferenceX's dashboard draws it: within (model, GPU, engine, weights, speculative decoding,
lengths and the client's draw, mode), over every source, the points no other point beats on both
tokens/s per user (1 / TPOT) and throughput per GPU (``--per-source``: within each source
only). Two comparisons per frontier point:

- the same deployment: the point's own layout, workers and concurrency on the plan's
  steady-state estimator (``serving.steady_state``), with the engine's defaults and the KV-cache
  format the source ran (``Published.kv_cache``: InferenceX's fp8 cache where its scripts set
  one, else the engine's default for the weights) and its MoE runner where not the stack's
  default (``Published.moe_runner``: the cookbook's SGLang 0.5.6, Triton for bf16 experts on
  Blackwell; the plan asked for it too): predicted /
  published throughput per GPU and tokens/s per user; beside it, the same layout's estimated
  curve (every concurrency level) read at the published tokens/s per user, what the plan's
  frontier would be had it searched that layout alone;
- the frontier: the plan's search (``cost_model.planning.plan``: every layout each engine runs,
  refined at the knee; multi-token prediction where the points compared ran it) for the group,
  asked what its sources' sweep asked (``sweeps``: their most GPUs, per instance aggregated and
  in all disaggregated, and their fewest to most clients: NIM's table 2 H100 and 1-250
  clients, InferenceX's aggregated runs one 8-GPU node from 1 or 4 clients; and attention data
  parallelism only where one of the workload's points ran it, as multi-token prediction, and
  the KV-cache format its sources ran, not every format the plan tries by default: a plan
  over more GPUs, lighter loads or splits no source ran reaches points no published one
  checks), its frontier's
  throughput per GPU at the published point's tokens/s per user (``at_per_user``: linear
  between frontier points; its top throughput below the frontier's slowest point; "beyond"
  when the published point is faster per user than any planned one);
- the plan's frontier's tokens/s per user at the published throughput per GPU
  (``at_throughput``, the other axis: well conditioned where the frontier is near vertical);
- both again at the published point's load per GPU (``at_load``: its tokens/s per GPU over its
  tokens/s per user, the users decoding per GPU), where the curve crosses the ray from the
  origin through the point: there both axes scale alike, so the ratio is the curve's distance
  from the point whatever its slope. Read at a tokens/s per user, an error in it is multiplied
  by the curve's slope on log axes (``slope``), 2-4 at 1-16 clients, where throughput grows
  with the clients while tokens/s per user barely falls: a TPOT 25% off reads as 4-5x there.
  The plan's frontier over the published layout's curve, both at that load, is what the search
  finds beyond the sources' layouts and loads (no published point checks it).

Held out by source AND by model: nothing in the engine stacks, the estimator or the plan is
fitted on serving measurements but the engines' residual request overhead (what the request
path and kernels leave of published TTFTs, fitted on SGLang's DeepSeek-R1 and Qwen3-235B-A22B
points, which are compared here); every prediction here runs on stacks with that residual at 0
(``held_out_stacks``), so no constant fitted on any source or model compared enters it.
Multi-token prediction: the same deployment runs the draft tokens the source ran (InferenceX's
scripts: SGLang 2, TensorRT-LLM 1 with attention DP and 3 without; 3 where a source states
none), accepted at the rate DeepSeek published, as the plan's search takes it.

``--points`` prints every compared point: the published layout and load, the plan's frontier
layouts around its tokens/s per user, and the three ratios (what drives the frontier's error).

Usage: python benchmarks/plan_vs_published.py [--per-source] [--sources] [--points]
       [--only TEXT]...
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_vs_published import (
    inferencex_activations,
    inferencex_draft_tokens,
    inferencex_kv_cache,
    published_moe_runner,
)

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.published import PublishedRow, load_published
from idealized_runtime.core.published_disaggregated import load_disaggregated
from idealized_runtime.core.types import Deployment, Disaggregation, SpeculativeDecoding
from idealized_runtime.cost_model.hardware.engines.catalog import EngineStack, shipped_engines
from idealized_runtime.cost_model.planning.frontier import pareto_frontier
from idealized_runtime.cost_model.planning.request import PlanPoint, PlanRequest, PlanWorkload
from idealized_runtime.cost_model.planning.search import plan
from idealized_runtime.cost_model.serving.disaggregated import Server
from idealized_runtime.cost_model.serving.engines import (
    default_precision,
    engine_server,
    published_acceptance,
)
from idealized_runtime.cost_model.serving.steady_state import (
    MeanRequest,
    aggregated_steady_state,
    disaggregated_steady_state,
)

LEVELS = [2**k for k in range(15)]  # 1 .. 16384 clients
MAX_PLAN_GPUS = 64  # the plan's largest replica (``PlanSettings.max_gpus``)
# The engine stacks a source's engine is predicted on: NIM's page does not name its backend.
NIM_STACKS = ("tensorrt-llm", "vllm")
# The client's shortest draw, as a share of the stated length, per source family (the
# cookbook's draws from 1 token: ``shortest_share`` makes that one token).
SHORTEST = {"inferencex": 0.8, "sglang-cookbook": 0.0, "nim": 1.0}
TPOT = "time_per_output_token_s"
THROUGHPUT_PER_GPU = "output_throughput_tokens_per_s_per_gpu"
THROUGHPUT = "output_throughput_tokens_per_s"


@dataclass(frozen=True)
class Layout:
    workers: int
    tp: int
    ep: int
    attention_dp: bool

    @property
    def label(self) -> str:
        text = f"tp{self.tp}" + (f" ep{self.ep}" if self.ep > 1 else "")
        return text + (" dpa" if self.attention_dp else "")


@dataclass(frozen=True)
class Published:
    """One published serving point and what it measured; ``stack``: the engine stack that
    predicts it (the engine itself, or one NIM may have run)."""

    source_id: str
    engine: str
    stack: str
    gpu: str
    model: str
    weights: str
    speculative: str
    prompt_tokens: int
    output_tokens: int
    shortest: float  # the client's shortest draw / the stated length
    concurrency: int
    decode: Layout
    prefill: Layout | None  # None: aggregated
    tpot_s: float
    tput_per_gpu: float
    statistic: str = "median"  # of the TPOT

    @property
    def mode(self) -> str:
        return "aggregated" if self.prefill is None else "disaggregated"

    @property
    def family(self) -> str:
        """The source family: InferenceX's runs together, the cookbook's pages together."""
        return next((f for f in SHORTEST if self.source_id.startswith(f)), self.source_id)

    @property
    def kv_cache(self) -> str | None:
        """The KV-cache format the source ran (None: the engine's default for the weights):
        InferenceX's scripts' (``inferencex_kv_cache``; its disaggregated records do not state
        it: taken as its single-node scripts'), else not stated."""
        return inferencex_kv_cache(self.engine, self.gpu) if self.family == "inferencex" else None

    @property
    def activations(self) -> str | None:
        """The matmuls' input format the source set where it is a knob (None: the engine's
        default): InferenceX's vLLM gpt-oss runs on Blackwell, MXFP8 into the MXFP4 experts."""
        if self.family != "inferencex":
            return None
        return inferencex_activations(self.engine, self.gpu, self.weights)

    @property
    def moe_runner(self) -> str:
        """The MoE runner the source's engine ran where not the stack's default ("": the
        default): the cookbook's SGLang 0.5.6 on bf16 experts on Blackwell, Triton
        (``published_moe_runner``)."""
        return published_moe_runner(self.source_id, self.weights, self.gpu)

    @property
    def drafts(self) -> SpeculativeDecoding | None:
        """The point's multi-token prediction: the draft tokens its source ran (InferenceX's
        scripts, ``inferencex_draft_tokens``, its disaggregated records taken as its single-node
        scripts by the decode pool's attention DP; 3 where a source states none), accepted at
        the rate DeepSeek published (``published_acceptance``, as the plan takes it)."""
        if self.speculative != "mtp":
            return None
        drafts = 3
        if self.family == "inferencex":
            drafts = inferencex_draft_tokens(self.engine, self.decode.attention_dp)
        rate = published_acceptance(self.model, drafts)
        if rate is None:
            raise InputError(f"no published multi-token prediction acceptance for {self.model}")
        return SpeculativeDecoding(draft_tokens=drafts, acceptance_rate=rate)

    @property
    def engine_label(self) -> str:
        return self.engine if self.stack == self.engine else f"{self.engine} as {self.stack}"

    @property
    def workload(self) -> tuple:
        """What the plan is asked for: the model, GPU, engine stack, weights, speculative
        decoding, lengths and their draw, and the mode."""
        return (self.model, self.gpu, self.stack, self.weights, self.kv_cache, self.activations,
                self.moe_runner, self.speculative, self.prompt_tokens, self.output_tokens,
                self.shortest, self.mode)  # fmt: skip

    @property
    def layout(self) -> str:
        if self.prefill is None:
            return self.decode.label
        return (f"{self.prefill.workers}P({self.prefill.label}){self.decode.workers}D "
                f"{self.decode.label}")  # fmt: skip

    @property
    def per_user(self) -> float:
        return 1.0 / self.tpot_s


def shortest_share(shortest: float, longest: int) -> float:
    """The plan's ``min_length_fraction`` for a client whose shortest draw is ``shortest`` of
    the stated length (0: one token of the ``longest`` stated length, about one of each)."""
    return shortest if shortest > 0 else 1.0 / longest


def _family_of(source_id: str) -> str | None:
    return next((f for f in SHORTEST if source_id.startswith(f)), None)


def at_load_points(rows: list[PublishedRow]) -> list[Published]:
    """The points of ``measurements.csv`` measured at a concurrency with a TPOT (median, else
    mean) and output throughput (per GPU, or of the system over its GPUs), from the sources
    whose client's draw is known (``SHORTEST``)."""
    figures: dict[str, dict[str, float]] = defaultdict(dict)
    first: dict[str, PublishedRow] = {}
    for row in rows:
        if row.concurrency is None or _family_of(row.source_id) is None:
            continue
        if row.metric == TPOT and row.statistic in ("median", "mean"):
            figures[_point_id(row)][f"{TPOT}:{row.statistic}"] = row.value
        elif row.metric == THROUGHPUT_PER_GPU and row.statistic is None:
            figures[_point_id(row)][THROUGHPUT_PER_GPU] = row.value
        elif row.metric == THROUGHPUT and row.statistic is None:
            figures[_point_id(row)][THROUGHPUT_PER_GPU] = row.value / row.gpu_count
        else:
            continue
        first.setdefault(_point_id(row), row)
    points = []
    for key, values in figures.items():
        row = first[key]
        statistic = "median" if f"{TPOT}:median" in values else "mean"
        tpot = values.get(f"{TPOT}:{statistic}")
        tput = values.get(THROUGHPUT_PER_GPU)
        if tpot is None or tput is None:
            continue
        layout = Layout(1, row.tensor_parallel_size, row.expert_parallel_size or 1,
                        bool(row.attention_dp))  # fmt: skip
        for stack in NIM_STACKS if row.engine == "nim" else (row.engine,):
            points.append(Published(
                row.source_id, row.engine, stack, row.gpu, row.model, row.weights,
                row.speculative or "", row.prompt_tokens or 0, row.output_tokens or 0,
                SHORTEST[_family_of(row.source_id) or ""], row.concurrency or 0, layout, None,
                tpot, tput, statistic,
            ))  # fmt: skip
    return points


def _point_id(row: PublishedRow) -> str:
    """A figure's point: its source, deployment, lengths and load (not its metric)."""
    return "|".join(str(v) for v in (
        row.source_id, row.engine, row.gpu, row.model, row.weights, row.gpu_count,
        row.tensor_parallel_size, row.expert_parallel_size, row.attention_dp, row.speculative,
        row.prompt_tokens, row.output_tokens, row.concurrency,
    ))  # fmt: skip


def published_points() -> list[Published]:
    points = at_load_points(load_published())
    for p in load_disaggregated():
        # Per worker: its GPUs (some records state tp 1 for a worker of several GPUs).
        prefill = Layout(p.prefill_workers, p.prefill_gpus // p.prefill_workers, p.prefill_ep,
                         p.prefill_attention_dp)  # fmt: skip
        decode = Layout(p.decode_workers, p.decode_gpus // p.decode_workers, p.decode_ep,
                        p.decode_attention_dp)  # fmt: skip
        points.append(Published(
            p.source_id, p.engine, p.engine, p.gpu, p.model, p.weights, p.speculative,
            p.prompt_tokens, p.output_tokens, SHORTEST["inferencex"], p.concurrency, decode,
            prefill, p.tpot_s_median, p.output_tokens_per_s_per_gpu,
        ))  # fmt: skip
    return points


def published_frontier(points: list[Published], per_source: bool = False) -> list[Published]:
    """The published frontier of each workload (``Published.workload``), drawn from the
    points of every source (``per_source``: of each source alone)."""
    groups: dict[tuple, list[Published]] = defaultdict(list)
    for point in points:
        groups[(point.source_id if per_source else "", *point.workload)].append(point)
    return [
        p
        for members in groups.values()
        for p in pareto_frontier(members, lambda q: q.per_user, lambda q: q.tput_per_gpu)
    ]


# The fields of an engine stack fitted on published serving figures (``held_out_stacks``).
FITTED_ON_SERVING = {"request_overhead_s": 0.0, "request_overhead_s_per_layer": 0.0}


def held_out_stack(stack: EngineStack) -> EngineStack:
    """``stack`` without what is fitted on published serving figures (its residual request
    overhead), everything else as shipped."""
    return replace(stack, scheduler=replace(stack.scheduler, **FITTED_ON_SERVING))


@contextmanager
def held_out_stacks() -> Iterator[None]:
    """Every shipped engine stack as ``held_out_stack`` makes it, while inside."""
    engines = shipped_engines()
    shipped = dict(engines)
    engines.update({name: held_out_stack(stack) for name, stack in shipped.items()})
    try:
        yield
    finally:
        engines.update(shipped)


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
        precision=default_precision(
            arch, weights=point.weights, kv_cache=point.kv_cache, activations=point.activations
        ),
        speculative=point.drafts,
        disaggregation=split,
    )


def _mean(point: Published) -> MeanRequest:
    """The mean request of the client's draw (as ``search.mean_request`` takes it)."""

    def mean(stated: int) -> float:
        return (max(1.0, stated * point.shortest) + stated) / 2

    return MeanRequest(mean(point.prompt_tokens), mean(point.output_tokens),
                       longest_new_tokens=point.prompt_tokens)  # fmt: skip


def layout_curve(point: Published, levels: list[int]) -> list[tuple[float, float]]:
    """(tokens/s per user, output tokens/s per GPU) of the point's own deployment at each of
    ``levels`` clients (and its own), by tokens/s per user ascending: the estimator's frontier
    of that one layout."""
    deployment, mean = _deployment(point), _mean(point)
    clients = sorted({*levels, point.concurrency})
    # The engine's defaults, its budget sized for the prompts where it sizes it (TensorRT-LLM),
    # the source's MoE runner where not the default.
    runner = {"moe_runner": point.moe_runner} if point.moe_runner else None
    sized = {"longest_prompt": point.prompt_tokens, "running": point.concurrency,
             "settings": runner}  # fmt: skip
    decode = Server(*engine_server(point.stack, deployment.decode_instance(), **sized))
    if deployment.disaggregation is None:
        state = aggregated_steady_state(decode, mean, clients)
    else:
        prefill = Server(*engine_server(point.stack, deployment.prefill_instance(), **sized))
        state = disaggregated_steady_state(deployment, prefill, decode, mean, clients)
    tokens = state.output_tokens_per_s(mean) / deployment.num_gpus
    found = [
        (1.0 / float(tpot), float(tput), int(c))
        for tpot, tput, c in zip(state.tpot_s, tokens, state.concurrency, strict=True)
        if np.isfinite(tpot) and tpot > 0 and np.isfinite(tput) and tput > 0
    ]
    same = [(x, y) for x, y, c in found if c == point.concurrency]
    if not same:
        raise InputError("no finite estimate of the point's own deployment")
    curve = pareto_frontier([(x, y) for x, y, _ in found], lambda q: q[0], lambda q: q[1])
    return [same[0], *curve]  # the point's own first, then its layout's frontier


def gpus_of(point: Published) -> int:
    """The GPUs the point ran on: one instance aggregated, the whole fleet disaggregated."""
    prefill = point.prefill
    used = point.decode.tp * (1 if prefill is None else point.decode.workers)
    return used + (0 if prefill is None else prefill.workers * prefill.tp)


@dataclass(frozen=True)
class Sweep:
    """What a workload's sources searched: the most GPUs any published point ran on (per
    instance aggregated, in all disaggregated), the fewest and most clients, and whether any
    point ran attention data parallelism."""

    max_gpus: int
    fewest_clients: int
    most_clients: int
    attention_dp: bool = True  # whether any of its points ran attention data parallelism

    @property
    def levels(self) -> list[int]:
        """The plan's client levels within the sweep's: its ends and the powers of two
        between (the plan refines between them)."""
        inner = [c for c in LEVELS if self.fewest_clients < c < self.most_clients]
        return sorted({self.fewest_clients, *inner, self.most_clients})


def sweeps(points: list[Published]) -> dict[tuple, Sweep]:
    """Per workload, what its sources searched (``Sweep``): the question their published
    frontier answers (NIM's table: 2 H100, 1-250 clients; InferenceX's runs: one 8-GPU node,
    1 or 4 clients and more aggregated)."""
    members: dict[tuple, list[Published]] = defaultdict(list)
    for p in points:
        members[p.workload].append(p)
    return {
        workload: Sweep(
            max_gpus=max(map(gpus_of, group)),
            fewest_clients=min(p.concurrency for p in group),
            most_clients=max(p.concurrency for p in group),
            attention_dp=any(
                p.decode.attention_dp or (p.prefill is not None and p.prefill.attention_dp)
                for p in group
            ),
        )
        for workload, group in members.items()
    }


def planned_frontier(point: Published, sweep: Sweep) -> list[PlanPoint]:
    """The plan's frontier for the point's workload (``Published.workload``) within what its
    sources searched (``sweep``: their GPUs and clients; every layout), by tokens/s per user
    ascending."""
    result = plan(PlanRequest(
        architecture=get_architecture(point.model), hardware=[get_hardware(point.gpu)],
        stacks=[point.stack], weights=[point.weights], modes=[point.mode],  # type: ignore[list-item]
        # The source's cache and activations, not every one the plan tries by default.
        kv_cache=[_deployment(point).precision.kv_cache], activations=point.activations,
        moe_runner=point.moe_runner or None,
        workload=PlanWorkload(
            prompt_tokens=point.prompt_tokens, output_tokens=point.output_tokens,
            min_length_fraction=shortest_share(
                point.shortest, max(point.prompt_tokens, point.output_tokens)
            ),
        ),
        max_gpus=min(sweep.max_gpus, MAX_PLAN_GPUS), concurrency=sweep.levels,
        max_concurrency=sweep.most_clients, attention_dp=sweep.attention_dp, verify=False,
        mtp=point.speculative == "mtp",  # like with like: drafts only where the points ran them
    ))  # fmt: skip
    return [p for f in result.frontiers for p in f.points]


def at_per_user(frontier: list[tuple[float, float]], per_user: float) -> float | None:
    """The frontier's throughput per GPU at ``per_user`` tokens/s per user: linear between its
    points (by tokens/s per user ascending, throughput descending), its top throughput below
    its slowest point, None beyond its fastest."""
    if not frontier:
        return None
    xs = np.array([x for x, _ in frontier])
    ys = np.array([y for _, y in frontier])
    if per_user > xs[-1]:
        return None
    return float(np.interp(per_user, xs, ys))


def at_throughput(frontier: list[tuple[float, float]], per_gpu: float) -> float | None:
    """The frontier's tokens/s per user at ``per_gpu`` tokens/s per GPU (the other axis of
    ``at_per_user``): linear between its points, its fastest below its lowest throughput, None
    above its highest."""
    if not frontier:
        return None
    xs = np.array([x for x, _ in frontier])
    ys = np.array([y for _, y in frontier])
    if per_gpu > ys[0]:
        return None
    return float(np.interp(per_gpu, ys[::-1], xs[::-1]))


def at_load(frontier: list[tuple[float, float]], per_user: float, per_gpu: float) -> float | None:
    """The frontier's throughput per GPU at the published point's load per GPU (``per_gpu /
    per_user``: the users decoding per GPU): where the frontier crosses the ray from the origin
    through the published point, linear between its points on log axes. Along that ray both
    tokens/s per user and per GPU scale alike, so the ratio to ``per_gpu`` is the frontier's
    distance from the point on either axis, well conditioned where the frontier is near
    vertical (a few clients: throughput grows with them while tokens/s per user barely falls)
    or near flat (the throughput's plateau). Beyond the frontier's ends, as ``at_per_user``
    reads them: a heavier load than its heaviest point, its top throughput (more clients only
    queue); a lighter load than its lightest point (one client per instance or rank), ``per_gpu``
    scaled by its fastest tokens/s per user over ``per_user`` (no lighter load runs faster).
    None for an empty frontier."""
    if not frontier:
        return None
    xs = np.log([x for x, _ in frontier])
    ys = np.log([y for _, y in frontier])
    load = float(np.log(per_gpu / per_user))
    loads = ys - xs  # descending along the frontier (tokens/s per user ascending)
    if load >= loads[0]:
        return float(np.exp(ys[0]))
    if load <= loads[-1]:
        return per_gpu * float(np.exp(xs[-1])) / per_user
    i = int(np.clip(np.searchsorted(-loads, -load, side="right") - 1, 0, xs.size - 2))
    share = (loads[i] - load) / (loads[i] - loads[i + 1])
    return float(np.exp(ys[i] + share * (ys[i + 1] - ys[i])))


def slope(frontier: list[tuple[float, float]], per_user: float) -> float | None:
    """d ln(tokens/s per GPU) / d ln(tokens/s per user) of the frontier at ``per_user`` (the
    factor by which reading at a tokens/s per user multiplies an error in it); None off its
    ends or on a one-point frontier."""
    xs = np.log([x for x, _ in frontier])
    ys = np.log([y for _, y in frontier])
    x = np.log(per_user)
    if xs.size < 2 or x < xs[0] or x > xs[-1]:
        return None
    i = int(np.clip(np.searchsorted(xs, x, side="right") - 1, 0, xs.size - 2))
    return float((ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]))


def neighbours(frontier: list[PlanPoint], per_user: float) -> str:
    """The plan's frontier points on each side of ``per_user`` (layout and clients)."""
    below = [p for p in frontier if p.tokens_per_s_per_user <= per_user]
    above = [p for p in frontier if p.tokens_per_s_per_user > per_user]
    said = [f"{p.layout} c{p.concurrency}" for p in (below[-1:] + above[:1])]
    return " | ".join(said) or "-"


def _stats(errors: list[float]) -> str:
    """Median and p90 of |error|, the signed median (bias), and the count."""
    if not errors:
        return f"{'-':>6} {'-':>6} {'-':>7} {0:>4}"
    a = np.abs(errors)
    return (f"{np.median(a):>6.1%} {np.percentile(a, 90):>6.1%} {np.median(errors):>+7.1%} "
            f"{a.size:>4}")  # fmt: skip


@dataclass
class Predictions:
    """Per published point: the same deployment's (tokens/s per user, per GPU), its layout's
    estimated throughput per GPU at the published tokens/s per user, and the plan's frontier's
    (None: beyond the frontier's fastest point); both again at the published load per GPU
    (``at_load``); the plan frontier's slope there."""

    same: dict[Published, tuple[float, float]]
    layout: dict[Published, float | None]
    along: dict[Published, float | None]
    plans: dict[tuple, list[PlanPoint]]
    layout_load: dict[Published, float | None] = field(default_factory=dict)
    along_load: dict[Published, float | None] = field(default_factory=dict)
    slopes: dict[Published, float | None] = field(default_factory=dict)
    along_tput: dict[Published, float | None] = field(default_factory=dict)

    def errors(self, members: list[Published], which: str) -> list[float]:
        found = []
        for p in members:
            if which == "same tok/s/GPU" and p in self.same:
                found.append(self.same[p][1] / p.tput_per_gpu - 1)
            elif which == "same tok/s/user" and p in self.same:
                found.append(self.same[p][0] / p.per_user - 1)
            elif which == "layout" and self.layout.get(p) is not None:
                found.append(self.layout[p] / p.tput_per_gpu - 1)  # type: ignore[operator]
            elif which == "frontier" and self.along.get(p) is not None:
                found.append(self.along[p] / p.tput_per_gpu - 1)  # type: ignore[operator]
            elif which == "frontier per user" and self.along_tput.get(p) is not None:
                found.append(self.along_tput[p] / p.per_user - 1)  # type: ignore[operator]
            elif which == "layout at load" and self.layout_load.get(p) is not None:
                found.append(self.layout_load[p] / p.tput_per_gpu - 1)  # type: ignore[operator]
            elif which == "frontier at load" and self.along_load.get(p) is not None:
                found.append(self.along_load[p] / p.tput_per_gpu - 1)  # type: ignore[operator]
        return found

    def search_gains(self, members: list[Published]) -> list[float]:
        """The plan's frontier over the published layout's curve at each point's load."""
        return [
            along / layout
            for p in members
            if (along := self.along_load.get(p)) is not None
            and (layout := self.layout_load.get(p)) is not None
        ]

    def cells(self, members: list[Published]) -> list[str]:
        beyond = sum(1 for p in members if p in self.along and self.along[p] is None)
        columns = ("same tok/s/GPU", "same tok/s/user", "layout", "frontier", "frontier per user",
                   "layout at load", "frontier at load")  # fmt: skip
        return (
            [_stats(self.errors(members, c)) for c in columns[:4]]
            + [f"{beyond:>6}"]
            + [_stats(self.errors(members, c)) for c in columns[4:]]
        )


def predict(
    front: list[Published], searched: dict[tuple, Sweep], refused: dict[str, int]
) -> Predictions:
    """Every frontier point's predictions (``Predictions``), on the held-out stacks, the plan
    searching what its workload's sources searched (``sweeps``); what cannot be predicted
    counted in ``refused`` by its one-line reason."""
    found = Predictions({}, {}, {}, {})
    with held_out_stacks():
        for point in front:
            try:
                own, *curve = layout_curve(point, LEVELS)
                found.same[point] = own
                found.layout[point] = at_per_user(curve, point.per_user)
                found.layout_load[point] = at_load(curve, point.per_user, point.tput_per_gpu)
            except (InputError, ValueError) as error:
                problems = getattr(error, "errors", None)  # a Deployment's validation
                reason = problems()[0]["msg"] if callable(problems) else str(error)
                refused[reason.removeprefix("Value error, ")[:160]] += 1
            try:
                if point.workload not in found.plans:
                    found.plans[point.workload] = planned_frontier(point, searched[point.workload])
                frontier = found.plans[point.workload]
                pairs = [(p.tokens_per_s_per_user, p.output_tokens_per_s_per_gpu)
                         for p in frontier]  # fmt: skip
                found.along[point] = at_per_user(pairs, point.per_user)
                found.along_load[point] = at_load(pairs, point.per_user, point.tput_per_gpu)
                found.slopes[point] = slope(pairs, point.per_user) if pairs else None
                found.along_tput[point] = at_throughput(pairs, point.tput_per_gpu)
            except InputError as error:
                refused[f"plan: {error}"[:160]] += 1
    return found


Key = Callable[[Published], tuple]
# The rows of the table: each point counts in one row of each grouping.
GROUPINGS: tuple[Key, ...] = (
    lambda p: (p.model, p.mode, p.gpu, p.engine_label),
    lambda p: (p.model, p.mode, "all", ""),
    lambda p: (p.model, "all", "all", ""),
    lambda p: ("all", p.mode, "all", ""),
    lambda p: ("all", "all", "all", ""),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--per-source",
        action="store_true",
        help="draw each source's frontier alone (default: every source's)",
    )
    parser.add_argument("--sources", action="store_true", help="print every source's errors")
    parser.add_argument("--points", action="store_true", help="print every compared point")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="only the workloads whose text contains TEXT (repeatable)",
    )
    args = parser.parse_args()  # fmt: skip
    points = [p for p in published_points() if all(text in str(p.workload) for text in args.only)]
    front = published_frontier(points, args.per_source)
    refused: dict[str, int] = defaultdict(int)
    found = predict(front, sweeps(points), refused)
    models = sorted({p.model for p in points})
    print(f"{len(points)} published points of {len(models)} models ({', '.join(models)}; "
          f"{sum(p.prefill is None for p in points)} aggregated), {len(front)} on their "
          f"{'source' if args.per_source else 'model'}'s frontiers, "
          f"{len({p.source_id for p in front})} sources; {len(found.plans)} plans")  # fmt: skip
    for reason, count in sorted(refused.items()):
        print(f"  not predicted ({count}): {reason}")
    print("\npredicted / published - 1 of frontier points: median and p90 of |error|, signed "
          "median, n (held out by source and model)")  # fmt: skip
    head = ("same: tok/s/GPU", "same: tok/s/user", "layout at tok/s/user", "frontier: tok/s/GPU")
    at_load_head = (
        "frontier: tok/s/user at GPU's",
        "layout at load per GPU",
        "frontier at load per GPU",
    )
    print(f"{'model':<16} {'mode':<14} {'gpu':<9} {'engine':<22} | "
          + " | ".join(f"{h:^26}" for h in head) + " | beyond | "
          + " | ".join(f"{h:^26}" for h in at_load_head))  # fmt: skip
    groups: dict[tuple, list[Published]] = defaultdict(list)
    for p in front:
        for key in {grouping(p) for grouping in GROUPINGS}:
            groups[key].append(p)
    for key in sorted(groups, key=lambda k: (k[0] == "all", k[0], k[1] == "all", k[1],
                                             k[2] == "all", k)):  # fmt: skip
        model, mode, gpu, engine = key
        print(f"{model:<16} {mode:<14} {gpu:<9} {engine:<22} | "
              + " | ".join(found.cells(groups[key])))  # fmt: skip
    print("\nthe plan's frontier / the published layout's curve, both at the published load per "
          "GPU: what the search finds beyond the sources' layouts and loads (no published point "
          "checks it): median, p90, n")  # fmt: skip
    for key in sorted(groups, key=lambda k: (k[0] == "all", k[0], k[1] == "all", k[1],
                                             k[2] == "all", k)):  # fmt: skip
        if key[2] != "all":
            continue
        gains = found.search_gains(groups[key])
        said = (f"{np.median(gains):5.2f} {np.percentile(gains, 90):5.2f} {len(gains):>4}"
                if gains else "    -")  # fmt: skip
        print(f"{key[0]:<16} {key[1]:<14} {said}")
    if args.sources:
        sources: dict[str, list[Published]] = defaultdict(list)
        for p in front:
            sources[p.source_id].append(p)
        print()
        for source, members in sorted(sources.items()):
            print(f"{source:<40} | " + " | ".join(found.cells(members)))
    if args.points:
        print("\nmodel gpu engine mode | published: layout c, tok/s/user, tok/s/GPU | same, "
              "layout, frontier / published at its tok/s per user, slope there; layout, "
              "frontier at its load per GPU | plan's frontier around it")  # fmt: skip
        columns = ("same tok/s/GPU", "layout", "frontier", "layout at load", "frontier at load")
        for p in sorted(front, key=lambda q: (*map(str, q.workload), q.per_user)):
            ratios = [found.errors([p], c) for c in columns]
            said = [f"{r[0] + 1:5.2f}" if r else "    -" for r in ratios]
            tilt = found.slopes.get(p)
            said.insert(3, f"{tilt:6.1f};" if tilt is not None else "     -;")
            said = " ".join(said)
            print(f"{p.model} {p.gpu} {p.engine_label} {p.mode} {p.prompt_tokens}/"
                  f"{p.output_tokens}{' mtp' if p.speculative else ''} | {p.layout} "
                  f"c{p.concurrency} {p.per_user:7.1f} {p.tput_per_gpu:8.1f} | {said} | "
                  f"{neighbours(found.plans.get(p.workload, []), p.per_user)}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
