"""The plan: Pareto frontiers, SLO filtering, fleet and cost; disaggregated serving and prefix
caching in the simulator against hand calculations; the steady-state estimator against the
simulator; refusals in one line."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Deployment, Disaggregation, Slo, parse_precision
from idealized_runtime.cost_model.planning.frontier import meets, pareto_frontier
from idealized_runtime.cost_model.planning.request import PlanRequest, PlanWorkload
from idealized_runtime.cost_model.planning.search import mean_request, plan, workload_shapes
from idealized_runtime.cost_model.serving.disaggregated import (
    Server,
    kv_transfer_seconds,
    simulate_closed_loop,
    simulate_disaggregated,
)
from idealized_runtime.cost_model.serving.engines import engine_server
from idealized_runtime.cost_model.serving.prefix_cache import (
    PrefixSharing,
    apply_prefix_sharing,
    hit_rate,
)
from idealized_runtime.cost_model.serving.simulator import ServerConfig, simulate
from idealized_runtime.cost_model.serving.steady_state import (
    MeanRequest,
    aggregated_steady_state,
    disaggregated_steady_state,
)
from idealized_runtime.cost_model.serving.step_time import FittedStepTime, StepWork
from idealized_runtime.cost_model.serving.workload import RequestShape

# A step of n new tokens takes 10 ms + 1 ms per token: easy to add up by hand.
LINEAR = FittedStepTime("linear", intercept_s=0.010, per_token_s=0.001, per_attended_s=0.0)


@dataclass
class Recorder:
    """A step time that also adds up the prompt tokens the server read."""

    inner: FittedStepTime = LINEAR
    prompt_tokens: list[float] = field(default_factory=list)

    def seconds(self, work: StepWork) -> np.ndarray:
        decode = work.sequences if work.decode_sequences is None else work.decode_sequences
        self.prompt_tokens += list(work.tokens - decode)
        return self.inner.seconds(work)


def llama_8b(**options: object) -> Deployment:
    return Deployment(
        architecture=get_architecture("llama-3.1-8b"),
        hardware=get_hardware("h100-sxm"),
        **options,  # type: ignore[arg-type]
    )


# --- frontiers ----------------------------------------------------------------------------------

POINTS = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 20)).map(lambda t: (float(t[0]), float(t[1]))),
    max_size=40,
)


@given(POINTS)
def test_frontier_lists_no_dominated_point_and_dominates_every_other(points: list) -> None:
    front = pareto_frontier(points, lambda p: p[0], lambda p: p[1])
    for f in front:
        assert not any(
            (p[0] >= f[0] and p[1] >= f[1]) and (p[0] > f[0] or p[1] > f[1]) for p in points
        )
    for p in points:
        assert any(f[0] >= p[0] and f[1] >= p[1] for f in front)


@given(POINTS)
def test_frontier_is_monotone(points: list) -> None:
    front = pareto_frontier(points, lambda p: p[0], lambda p: p[1])
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in itertools.pairwise(front))
    assert len(front) == len(set(front))


def test_slo_targets_each_count() -> None:
    slo = Slo(ttft_s=1.0, tpot_s=0.05, e2e_s=10.0)
    assert meets(slo, 1.0, 0.05, 100)  # 1 + 99 x 0.05 = 5.95 s
    assert not meets(slo, 1.01, 0.05, 100)
    assert not meets(slo, 1.0, 0.051, 100)
    assert not meets(slo, 1.0, 0.05, 200)  # 1 + 199 x 0.05 = 10.95 s > 10 s
    assert meets(Slo(), 1e9, 1e9, 1)


# --- disaggregated serving ----------------------------------------------------------------------


def test_kv_transfer_is_the_larger_shard_over_the_link() -> None:
    split = Disaggregation(prefill_workers=2, decode_workers=1, prefill_tp=1, transfer_gbps=10)
    deployment = llama_8b(tp=2, disaggregation=split)
    # Llama 3.1 8B: 32 layers, 8 KV heads of 128, bf16: K and V of 8 heads (prefill tp 1) is
    # the larger per-GPU shard: 2 x 8 x 128 x 2 bytes x 32 layers per token.
    per_token = 2 * 8 * 128 * 2 * 32
    assert kv_transfer_seconds(deployment, 1000) == pytest.approx(1000 * per_token / 10e9)
    assert deployment.num_gpus == 2 * 1 + 1 * 2
    assert deployment.prefill_instance().tp == 1 and deployment.decode_instance().tp == 2
    # Without a bandwidth of its own the catalog's interconnect (450 GB/s on an H100) is used.
    catalog = llama_8b(tp=2, disaggregation=split.model_copy(update={"transfer_gbps": None}))
    assert kv_transfer_seconds(catalog, 1000) == pytest.approx(1000 * per_token / 450e9)


def test_one_disaggregated_request_by_hand() -> None:
    split = Disaggregation(prefill_workers=1, decode_workers=1, prefill_tp=1, transfer_gbps=10)
    deployment = llama_8b(disaggregation=split)
    server = Server(LINEAR, ServerConfig(max_batch=8, token_budget=256))
    rows = simulate_disaggregated(
        [RequestShape(100, 5, 0.0)], deployment, server, server, concurrency=None
    )
    transfer = float(kv_transfer_seconds(deployment, 100))
    prefill = 0.010 + 0.001 * 100  # one prompt step of 100 tokens
    decode = 0.010 + 0.001 * 1  # each later token: a decode step of one sequence
    (row,) = rows
    assert row["ok"] and row["num_output_tokens"] == 5
    assert row["ttft_s"] == pytest.approx(prefill + transfer)
    assert row["inter_token_latencies_s"] == pytest.approx([decode] * 4)
    assert row["runtime_s"] == pytest.approx(prefill + transfer + 4 * decode)


def test_disaggregated_pools_share_requests_round_robin() -> None:
    split = Disaggregation(prefill_workers=2, decode_workers=1, prefill_tp=1, transfer_gbps=1e6)
    deployment = llama_8b(disaggregation=split)
    server = Server(LINEAR, ServerConfig(max_batch=8, token_budget=100))
    shapes = [RequestShape(100, 1, 0.0), RequestShape(100, 1, 0.0)]
    rows = simulate_disaggregated(shapes, deployment, server, server)
    # Each prefill instance reads one prompt at t = 0; on one instance the second would wait.
    assert [r["ttft_s"] for r in rows] == pytest.approx([0.110, 0.110], abs=1e-6)
    single = deployment.model_copy(
        update={"disaggregation": split.model_copy(update={"prefill_workers": 1})}
    )
    rows = simulate_disaggregated(shapes, single, server, server)
    assert sorted(r["ttft_s"] for r in rows) == pytest.approx([0.110, 0.220], abs=1e-6)


def test_closed_loop_disaggregated_serves_each_client_in_turn() -> None:
    split = Disaggregation(prefill_workers=1, decode_workers=1, prefill_tp=1, transfer_gbps=1e6)
    deployment = llama_8b(disaggregation=split)
    server = Server(LINEAR, ServerConfig(max_batch=8, token_budget=256))
    result = simulate_closed_loop([RequestShape(50, 3)] * 4, deployment, server, server, 1)
    assert result.converged
    starts = [r["started_at_s"] for r in result.rows]
    ends = [r["finished_at_s"] for r in result.rows]
    assert starts[0] == 0.0
    assert starts[1:] == pytest.approx(ends[:-1])  # one client: next request when one ends


# --- prefix caching -----------------------------------------------------------------------------


def test_shared_prefixes_hit_after_each_groups_first_request() -> None:
    sharing = PrefixSharing(shared_tokens=40, groups=2, block_tokens=16)
    shapes = apply_prefix_sharing([RequestShape(100, 2)] * 10, sharing)
    # Requests 0 and 1 open their groups; the other 8 find 32 tokens (two whole blocks).
    assert [s.cached_tokens for s in shapes] == [0, 0] + [32] * 8
    assert hit_rate(shapes) == pytest.approx(8 * 32 / 1000)
    given_rate = apply_prefix_sharing([RequestShape(100, 2)] * 3, PrefixSharing(hit_rate=0.5))
    assert [s.cached_tokens for s in given_rate] == [48, 48, 48]
    assert PrefixSharing(hit_rate=1.0).cached(100, first_of_group=False) == 96  # whole blocks
    assert PrefixSharing(hit_rate=1.0, block_tokens=1).cached(100, first_of_group=False) == 99


def test_the_server_reads_only_the_uncached_prompt_tokens() -> None:
    sharing = PrefixSharing(shared_tokens=40, groups=2, block_tokens=16)
    shapes = apply_prefix_sharing([RequestShape(100, 2)] * 10, sharing)
    recorder = Recorder()
    rows = simulate(shapes, recorder, ServerConfig(max_batch=1), concurrency=1)
    assert sum(recorder.prompt_tokens) == 10 * 100 - 8 * 32
    ttfts = [r["ttft_s"] for r in rows]
    assert ttfts[:2] == pytest.approx([0.010 + 0.100] * 2)
    assert ttfts[2:] == pytest.approx([0.010 + 0.068] * 8)


def test_prefix_sharing_refuses_bad_values_in_one_line() -> None:
    for options in ({"hit_rate": 1.5}, {"groups": 0}, {"shared_tokens": 4, "hit_rate": 0.5}):
        with pytest.raises(InputError) as caught:
            PrefixSharing(**options)  # type: ignore[arg-type]
        assert "\n" not in str(caught.value)


# --- the steady-state estimator against the simulator --------------------------------------------


def _simulated(server: Server, clients: int, prompt: int, output: int) -> tuple[float, ...]:
    rng = np.random.default_rng(0)
    count = 6 * clients
    shapes = [
        RequestShape(int(p), int(o))
        for p, o in zip(
            rng.integers(int(0.8 * prompt), prompt + 1, count),
            rng.integers(int(0.8 * output), output + 1, count),
            strict=True,
        )
    ]
    rows = simulate(shapes, server.step_time, server.config, concurrency=clients)
    ttft = float(np.median([r["ttft_s"] for r in rows]))
    tpot = float(
        np.median([(r["runtime_s"] - r["ttft_s"]) / (r["num_output_tokens"] - 1) for r in rows])
    )
    span = max(r["finished_at_s"] for r in rows) - min(r["started_at_s"] for r in rows)
    return ttft, tpot, sum(r["num_output_tokens"] for r in rows) / span


@pytest.mark.parametrize("stack", ["vllm", "sglang", "tensorrt-llm"])
def test_steady_state_agrees_with_the_simulator(stack: str) -> None:
    engine = Server(*engine_server(stack, llama_8b(precision=parse_precision("fp8"))))
    # The engine's request overhead (HTTP, tokenization) apart, and with it: under load it
    # spreads the closed loop's resubmissions over the steps, which the estimate leaves out,
    # so its TTFT is compared at light load there.
    bare = Server(engine.step_time, replace(engine.config, request_overhead_s=0.0))
    prompt, output, levels = 2048, 256, [4, 32]
    mean = MeanRequest(0.9 * prompt, 0.9 * output, longest_new_tokens=prompt)
    for server in (bare, engine):
        state = aggregated_steady_state(server, mean, levels)
        for i, clients in enumerate(levels):
            ttft, tpot, tokens = _simulated(server, clients, prompt, output)
            if server is bare or clients <= 4:
                assert state.ttft_s[i] == pytest.approx(ttft, rel=0.3)
            assert state.tpot_s[i] == pytest.approx(tpot, rel=0.1)
            assert state.output_tokens_per_s(mean)[i] == pytest.approx(tokens, rel=0.1)


def test_disaggregated_steady_state_agrees_with_the_simulator() -> None:
    split = Disaggregation(prefill_workers=1, decode_workers=2, prefill_tp=1)
    deployment = llama_8b(precision=parse_precision("fp8"), disaggregation=split)
    prefill = Server(*engine_server("sglang", deployment.prefill_instance()))
    decode = Server(*engine_server("sglang", deployment.decode_instance()))
    rng = np.random.default_rng(0)
    # Lengths drawn from 80-100% (as InferenceX's client): clients that all started at t = 0
    # drift apart, as the estimate assumes (fixed lengths keep them in lock-step).
    shapes = [RequestShape(int(p), int(o)) for p, o in zip(
        rng.integers(820, 1025, 80), rng.integers(103, 129, 80), strict=True)]  # fmt: skip
    state = disaggregated_steady_state(deployment, prefill, decode, MeanRequest(922, 115), [8])
    rows = simulate_closed_loop(shapes, deployment, prefill, decode, 8).rows
    tpot = np.median([(r["runtime_s"] - r["ttft_s"]) / (r["num_output_tokens"] - 1) for r in rows])
    ttft = np.median([r["ttft_s"] for r in rows])
    assert state.tpot_s[0] == pytest.approx(tpot, rel=0.1)
    assert state.ttft_s[0] == pytest.approx(ttft, rel=0.3)


# --- the plan -----------------------------------------------------------------------------------


def small_request(**options: object) -> PlanRequest:
    settings: dict[str, object] = {
        "architecture": get_architecture("llama-3.1-8b"),
        "hardware": [get_hardware("h100-sxm")],
        "stacks": ["vllm", "ideal"],
        "workload": PlanWorkload(prompt_tokens=1024, output_tokens=128, min_length_fraction=0.8),
        "slo": Slo(ttft_s=0.5, tpot_s=0.02),
        "rate": 20.0,
        "max_gpus": 4,
        "concurrency": [1, 8, 64],
        "requests_per_client": 2,
    }
    return PlanRequest(**{**settings, **options})  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def small_plan():  # type: ignore[no-untyped-def]
    return plan(small_request())


def test_plan_picks_the_most_tokens_per_gpu_under_the_slo(small_plan) -> None:  # type: ignore[no-untyped-def]
    best = small_plan.best
    assert best is not None and best.stack == "vllm"  # the ideal line is a reference only
    assert best.meets_slo and best.ttft_s <= 0.5 and best.tpot_s <= 0.02
    points = [p for f in small_plan.frontiers for p in f.points if p.stack == "vllm"]
    assert all(
        p.output_tokens_per_s_per_gpu <= best.output_tokens_per_s_per_gpu
        for p in points
        if p.meets_slo
    )
    assert small_plan.best_per_hardware == [best]
    assert small_plan.evaluated == small_plan.deployments * 3


def test_plan_sizes_the_fleet_and_prices_a_million_tokens(small_plan) -> None:  # type: ignore[no-untyped-def]
    best, hardware = small_plan.best, get_hardware("h100-sxm")
    replicas = small_plan.replicas
    assert replicas * best.requests_per_s >= 20.0 > (replicas - 1) * best.requests_per_s
    assert small_plan.gpus_for_rate == replicas * best.gpus
    seconds = 1e6 / (best.output_tokens_per_s_per_gpu * best.gpus)
    assert best.usd_per_million_tokens == pytest.approx(
        hardware.hourly_price_usd * best.gpus * seconds / 3600
    )
    assert best.joules_per_million_tokens == pytest.approx(
        hardware.board_power_w * best.gpus * seconds
    )


def test_plan_frontiers_hold_their_properties(small_plan) -> None:  # type: ignore[no-untyped-def]
    assert {f.stack for f in small_plan.frontiers} == {"vllm", "ideal"}
    for frontier in small_plan.frontiers:
        xs = [p.tokens_per_s_per_user for p in frontier.points]
        ys = [p.output_tokens_per_s_per_gpu for p in frontier.points]
        assert xs == sorted(xs) and ys == sorted(ys, reverse=True)
        assert len(set(xs)) == len(xs) and len(set(ys)) == len(ys)
    modes = {p.mode for f in small_plan.frontiers for p in f.points}
    assert modes <= {"aggregated", "disaggregated"}


def test_plan_verifies_its_best_by_simulating_it(small_plan) -> None:  # type: ignore[no-untyped-def]
    check = small_plan.verification
    assert check is not None and check.requests >= small_plan.best.concurrency
    assert check.tpot_p50_s == pytest.approx(small_plan.best.tpot_s, rel=0.25)


def test_an_slo_no_configuration_meets_leaves_no_best() -> None:
    result = plan(small_request(slo=Slo(tpot_s=1e-4), verify=False, stacks=["vllm"]))
    assert result.best is None and result.replicas is None and result.frontiers
    assert not any(p.meets_slo for f in result.frontiers for p in f.points)


def test_plan_with_prefix_caching_reads_fewer_prompt_tokens() -> None:
    plain = small_request(verify=False, stacks=["vllm"], modes=["aggregated"])
    cached = small_request(
        verify=False,
        stacks=["vllm"],
        modes=["aggregated"],
        workload=PlanWorkload(prompt_tokens=1024, output_tokens=128, prefix_hit_rate=0.75),
    )
    first, second = plan(plain), plan(cached)
    assert second.best.ttft_s < first.best.ttft_s
    shapes = workload_shapes(cached, 4)
    assert all(s.cached_tokens == 768 for s in shapes)


@given(
    st.integers(1, 4096),
    st.integers(2, 4096),  # a plan needs two output tokens (1 / TPOT)
    st.floats(0, 1, exclude_min=True, allow_subnormal=True),
)
def test_the_mean_request_is_the_mean_of_the_lengths_drawn(
    prompt: int, output: int, fraction: float
) -> None:
    """The estimator's mean request is the mean of the whole lengths ``workload_shapes`` draws
    (at least one token each), however small the fraction (5e-324 once gave a mean below one)."""
    request = small_request(
        workload=PlanWorkload(
            prompt_tokens=prompt, output_tokens=output, min_length_fraction=fraction
        )
    )
    mean = mean_request(request)
    shapes = workload_shapes(request, 2000)
    low_p, low_o = (
        min(s.num_prompt_tokens for s in shapes),
        min(s.num_output_tokens for s in shapes),
    )
    assert 1 <= low_p <= mean.prompt_tokens <= prompt and 1 <= low_o <= mean.output_tokens <= output
    assert mean.prompt_tokens == pytest.approx(
        np.mean([s.num_prompt_tokens for s in shapes]), rel=0.05
    )


def test_refusals_are_one_line() -> None:
    cases = [
        small_request(architecture=get_architecture("llama-3.1-405b"), max_gpus=2),
        small_request(stacks=["nope"]),
        small_request(weights=["nvfp4"], stacks=["vllm"]),  # no fp4 tensor cores on an H100
        # longer than llama-3.1-8b's 131,072 tokens of context: no engine serves it
        small_request(workload=PlanWorkload(prompt_tokens=130_000, output_tokens=2_000)),
        # nothing left to search: the message says which setting to change
        small_request(modes=["disaggregated"], max_gpus=1),
        small_request(modes=["disaggregated"], stacks=["ideal"]),
    ]
    for request in cases:
        with pytest.raises(InputError) as caught:
            plan(request)
        message = str(caught.value)
        assert "\n" not in message and message and not message.endswith(": ")
