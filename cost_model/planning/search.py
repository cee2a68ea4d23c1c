"""``plan``: the best deployment under an SLO, the frontiers behind it, and its fleet and cost.

Every candidate deployment (``space``) is evaluated at every concurrency level on the
steady-state estimator (``serving.steady_state``): the engine stack's step times and scheduler,
the ideal stack's roofline on an ideal server. The frontiers (``frontier``) are drawn per GPU
and engine; the best configuration is the one with the most output tokens/s per GPU whose mean
TTFT and TPOT meet the SLO. For a rate, replicas = ceil(rate / the best's requests/s), each at
the best's load. Dollars and joules per million output tokens: the replica's GPU-seconds for a
million tokens at the catalog's price and board power (``hardware.estimate.cost_variants``).
With ``verify``, the best configuration is then simulated request by request (``simulate``, or
``simulate_closed_loop`` for xPyD) at its concurrency, ``requests_per_client`` requests per
client, lengths drawn as the workload says.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import replace

import numpy as np

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Deployment
from idealized_runtime.cost_model.hardware.engines.catalog import engine_names
from idealized_runtime.cost_model.hardware.estimate import cost_variants
from idealized_runtime.cost_model.planning.frontier import (
    best_under_slo,
    meets,
    serving_frontier,
)
from idealized_runtime.cost_model.planning.request import (
    IDEAL_STACK,
    Frontier,
    PlanPoint,
    PlanRequest,
    PlanResult,
    Refusal,
    Verification,
)
from idealized_runtime.cost_model.planning.space import Candidate, candidates
from idealized_runtime.cost_model.serving.disaggregated import Server, simulate_closed_loop
from idealized_runtime.cost_model.serving.engines import engine_server
from idealized_runtime.cost_model.serving.prefix_cache import PrefixSharing, apply_prefix_sharing
from idealized_runtime.cost_model.serving.simulator import (
    ServerConfig,
    kv_capacity_tokens,
    simulate,
    starved_budget,
)
from idealized_runtime.cost_model.serving.steady_state import (
    MeanRequest,
    SteadyState,
    StepTable,
    aggregated_steady_state,
    disaggregated_steady_state,
    running_requests,
    step_table,
)
from idealized_runtime.cost_model.serving.step_time import HardwareStepTime
from idealized_runtime.cost_model.serving.workload import RequestShape

# The ideal server: the simulator's chunked prefill with a large budget and batch.
IDEAL_SERVER = ServerConfig(max_batch=1024, token_budget=8192)
MILLION = 1e6


def plan(request: PlanRequest) -> PlanResult:
    """Search, rank and size (see the module docstring); InputError in one line when a name is
    unknown or nothing fits."""
    stacks = _stacks(request)
    started = time.perf_counter()
    search = _Search(request)
    left_out: list[str] = []  # token budgets the engines refuse for this workload
    for candidate in candidates(request, stacks, left_out):
        search.evaluate(candidate)
    search.refused.update(left_out)
    if not search.points:
        reasons = "; ".join(sorted({r for r, _ in search.refused.most_common(3)}))
        raise InputError(
            f"no deployment of {request.architecture.name} could be evaluated: {reasons}"
        )
    frontiers = search.frontiers()
    # The ideal stack is the reference line, not a deployment to buy (unless it is all asked).
    real = [p for p in search.points if p.stack != IDEAL_STACK] or search.points
    best = best_under_slo(real)
    per_hardware = [
        found
        for hardware in request.hardware
        if (found := best_under_slo([p for p in real if p.hardware == hardware.name]))
    ]
    seconds = time.perf_counter() - started
    replicas = gpus = None
    if best is not None and request.rate is not None:
        replicas = math.ceil(request.rate / best.requests_per_s - 1e-9)
        gpus = replicas * best.gpus
    verification = None
    if best is not None and request.verify:
        verification = verify(request, best, search.servers_of(best))
    refused = [Refusal(reason=r, count=n) for r, n in search.refused.most_common()]
    return PlanResult(
        model=request.architecture.name, workload=request.workload, slo=request.slo,
        rate=request.rate, frontiers=frontiers, best=best, best_per_hardware=per_hardware,
        replicas=replicas, gpus_for_rate=gpus, verification=verification,
        deployments=search.deployments, evaluated=search.evaluated, seconds=seconds,
        refused=refused,
    )  # fmt: skip


def _stacks(request: PlanRequest) -> list[str]:
    known = [*engine_names(), IDEAL_STACK]
    stacks = request.stacks or known
    for stack in stacks:
        if stack not in known:
            raise InputError(f"unknown stack {stack!r}; plan knows {', '.join(known)}")
    return list(dict.fromkeys(stacks))


def shortest_length(stated: int, fraction: float) -> int:
    """The shortest whole length drawn for a stated one (at least one token)."""
    return max(1, math.ceil(stated * fraction))


def mean_request(request: PlanRequest) -> MeanRequest:
    """The workload's mean request for the estimator: the mean of the whole lengths drawn
    evenly from the fraction to the stated length (as ``workload_shapes`` draws them), the
    prefix cache's long-run hits (every request after its group's first)."""
    workload = request.workload

    def mean(stated: int) -> float:
        return (shortest_length(stated, workload.min_length_fraction) + stated) / 2

    prompt, output = mean(workload.prompt_tokens), mean(workload.output_tokens)
    cached = float(_sharing(request).cached(round(prompt), first_of_group=False))
    longest = workload.prompt_tokens - cached
    return MeanRequest(prompt, output, cached, longest_new_tokens=longest)


def _sharing(request: PlanRequest) -> PrefixSharing:
    workload = request.workload
    return PrefixSharing(
        shared_tokens=workload.shared_prefix_tokens,
        groups=workload.prefix_groups,
        hit_rate=workload.prefix_hit_rate,
    )


class _Search:
    """The candidates' servers and step tables (built once per instance layout) and points."""

    def __init__(self, request: PlanRequest) -> None:
        self.request = request
        self.mean = mean_request(request)
        self.levels = np.array(sorted(set(request.concurrency)), dtype=np.float64)
        self.points: list[PlanPoint] = []
        self.refused: Counter[str] = Counter()
        self.deployments = 0
        self.evaluated = 0
        self._servers: dict[tuple, Server | str] = {}
        self._kv_tokens: dict[tuple, int | None] = {}
        self._tables: dict[tuple, StepTable] = {}
        self._instance_of: dict[int, tuple] = {}  # id(server) -> its instance (any budget)
        self._first_tables: dict[tuple, StepTable] = {}  # (instance, request) -> a table

    def _server(self, stack: str, deployment: Deployment, budget: int | None = None) -> Server:
        instance = (stack, deployment.hardware.name, deployment.precision, deployment.tp,
                    deployment.ep, deployment.attention_dp)  # fmt: skip
        key = (*instance, budget)
        if key not in self._servers:
            try:
                # The KV cache is the instance's whatever its budget: planned once.
                kv = self._kv_tokens.get(instance)
                server = _build_server(stack, deployment, budget, self.request, kv)
                self._kv_tokens[instance] = server.config.kv_capacity_tokens
                self._servers[key] = server
                self._instance_of[id(server)] = instance
            except InputError as error:
                self._servers[key] = str(error)
        found = self._servers[key]
        if isinstance(found, str):
            raise InputError(found)
        return found

    def _table(self, server: Server, request: MeanRequest) -> StepTable:
        key = (id(server), request)
        if key not in self._tables:
            table = step_table(server, request, self.levels)
            # The instance's tables at other token budgets share its decode-only steps.
            instance = (self._instance_of.get(id(server)), request)
            if instance[0] is not None and instance in self._first_tables:
                table.share_decode_steps(self._first_tables[instance])
            elif instance[0] is not None:
                self._first_tables[instance] = table
            self._tables[key] = table
        return self._tables[key]

    def servers_of(self, point: PlanPoint) -> tuple[Deployment, Server, Server | None]:
        """The deployment of ``point`` and its (decode or only) and prefill servers."""
        deployment = _deployment_of(self.request, point)
        decode = self._server(point.stack, deployment.decode_instance(), point.token_budget)
        prefill = None
        if deployment.disaggregation is not None:
            prefill = self._server(point.stack, deployment.prefill_instance())
        return deployment, decode, prefill

    def evaluate(self, candidate: Candidate) -> None:
        deployment, mean = candidate.deployment, self.mean
        try:
            decode = self._server(
                candidate.stack, deployment.decode_instance(), candidate.token_budget
            )
            if deployment.disaggregation is None:
                state = aggregated_steady_state(
                    decode, mean, self.levels, self._table(decode, mean)
                )
            else:
                prefill = self._server(candidate.stack, deployment.prefill_instance())
                prompt_side = MeanRequest(mean.prompt_tokens, 1.0, mean.cached_tokens)
                tables = (self._table(prefill, prompt_side), self._table(decode, mean))
                state = disaggregated_steady_state(
                    deployment, prefill, decode, mean, self.levels, tables
                )
        except InputError as error:
            self.refused[str(error)] += 1
            return
        self.deployments += 1
        self.evaluated += len(self.levels)
        if not bool(state.fits[0]):
            self.refused[f"{_describe(candidate)}: a request does not fit the KV cache"] += 1
            return
        points = _points(self.request, candidate, state, mean)
        if deployment.disaggregation is None:
            # Load levels at which the longest prompt waits for running decodes to end are left
            # out, and said so: the engine serves them, but with TTFTs of whole requests.
            running = running_requests(decode, mean, state.concurrency)
            starved = starved_budget(decode.config, mean.longest_new, running)
            if np.any(starved > 0):
                clients = set(state.concurrency[starved > 0].astype(int).tolist())
                kept = [p for p in points if p.concurrency not in clients]
                config = decode.config
                reason = (
                    f"{_describe(candidate)} {config.budget_setting or 'token budget'} "
                    f"{config.rank_budget}: prompts of {round(mean.longest_new)} tokens wait "
                    "for running decodes to end (starved; a larger budget is searched)"
                )
                self.refused[reason] += len(points) - len(kept)
                points = kept
        self.points += points

    def frontiers(self) -> list[Frontier]:
        groups: dict[tuple[str, str], list[PlanPoint]] = {}
        for point in self.points:
            groups.setdefault((point.hardware, point.stack), []).append(point)
        return [
            Frontier(hardware=hardware, stack=stack, points=serving_frontier(points))
            for (hardware, stack), points in groups.items()
        ]


def _build_server(
    stack: str,
    deployment: Deployment,
    budget: int | None,
    request: PlanRequest,
    kv_tokens: int | None = None,
) -> Server:
    """The step times and scheduler of one instance on ``stack`` at ``budget`` tokens per step
    (None: the engine's default, sized for the workload's prompts beside the most clients
    where the engine sizes it); ``kv_tokens``: its KV cache, when already planned."""
    if stack == IDEAL_STACK:
        capacity = kv_tokens or kv_capacity_tokens(deployment)
        return Server(
            HardwareStepTime(deployment), replace(IDEAL_SERVER, kv_capacity_tokens=capacity)
        )
    return Server(
        *engine_server(
            stack, deployment, token_budget=budget, kv_tokens=kv_tokens,
            longest_prompt=request.workload.prompt_tokens, running=max(request.concurrency),
        )
    )  # fmt: skip


def point_servers(
    request: PlanRequest, point: PlanPoint
) -> tuple[Deployment, Server, Server | None]:
    """The deployment of a plan's ``point`` and its (decode or only) and prefill servers, as the
    plan evaluated them (its token budget, or the engine's default sized for the workload)."""
    return _Search(request).servers_of(point)


def _describe(candidate: Candidate) -> str:
    d = candidate.deployment
    return f"{candidate.stack} {d.precision.weights} tp{d.tp} on {d.hardware.name}"


def _points(
    request: PlanRequest, candidate: Candidate, state: SteadyState, mean: MeanRequest
) -> list[PlanPoint]:
    deployment = candidate.deployment
    gpus = deployment.num_gpus
    per_gpu = state.output_tokens_per_s(mean) / gpus
    million = cost_variants(MILLION, gpus, deployment.hardware)  # per (tokens/s per replica)
    points = []
    for i, clients in enumerate(state.concurrency):
        ttft, tpot = float(state.ttft_s[i]), float(state.tpot_s[i])
        if not (math.isfinite(ttft) and math.isfinite(tpot) and per_gpu[i] > 0):
            continue
        replica_tokens = float(per_gpu[i]) * gpus
        hardware = deployment.hardware
        points.append(
            PlanPoint(
                hardware=hardware.name,
                stack=candidate.stack,
                weights=deployment.precision.weights,
                kv_cache=deployment.precision.kv_cache,
                mode="aggregated" if deployment.disaggregation is None else "disaggregated",
                tp=deployment.tp,
                ep=deployment.ep,
                attention_dp=deployment.attention_dp,
                disaggregation=deployment.disaggregation,
                token_budget=candidate.token_budget,
                gpus=gpus,
                concurrency=int(clients),
                ttft_s=ttft,
                tpot_s=tpot,
                tokens_per_s_per_user=1.0 / tpot if tpot > 0 else math.inf,
                output_tokens_per_s_per_gpu=float(per_gpu[i]),
                requests_per_s=float(state.requests_per_s[i]),
                meets_slo=meets(request.slo, ttft, tpot, mean.output_tokens),
                usd_per_million_tokens=(
                    million["cost_usd"] / replica_tokens if hardware.hourly_price_usd else None
                ),
                joules_per_million_tokens=(
                    million["energy_j"] / replica_tokens if hardware.board_power_w else None
                ),
            )
        )
    return points


def _deployment_of(request: PlanRequest, point: PlanPoint) -> Deployment:
    from idealized_runtime.cost_model.serving.engines import default_precision

    hardware = next(h for h in request.hardware if h.name == point.hardware)
    precision = default_precision(
        request.architecture, weights=point.weights, kv_cache=point.kv_cache
    )
    layout = {"tp": point.tp, "ep": point.ep, "attention_dp": point.attention_dp}
    return Deployment(architecture=request.architecture, hardware=hardware, precision=precision,
                      disaggregation=point.disaggregation, **layout)  # fmt: skip


def workload_shapes(request: PlanRequest, count: int, seed: int = 0) -> list[RequestShape]:
    """``count`` requests of the workload: lengths drawn evenly from the fraction to the stated
    length (seeded), prefix-cache hits from its sharing."""
    workload = request.workload
    rng = np.random.default_rng(seed)

    def lengths(stated: int) -> np.ndarray:
        low = shortest_length(stated, workload.min_length_fraction)
        return rng.integers(low, stated + 1, size=count)

    prompts, outputs = lengths(workload.prompt_tokens), lengths(workload.output_tokens)
    shapes = [RequestShape(int(p), int(o)) for p, o in zip(prompts, outputs, strict=True)]
    return apply_prefix_sharing(shapes, _sharing(request))


def verify(
    request: PlanRequest,
    point: PlanPoint,
    servers: tuple[Deployment, Server, Server | None],
) -> Verification:
    """``point`` simulated request by request at its concurrency (see the module docstring)."""
    from idealized_runtime.timing.summary import summarize_level

    deployment, decode, prefill = servers
    count = min(request.requests_per_client * point.concurrency, request.max_verify_requests)
    count = max(count, point.concurrency)
    shapes = workload_shapes(request, count)
    passes = 1
    if prefill is None:
        rows = simulate(shapes, decode.step_time, decode.config, concurrency=point.concurrency)
    else:
        result = simulate_closed_loop(shapes, deployment, prefill, decode, point.concurrency)
        rows, passes = result.rows, result.passes
    summary = summarize_level(request.architecture.name, "plan", rows, request.slo)
    ttft, tpot = summary.ttft_s, summary.tpot_s
    per_gpu = summary.output_tokens_per_s / point.gpus
    p50 = (ttft.p50 or math.inf, tpot.p50 or 0.0)
    return Verification(
        requests=summary.requests,
        ttft_p50_s=p50[0],
        ttft_p90_s=ttft.p90 or math.inf,
        tpot_p50_s=p50[1],
        tpot_p90_s=tpot.p90 or 0.0,
        output_tokens_per_s_per_gpu=per_gpu,
        meets_slo=meets(request.slo, p50[0], p50[1], request.workload.output_tokens),
        passes=passes,
    )
