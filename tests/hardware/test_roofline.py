"""FLOP/byte counts against hand arithmetic, and monotonicity of the hardware model."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import IDEAL, Architecture, Efficiency, Precision
from idealized_runtime.cost_model.hardware.calibration import shipped_calibration
from idealized_runtime.cost_model.hardware.counts import (
    expected_experts_touched,
    forward_costs,
    request_costs,
)
from idealized_runtime.cost_model.hardware.roofline import (
    decode_step_time,
    hardware_model_alpha,
    hardware_model_beta,
    hardware_model_runtime,
    pass_time,
    to_fitted_cost_model,
    unaligned_factor,
)
from tests.deployments import deploy

FP16 = Precision.from_dtype("float16")


# A small GPT: 2 layers, h = 64, 4 heads of 16, MLP 256, vocab 512, biases, tied embeddings.
GPT = Architecture(
    name="hand-gpt",
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    ffn_hidden_size=256,
    vocab_size=512,
)
# A small GQA + MoE llama: 1 layer, h = 32, 4 query heads / 2 KV heads of 8, SwiGLU MLP 64,
# 4 experts with 2 per token, vocab 100, no biases.
MOE = Architecture(
    name="hand-moe",
    family="mixtral",
    num_layers=1,
    hidden_size=32,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    ffn_hidden_size=64,
    vocab_size=100,
    activation="swiglu",
    norm="rmsnorm",
    position="rotary",
    bias=False,
    num_experts=4,
    experts_per_token=2,
)


def test_gpt_prompt_pass_by_hand() -> None:
    costs = forward_costs(GPT, 10, 0, precision=FP16)
    # Matmul weights per layer: attention 4 x 64 x 64 = 16384, MLP 64 x 256 + 256 x 64 = 32768.
    # 2 FLOPs x 49152 x 10 tokens x 2 layers = 1,966,080.
    # Causal attention: token i attends to i positions, sum 1..10 = 55;
    # QK^T + PV = 4 x 4 heads x 16 dims x 55 x 2 layers = 28,160.
    # LM head on the last token only: 2 x 512 x 64 = 65,536.
    assert float(costs.flops) == 1_966_080 + 28_160 + 65_536
    # Weights: per layer attention 16384 + biases 3 x 64 + 64, MLP 32768 + 256 + 64,
    # two layernorms 2 x 128: 49,984; x 2 layers + LM head 32,768 + final norm 128 = 132,864
    # parameters x 2 bytes (the embedding table is gathered, not read).
    assert float(costs.weight_bytes) == 132_864 * 2
    # KV: 2 (K, V) x 4 heads x 16 dims x 2 bytes = 256 per token-layer, 10 written + 10 read,
    # 2 layers.
    assert float(costs.kv_bytes) == 256 * 20 * 2
    assert float(costs.num_allreduces) == 0


def test_moe_gqa_decode_step_by_hand() -> None:
    costs = forward_costs(MOE, 1, 9, precision=Precision.from_dtype("bfloat16"))
    # Attention matmuls: q 32x32 + k,v 2 x 32x16 + out 32x32 = 3072; one expert 2 x 32x64 +
    # 64x32 = 6144, two active; router 32 x 4 = 128: 2 x (3072 + 12288 + 128) = 30,976.
    # Attention over 9 cached + itself = 10 positions: 4 x 4 heads x 8 x 10 = 1,280.
    # LM head 2 x 100 x 32 = 6,400.
    assert float(costs.flops) == 30_976 + 1_280 + 6_400
    # One token touches 4 x (1 - (1 - 2/4)^1) = 2 experts: dense part (attention 3072, router
    # 128, norms 64) 3,264 + 2 x 6,144 + head 3,200 + final norm 32 = 18,784 parameters.
    assert float(costs.weight_bytes) == 18_784 * 2
    # KV: 2 x 2 KV heads x 8 x 2 bytes = 64 per token; read 10 (9 + itself), write 1.
    assert float(costs.kv_bytes) == 64 * 11
    # Tensor-parallel 2: one KV head per GPU, 2 all-reduces of 32 x 2 bytes.
    split = forward_costs(MOE, 1, 9, precision=Precision.from_dtype("bfloat16"), tp=2)
    assert float(split.kv_bytes) == 32 * 11
    assert float(split.flops) == float(costs.flops) / 2
    assert float(split.num_allreduces) == 2 and float(split.allreduce_bytes) == 64


def test_moe_touches_all_experts_at_large_batch() -> None:
    assert expected_experts_touched(MOE, 1) == pytest.approx(2)
    assert expected_experts_touched(MOE, 512) == pytest.approx(4)


def test_request_costs_sum_decode_steps() -> None:
    costs = request_costs(GPT, 10, 5, precision=FP16)
    steps = [forward_costs(GPT, 1, 10 + i - 1, precision=FP16) for i in range(1, 5)]
    assert float(costs.decode.flops) == pytest.approx(sum(float(s.flops) for s in steps))
    assert float(costs.decode.kv_bytes) == pytest.approx(sum(float(s.kv_bytes) for s in steps))


def test_ideal_decode_is_weights_over_bandwidth() -> None:
    arch, hw = get_architecture("llama-3.1-8b"), get_hardware("h100-sxm")
    beta = float(hardware_model_beta(deploy(arch, hw), 1))
    weights = float(forward_costs(arch, 1, 1).weight_bytes)
    assert weights / (hw.memory_bandwidth_gbps * 1e9) == pytest.approx(beta, rel=0.02)


def test_runtime_is_alpha_plus_decode_steps() -> None:
    arch, hw = get_architecture("mistral-7b"), get_hardware("a100-80gb")
    p, o = 300, 40
    steps = sum(float(hardware_model_beta(deploy(arch, hw), p + i - 1)) for i in range(1, o))
    expected = float(hardware_model_alpha(deploy(arch, hw), p)) + steps
    assert float(hardware_model_runtime(deploy(arch, hw), p, o)) == pytest.approx(
        expected, rel=1e-9
    )


def test_bad_tensor_parallel_size() -> None:
    with pytest.raises(InputError):
        forward_costs(get_architecture("gpt2-124m"), 1, 0, tp=8)
    with pytest.raises(InputError):
        Efficiency(compute=1.5)


def test_fitted_cost_model_matches_roofline() -> None:
    from idealized_runtime.cost_model.fitting.evaluate import predict_runtime as evaluate

    arch, hw = get_architecture("llama-3.1-8b"), get_hardware("h100-sxm")
    fit = to_fitted_cost_model(deploy(arch, hw))
    assert fit.method == "analytic"
    for p, o in [(128, 1), (512, 64), (1920, 200)]:
        direct = float(hardware_model_runtime(deploy(arch, hw), p, o))
        assert float(evaluate(fit, p, o)) == pytest.approx(direct, rel=0.02)


CALIBRATED = shipped_calibration().efficiency
# An engine that runs the last prompt token in the first decode step (TurboMind v0.1).
HELD_BACK = replace(CALIBRATED, last_prompt_token_in_decode=True)
EFFICIENCIES = st.sampled_from([IDEAL, CALIBRATED, HELD_BACK])
ARCHS = st.sampled_from(["llama-3.1-8b", "mixtral-8x7b", "megatron-gptj-6b", "qwen2.5-7b"])
HARDWARE = st.sampled_from(["a100-80gb", "h100-sxm", "l4", "mi300x"])


@settings(max_examples=40, deadline=None)
@given(
    arch=ARCHS,
    hw=HARDWARE,
    eff=EFFICIENCIES,
    p=st.integers(1, 8000),
    o=st.integers(1, 2000),
    dp=st.integers(1, 500),
    do=st.integers(1, 500),
)
def test_runtime_monotone_in_tokens(arch, hw, eff, p, o, dp, do) -> None:
    a, h = get_architecture(arch), get_hardware(hw)
    base = float(hardware_model_runtime(deploy(a, h, efficiency=eff), p, o))
    assert float(hardware_model_runtime(deploy(a, h, efficiency=eff), p + dp, o)) > base
    assert float(hardware_model_runtime(deploy(a, h, efficiency=eff), p, o + do)) > base


@settings(max_examples=40, deadline=None)
@given(
    eff=EFFICIENCIES,
    hw=HARDWARE,
    layers=st.integers(1, 80),
    extra_layers=st.integers(1, 40),
    width=st.sampled_from([512, 1024, 2048, 4096]),
    p=st.integers(1, 4000),
    o=st.integers(1, 500),
)
def test_runtime_monotone_in_model_size(eff, hw, layers, extra_layers, width, p, o) -> None:
    def arch(num_layers: int, hidden: int) -> Architecture:
        return Architecture(
            name="probe",
            num_layers=num_layers,
            hidden_size=hidden,
            num_heads=hidden // 64,
            ffn_hidden_size=4 * hidden,
            vocab_size=32000,
        )

    h = get_hardware(hw)
    base = float(hardware_model_runtime(deploy(arch(layers, width), h, efficiency=eff), p, o))
    deeper = float(
        hardware_model_runtime(
            deploy(arch(layers + extra_layers, width), h, efficiency=eff),
            p,
            o,
        )
    )
    wider = float(hardware_model_runtime(deploy(arch(layers, 2 * width), h, efficiency=eff), p, o))
    assert deeper > base and wider > base


def test_vectorized_runtime_matches_scalar() -> None:
    arch, hw = get_architecture("llama-3.1-8b"), get_hardware("h100-sxm")
    p = np.array([1, 100, 1000])
    o = np.array([1, 10, 100])
    many = hardware_model_runtime(deploy(arch, hw, efficiency=CALIBRATED), p, o)
    one = [
        float(hardware_model_runtime(deploy(arch, hw, efficiency=CALIBRATED), a, b))
        for a, b in zip(p, o, strict=True)
    ]
    np.testing.assert_allclose(many, one)


def _mlp_probe(ffn: int, activation: str) -> Architecture:
    return Architecture(
        name="probe",
        num_layers=4,
        hidden_size=1024,
        num_heads=16,
        ffn_hidden_size=ffn,
        vocab_size=32000,
        activation=activation,
    )


def test_unaligned_ffn_width_slows_the_prompt_at_equal_flops() -> None:
    # A gated MLP of width 4104 (a multiple of 8) and a plain one of width 6156 (not: 12312
    # bytes in fp16, off 16-byte alignment) multiply through the same 3 x 1024 x 4104 weights.
    aligned, unaligned = _mlp_probe(4104, "swiglu"), _mlp_probe(6156, "gelu")
    a100 = get_hardware("a100-80gb")
    p = np.array([512.0, 2048.0])
    cost_a = forward_costs(aligned, p, precision=FP16)
    cost_u = forward_costs(unaligned, p, precision=FP16)
    np.testing.assert_allclose(cost_a.flops, cost_u.flops)
    assert np.all(cost_a.unaligned_flops == 0)
    mlp_flops = 2.0 * 3 * 1024 * 4104 * p * 4
    np.testing.assert_allclose(cost_u.unaligned_flops, mlp_flops)
    slow = hardware_model_alpha(
        deploy(unaligned, a100, precision=FP16),
        p,
    )
    fast = hardware_model_alpha(
        deploy(aligned, a100, precision=FP16),
        p,
    )
    assert np.all(slow > 1.5 * fast)  # compute-bound: the MLP's FLOPs run 4x slower
    # Only the unaligned GEMMs slow down, at the datasheet ratio 78 / 312 TFLOP/s.
    rate = a100.peak_dense_tflops * 1e12
    expected = (cost_u.flops - mlp_flops) / rate + mlp_flops / (rate * 0.25)
    compute = pass_time(cost_u, a100, num_layers=unaligned.num_layers).compute_s
    np.testing.assert_allclose(compute, expected)


def test_unaligned_factor_is_one_when_aligned() -> None:
    a100 = get_hardware("a100-80gb")
    assert unaligned_factor(a100) == pytest.approx(78 / 312)
    assert unaligned_factor(get_hardware("mi300x")) == 1.0  # figure not listed: no penalty
    # Aligned shapes: no unaligned FLOPs, so the factor changes nothing.
    arch = get_architecture("megatron-gptj-6b")
    costs = forward_costs(arch, np.array([1.0, 128.0, 1920.0]), precision=FP16)
    assert np.all(costs.unaligned_flops == 0)
    no_penalty = a100.model_copy(update={"unaligned_matmul_tflops": None})
    for eff in (IDEAL, CALIBRATED):
        np.testing.assert_allclose(
            hardware_model_alpha(
                deploy(
                    arch,
                    a100,
                    efficiency=eff,
                    precision=FP16,
                ),
                [1, 512, 1920],
            ),
            hardware_model_alpha(
                deploy(
                    arch,
                    no_penalty,
                    efficiency=eff,
                    precision=FP16,
                ),
                [1, 512, 1920],
            ),
        )


def test_yalm_ffn_is_the_unaligned_gemm() -> None:
    yalm = get_architecture("megatron-yalm")  # ffn 27308 / tp 4 = 6827 per GPU
    costs = forward_costs(yalm, 1024.0, precision=FP16, tp=4)
    h, f = yalm.hidden_size, yalm.ffn_hidden_size
    mlp = 2.0 * 2 * h * f * 1024 * yalm.num_layers / 4
    assert float(costs.unaligned_flops) == pytest.approx(mlp)
    # At tp 1 the whole width (27308 x 2 = 54616 bytes) is off alignment too.
    assert float(forward_costs(yalm, 1024.0, precision=FP16, tp=1).unaligned_flops) > 0


def test_held_back_last_prompt_token_costs_a_shorter_pass_and_a_decode_step() -> None:
    arch, hw = get_architecture("llama-2-7b"), get_hardware("a100-80gb")
    eff = replace(CALIBRATED, compute_memory_serialization=0.5, gemm_half_tokens=32.0)
    held = replace(eff, last_prompt_token_in_decode=True)
    prompts = np.array([1.0, 2.0, 128.0, 2048.0])
    layers = {"num_layers": arch.num_layers, "efficiency": eff}
    # The prompt pass without its last token (none for a one-token prompt: masked below).
    head = pass_time(forward_costs(arch, np.maximum(prompts - 1, 1.0), 0.0), hw, **layers).total_s
    step = decode_step_time(deploy(arch, hw, efficiency=eff), prompts - 1).total_s
    expected = np.where(prompts > 1, head, 0.0) + step
    np.testing.assert_allclose(
        hardware_model_alpha(deploy(arch, hw, efficiency=held), prompts),
        expected,
    )
    # A one-token prompt is one pass either way; longer ones pay a whole extra pass.
    whole = hardware_model_alpha(deploy(arch, hw, efficiency=eff), prompts)
    assert hardware_model_alpha(deploy(arch, hw, efficiency=held), 1) == pytest.approx(whole[0])
    assert np.all(hardware_model_alpha(deploy(arch, hw, efficiency=held), prompts[1:]) > whole[1:])
    # The decode steps after the first token are the same steps.
    o = 64
    np.testing.assert_allclose(
        hardware_model_runtime(deploy(arch, hw, efficiency=held), prompts, o)
        - hardware_model_alpha(deploy(arch, hw, efficiency=held), prompts),
        hardware_model_runtime(deploy(arch, hw, efficiency=eff), prompts, o) - whole,
    )


@pytest.mark.parametrize("flag", ["last_prompt_token_in_decode", "ring_allreduce"])
def test_efficiency_round_trips_its_flags_and_refuses_a_non_boolean(flag: str) -> None:
    flagged = replace(CALIBRATED, **{flag: True})
    assert Efficiency.from_dict(flagged.to_dict()) == flagged
    assert getattr(Efficiency.from_dict({"compute": 0.5}), flag) is False
    with pytest.raises(InputError, match=f"{flag} must be true or false"):
        Efficiency.from_dict({flag: "yes"})


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_ring_allreduce_pays_its_latency_once_per_ring_step(tp: int) -> None:
    # NCCL's ring passes each chunk on tp - 1 times; a one-shot kernel reads every peer at once.
    arch, a100 = get_architecture("llama-2-70b"), get_hardware("a100-80gb")
    one_shot = Efficiency(interconnect=0.5, allreduce_latency_s=20e-6)
    ring = replace(one_shot, ring_allreduce=True)
    costs = forward_costs(arch, 1.0, 100.0, tp=tp)
    kw = {"num_layers": arch.num_layers, "tp": tp}
    once = pass_time(costs, a100, **kw, efficiency=one_shot)
    around = pass_time(costs, a100, **kw, efficiency=ring)
    extra_steps = max(tp - 2, 0)  # at tp = 2 the ring is one step: the two agree
    assert float(around.communication_s - once.communication_s) == pytest.approx(
        float(costs.num_allreduces) * extra_steps * 20e-6, abs=1e-15
    )
    assert float(around.total_s - once.total_s) == pytest.approx(
        float(around.communication_s - once.communication_s), abs=1e-12
    )
    if tp == 1:
        assert float(around.communication_s) == float(once.communication_s) == 0.0
