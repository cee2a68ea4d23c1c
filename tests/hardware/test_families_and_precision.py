"""The hardware model's counts for today's families and precisions, against hand arithmetic
from the published config.json files (tests/hardware/hf_configs/)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.architectures import architecture_from_hf_file
from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import BF16, parse_precision
from idealized_runtime.cost_model.hardware.counts import (
    forward_costs,
    kv_cache_bytes,
    layer_weights,
    memory_per_gpu,
    weight_bytes,
)
from idealized_runtime.cost_model.hardware.estimate import (
    estimate_from_deployment,
    plan_request,
)
from idealized_runtime.cost_model.hardware.planner import min_gpus, plan_deployment, plan_gpus
from idealized_runtime.cost_model.hardware.roofline import compute_hardware, hardware_model_runtime
from tests.deployments import deploy

CONFIGS = Path(__file__).parent / "hf_configs"
H100, H200, A100 = get_hardware("h100-sxm"), get_hardware("h200"), get_hardware("a100-80gb")
USABLE_H100 = 80e9 * 0.9

# Published totals (billions): model cards / HF safetensors metadata.
PUBLISHED = {
    "llama-3.3-70b": (70.6, None),
    "qwen3-8b": (8.2, None),
    "qwen3-32b": (32.8, None),
    "qwen3-235b-a22b": (235.0, 22.0),
    "gemma-3-27b": (27.0, None),  # the language model (the vision tower is not served here)
    "deepseek-v3": (671.0, 37.0),
    "gpt-oss-20b": (20.91, 3.61),  # active excludes the embedding table (OpenAI's count)
    "gpt-oss-120b": (116.83, 5.13),
    "mistral-small-24b": (23.6, None),
    "phi-4": (14.7, None),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_flagship_catalog_entries_match_their_configs_and_published_totals(name: str) -> None:
    arch = get_architecture(name)
    from_config = architecture_from_hf_file(CONFIGS / f"{name}.json", name=name)
    assert arch.model_dump(exclude={"source"}) == from_config.model_dump(exclude={"source"})
    assert arch.source == json.loads((CONFIGS / f"{name}.json").read_text())["_source"]
    total, active = PUBLISHED[name]
    assert arch.num_parameters() / 1e9 == pytest.approx(total, rel=0.01)
    if active is not None:
        embedding = arch.vocab_size * arch.hidden_size if name.startswith("gpt-oss") else 0
        assert (arch.num_parameters(True) - embedding) / 1e9 == pytest.approx(active, rel=0.03)
    assert weight_bytes(arch, BF16) == 2 * arch.num_parameters()


def test_checkpoint_precisions_come_from_quantization_config() -> None:
    assert get_architecture("deepseek-v3").precision == parse_precision("fp8")
    oss = get_architecture("gpt-oss-120b").precision
    assert oss is not None and (oss.weights, oss.scope) == ("mxfp4", "experts")
    assert get_architecture("llama-3.3-70b").precision is None


def test_kv_cache_bytes_per_token_by_hand() -> None:
    llama = get_architecture("llama-3.1-70b")
    assert kv_cache_bytes(llama, 1) == 2 * 80 * 8 * 128 * 2  # K and V, 8 KV heads, bf16
    assert kv_cache_bytes(llama, 1, parse_precision(kv_cache="fp8")) == 2 * 80 * 8 * 128
    int8 = parse_precision(kv_cache="int8")  # + a 16-bit scale per head vector
    assert kv_cache_bytes(llama, 1, int8) == 2 * 80 * 8 * (128 + 2)
    deepseek = get_architecture("deepseek-v3")  # MLA: latent 512 + RoPE key 64 per layer
    assert kv_cache_bytes(deepseek, 1) == 61 * (512 + 64) * 2
    assert kv_cache_bytes(deepseek, 1, parse_precision("fp8", "fp8")) == 61 * (512 + 64)
    assert kv_cache_bytes(deepseek, 1, tp=8) == 61 * (512 + 64) * 2  # replicated on each rank
    oss = get_architecture("gpt-oss-120b")  # 18 sliding layers keep <= 128 tokens
    per_layer = 2 * 8 * 64 * 2
    assert kv_cache_bytes(oss, 4096) == (18 * 4096 + 18 * 128) * per_layer
    gemma = get_architecture("gemma-3-27b")  # 10 global layers of 62, window 1024
    assert kv_cache_bytes(gemma, 8192) == (10 * 8192 + 52 * 1024) * 2 * 16 * 128 * 2
    for arch in (llama, deepseek, oss, gemma):
        assert kv_cache_bytes(arch, 100) == arch.kv_cache_bytes(100)  # the runner's count


def _llama70_linear_params() -> int:
    attention = 2 * 8192 * 8192 + 2 * 8192 * 1024
    mlp = 3 * 8192 * 28672
    return 80 * (attention + mlp)


def test_weight_bytes_by_hand_quantized_with_scales() -> None:
    llama = get_architecture("llama-3.1-70b")
    linear = _llama70_linear_params()
    rest = llama.num_parameters() - linear  # embeddings, head, norms: kept in bf16
    assert weight_bytes(llama, parse_precision("int4")) == pytest.approx(
        linear * (0.5 + 2.5 / 128) + rest * 2
    )
    assert weight_bytes(llama, parse_precision("int8")) == pytest.approx(linear + rest * 2)
    # DeepSeek-V3 in fp8: every linear layer (attention, dense MLPs, routed and shared experts)
    # at one byte; embeddings, LM head, routers and norms in bf16.
    q = 7168 * 1536 + 1536 * 128 * (128 + 64)
    kv = 7168 * (512 + 64) + 512 * 128 * (128 + 128)
    attention = q + kv + 128 * 128 * 7168
    experts = (256 + 1) * 3 * 7168 * 2048
    linear = 61 * attention + 3 * 3 * 7168 * 18432 + 58 * experts
    deepseek = get_architecture("deepseek-v3")
    rest = deepseek.num_parameters() - linear
    assert weight_bytes(deepseek, deepseek.precision) == pytest.approx(linear + 2 * rest)
    # gpt-oss: MXFP4 experts (4.25 bits), everything else bf16.
    oss = get_architecture("gpt-oss-120b")
    expert_params = 36 * 128 * (3 * 2880 * 2880)
    rest = oss.num_parameters() - expert_params
    assert weight_bytes(oss, oss.precision) == pytest.approx(expert_params * 4.25 / 8 + 2 * rest)


def test_planner_gpu_counts_match_hand_arithmetic() -> None:
    llama = get_architecture("llama-3.1-70b")
    context = 4096
    int4 = parse_precision("int4")
    weights = (
        _llama70_linear_params() * (0.5 + 2.5 / 128)
        + (llama.num_parameters() - _llama70_linear_params()) * 2
    )
    kv = 2 * 80 * 8 * 128 * 2 * context
    assert weights + kv < USABLE_H100  # ~39.8 GB: one H100
    assert min_gpus(llama, H100, context_tokens=context, precision=int4) == 1
    assert 2 * llama.num_parameters() > USABLE_H100  # bf16: 141 GB does not fit on one
    assert min_gpus(llama, H100, context_tokens=context) == 2
    assert memory_per_gpu(
        llama, int4, tp=1, pp=1, context_tokens=context, batch_size=1
    ) == pytest.approx((weights, kv))
    # DeepSeek-V3 fp8: 673 GB of weights; 8 H200 hold 8 x 126.9 GB usable, 4 do not.
    deepseek = get_architecture("deepseek-v3")
    total = weight_bytes(deepseek, deepseek.precision)
    assert 4 * 141e9 * 0.9 < total < 8 * 141e9 * 0.9
    plan = plan_gpus(deepseek, H200, context_tokens=8192, precision=deepseek.precision)
    assert (plan.num_gpus, plan.tp, plan.pp) == (8, 8, 1)
    bf16 = plan_gpus(deepseek, H200, context_tokens=8192)  # 1.34 TB: two nodes
    assert bf16.num_gpus == 16 and bf16.pp == 2


def test_moe_reads_active_experts_at_batch_one_and_more_at_batch_b() -> None:
    deepseek = get_architecture("deepseek-v3")
    fp8 = deepseek.precision
    one = float(forward_costs(deepseek, 1, 100, precision=fp8).weight_bytes)
    active = deepseek.num_parameters(active_only=True)
    embedding = deepseek.vocab_size * deepseek.hidden_size  # gathered, not read
    # bytes ~ active linear weights at 1 byte + bf16 rest; between 1x and 2x the active count
    assert (active - embedding) < one < 2 * (active - embedding)
    big = float(forward_costs(deepseek, 1, 100, batch=64, precision=fp8).weight_bytes)
    union = 256 * (1 - (1 - 8 / 256) ** 64)  # expected distinct routed experts per layer
    expert_bytes = 3 * 7168 * 2048
    assert big - one == pytest.approx(58 * (union - 8) * expert_bytes, rel=1e-9)


def test_mla_decode_reads_the_latent_cache_and_sliding_layers_read_the_window() -> None:
    deepseek = get_architecture("deepseek-v3")
    step = forward_costs(deepseek, 1, 1000)
    assert float(step.kv_bytes) == 61 * 576 * 2 * (1000 + 1 + 1)  # read c + 1, write 1
    oss = get_architecture("gpt-oss-20b")
    step = forward_costs(oss, 1, 10_000)
    per_layer = 2 * 8 * 64 * 2
    assert float(step.kv_bytes) == per_layer * (12 * (10_001 + 1) + 12 * (128 + 1))


@given(
    c=st.integers(0, 3000),
    n=st.integers(1, 600),
    window=st.integers(1, 1024),
)
@settings(max_examples=60, deadline=None)
def test_sliding_window_attention_flops_equal_the_brute_force_sum(
    c: int, n: int, window: int
) -> None:
    from idealized_runtime.cost_model.hardware.counts import _attended

    expected = sum(min(c + i, window) for i in range(1, n + 1))
    assert float(_attended(np.float64(n), np.float64(c), float(window))) == expected


MONOTONE = ["bf16", "int8", "int8-g64", "int4-g32", "int4-g128", "mxfp4"]


@given(
    name=st.sampled_from(["llama-3.1-8b", "qwen3-8b", "gpt-oss-20b", "mixtral-8x7b"]),
    prompt=st.integers(1, 4000),
    output=st.integers(1, 500),
    batch=st.sampled_from([1, 8, 64]),
    kv=st.sampled_from(["bf16", "int8", "fp8"]),
)
@settings(max_examples=25, deadline=None)
def test_estimates_fall_monotonically_with_precision_bytes(
    name: str, prompt: int, output: int, batch: int, kv: str
) -> None:
    arch = get_architecture(name)
    precisions = sorted(
        (parse_precision(w, kv) for w in MONOTONE), key=lambda p: -p.bytes_per_weight
    )
    runtimes = [
        float(
            hardware_model_runtime(
                deploy(arch, H100, batch_size=batch, precision=p),
                prompt,
                output,
            )
        )
        for p in precisions
    ]
    assert all(a >= b * (1 - 1e-12) for a, b in itertools.pairwise(runtimes))
    gpus = [min_gpus(arch, 24.0, context_tokens=prompt + output, precision=p) for p in precisions]
    assert gpus == sorted(gpus, reverse=True)
    # fp8 compute (W8A8) is no slower than weight-only fp8, which moves the same bytes.
    w8a8 = hardware_model_runtime(
        deploy(arch, H100, batch_size=batch, precision=parse_precision("fp8")),
        prompt,
        output,
    )
    weight_only = parse_precision("fp8", activations="bf16")
    assert w8a8 <= hardware_model_runtime(
        deploy(arch, H100, batch_size=batch, precision=weight_only),
        prompt,
        output,
    )


def test_fp8_compute_is_refused_without_fp8_tensor_cores_but_weight_only_runs() -> None:
    arch = get_architecture("llama-3.1-8b")
    with pytest.raises(InputError, match="a100-80gb has no fp8 tensor cores") as caught:
        estimate_from_deployment(
            plan_request(arch, A100, 128, 16, precision=parse_precision("fp8")), 128, 16
        )
    assert "\n" not in str(caught.value)
    weight_only = parse_precision("fp8", activations="bf16")
    estimate = estimate_from_deployment(
        plan_request(arch, A100, 128, 16, precision=weight_only), 128, 16
    )
    assert estimate.precision == "fp8 (weight-only)"
    assert compute_hardware(H100, parse_precision("fp8")).peak_dense_tflops == 1979


def test_int4_speeds_up_memory_bound_decode_by_the_byte_ratio() -> None:
    llama = get_architecture("llama-3.1-70b")
    int4 = parse_precision("int4")
    fits = estimate_from_deployment(plan_request(llama, H100, 1, 257, precision=int4), 1, 257)
    assert (fits.num_gpus, fits.precision) == (1, "int4-g128 (weight-only)")
    two = estimate_from_deployment(plan_request(llama, H100, 1, 257), 1, 257)  # bf16 needs tp 2
    assert two.num_gpus == 2 and fits.beta_s < two.beta_s
    # Same GPU count: batch-1 decode is memory bound, so the speed-up is the bytes ratio.
    step_bf16 = forward_costs(llama, 1, 128)
    step_int4 = forward_costs(llama, 1, 128, precision=int4)
    speedup = float(hardware_model_runtime(deploy(llama, H100), 128, 2)) / float(
        hardware_model_runtime(deploy(llama, H100, precision=int4), 128, 2)
    )
    decode_ratio = float(step_bf16.bytes) / float(step_int4.bytes)
    assert 3.5 < decode_ratio < 3.9
    assert speedup < decode_ratio  # the compute-bound prompt pass gains nothing


def test_mla_decompresses_at_prefill_and_absorbs_at_decode() -> None:
    arch = get_architecture("deepseek-v3")
    heads, rank, rope, nope, v = 128, 512, 64, 128, 128
    kv_up = rank * heads * (nope + v)
    layers = 61
    # Prefill of p tokens, no context: per layer, decompressing costs 2 kv_up per token and
    # attention over head dims (nope + rope) for QK and v for PV; absorbing would attend over
    # the 576-wide latent for every one of the p(p+1)/2 pairs: decompressing is cheaper.
    p = 1000
    pairs = p * (p + 1) / 2
    matmuls = float(forward_costs(arch, p, 0).flops) - 2.0 * arch.vocab_size * 7168
    weights_per_token = 0
    for layer in range(layers):
        w = layer_weights(arch, layer)
        mlp = (
            w.router + 8 * w.expert_matrices + w.shared_matrices
            if w.num_experts
            else w.mlp_matrices
        )
        weights_per_token += w.attention_matrices + mlp
    decompressed = 2.0 * heads * (nope + rope + v) * pairs * layers
    assert matmuls == pytest.approx(2.0 * weights_per_token * p + decompressed)
    # Decode over c cached tokens: absorbed attention, 2 x heads x (2 rank + rope) per position,
    # and no decompression of the cache.
    c = 4000
    step = float(forward_costs(arch, 1, c).flops) - 2.0 * arch.vocab_size * 7168
    absorbed = 2.0 * heads * (2 * rank + rope) * (c + 1) * layers
    assert step == pytest.approx(2.0 * weights_per_token + absorbed)
    assert absorbed < 2.0 * kv_up * c * layers  # decompressing the cache would cost more


def test_decode_throughput_and_labels_carry_the_precision() -> None:
    from idealized_runtime.cost_model.hardware.estimate import decode_throughput

    llama = get_architecture("llama-3.1-70b")
    int4 = parse_precision("int4", "fp8")
    points = decode_throughput(
        plan_deployment(llama, H100, context_tokens=2048, precision=int4),
        context_tokens=2048,
        batch_sizes=(1, 64),
    )
    assert all(point.num_gpus == 1 for point in points)
    bf16 = decode_throughput(deploy(llama, H100, tp=1), context_tokens=2048, batch_sizes=(1,))
    assert points[0].tokens_per_s > 3 * bf16[0].tokens_per_s
    assert int4.label == "int4-g128 (weight-only), kv fp8"
    assert parse_precision("fp8").label == "fp8 (fp8 compute)"
    assert get_architecture("gpt-oss-20b").precision.label == "mxfp4 experts (weight-only)"  # type: ignore[union-attr]
