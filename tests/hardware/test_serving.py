"""GPU planner, cost variants and batch throughput."""

from __future__ import annotations

import pytest

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.hardware.estimate import (
    cost_variants,
    decode_throughput,
    estimate_from_deployment,
    plan_request,
)
from idealized_runtime.cost_model.hardware.planner import (
    min_gpus,
    plan_deployment,
    plan_gpus,
    valid_tensor_parallel_sizes,
)

H100 = get_hardware("h100-sxm")


def test_70b_does_not_fit_one_80gb_gpu() -> None:
    # 70.6e9 parameters x 2 bytes = 141 GB > 72 GB usable of 80.
    assert min_gpus(get_architecture("llama-3.1-70b"), 80.0, context_tokens=4096) > 1


def test_8b_fits_one_gpu() -> None:
    # 8.0e9 x 2 = 16 GB + 0.5 GB of KV at 4096 tokens.
    assert min_gpus(get_architecture("llama-3.1-8b"), H100, context_tokens=4096) == 1


def test_405b_needs_more_than_one_node() -> None:
    # 405e9 x 2 = 810 GB > 8 x 72 GB: two pipeline stages of tp = 8.
    plan = plan_gpus(get_architecture("llama-3.1-405b"), H100, context_tokens=4096)
    assert plan.num_gpus > 8 and plan.tp == 8 and plan.pp >= 2


def test_kv_cache_grows_the_plan() -> None:
    arch = get_architecture("llama-3.1-8b")
    small = min_gpus(arch, H100, context_tokens=1024, batch_size=1)
    large = min_gpus(arch, H100, context_tokens=131072, batch_size=32)
    assert large > small


def test_tensor_parallel_divisibility() -> None:
    gpt2 = get_architecture("gpt2-124m")  # 12 heads: tp 8 would split a head
    assert valid_tensor_parallel_sizes(gpt2) == [1, 2, 4]
    plan = plan_gpus(gpt2, 0.06, context_tokens=1024, reserve_fraction=0.0)
    assert plan.tp in (1, 2, 4) and gpt2.num_heads % plan.tp == 0
    llama = get_architecture("llama-3.1-8b")  # 32 heads, 8 KV heads
    assert valid_tensor_parallel_sizes(llama) == [1, 2, 4, 8]
    with pytest.raises(InputError):
        plan_gpus(gpt2, H100, context_tokens=10, tp=8)


def test_impossible_plan_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="does not fit"):
        min_gpus(get_architecture("llama-3.1-405b"), 0.5, context_tokens=1024)


def test_cost_variants_by_hand() -> None:
    # 2 s on 8 H100s: 16 GPU-s; 700 W x 16 s = 11,200 J; $2.99/h x 16 / 3600 s.
    costs = cost_variants(2.0, 8, H100)
    assert costs["gpu_seconds"] == 16.0
    assert costs["energy_j"] == pytest.approx(11_200.0)
    assert costs["cost_usd"] == pytest.approx(2.99 * 16 / 3600)
    with pytest.raises(InputError):
        cost_variants(-1.0, 1, H100)


def test_batching_raises_throughput_and_lowers_cost() -> None:
    points = decode_throughput(
        plan_deployment(get_architecture("llama-3.1-8b"), H100, context_tokens=512),
        context_tokens=512,
    )
    rates = [p.tokens_per_s for p in points]
    costs = [p.usd_per_million_tokens for p in points]
    assert rates == sorted(rates) and costs == sorted(costs, reverse=True)
    assert points[0].memory_bound


def test_estimate_beyond_the_context_length_is_refused() -> None:
    arch = get_architecture("llama-3.1-8b")
    with pytest.raises(InputError, match=r"exceed the context length of llama-3\.1-8b"):
        estimate_from_deployment(plan_request(arch, get_hardware("h200"), 131_072, 1), 131_072, 1)


def test_single_output_token_still_reports_the_next_decode_step() -> None:
    arch, hardware = get_architecture("llama-3.1-8b"), get_hardware("h100-sxm")
    one = estimate_from_deployment(plan_request(arch, hardware, 1024, 1), 1024, 1)
    many = estimate_from_deployment(plan_request(arch, hardware, 1024, 3), 1024, 3)
    assert one.beta_s > 0
    # The decode step at context 1024 is the first of the two steps of the 3-token request.
    assert one.beta_s == pytest.approx(many.beta_s, rel=0.01)
