"""The engine stacks read the measured kernel table each engine serves with: MXFP4 experts with
MXFP8 activations on Blackwell (TensorRT-LLM, SGLang), SGLang's triton_kernels MXFP4 experts on
Hopper (vLLM's table times them), fp8 GEMMs whose rate grows with the weight's width. Database
cells are pinned as literals (the shipped fits are checked against them without the calibration
extra); where aiconfigurator-core is installed, also against the parquet."""

from __future__ import annotations

import json

import numpy as np
import pytest

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.types import Deployment
from idealized_runtime.cost_model.hardware.engines.catalog import get_engine
from idealized_runtime.cost_model.hardware.engines.kernels import GpuKernels, OpFit
from idealized_runtime.cost_model.hardware.engines.step import kernel_format

B200, H200 = get_hardware("b200"), get_hardware("h200")
GPT_OSS_EXPERTS = {"hidden": 2880, "inter": 2880, "experts": 128, "topk": 4}
# b200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet, gpt-oss-120b's experts, MoE TP 1, EP 1,
# power_law_1.01 routing, fastest kernel (milliseconds) by tokens.
TRTLLM_B200_W4A8_MXFP4_MXFP8_MS = {8: 0.081184, 32: 0.152627, 64: 0.207437}
TRTLLM_B200_W4A16_MXFP4_MS = {8: 0.323251, 32: 0.617830, 64: 0.890522}
# b200_sxm/moe/sglang/0.5.14, the same TensorRT-LLM-gen W4A8 kernels through FlashInfer
# (flashinfer_trtllm), same shape and routing: what TensorRT-LLM's experts read (its own table
# measures MoE TP 1 only; within 4-10% of these there).
SGLANG_B200_TRTLLM_GEN_W4A8_MS = {8: 0.084917, 32: 0.154083, 64: 0.226843}
# b200_sxm/moe/vllm/0.24.0, FlashInfer's MXFP4 x BF16 gpt-oss path, same shape and routing.
VLLM_B200_W4A16_MXFP4_MS = {8: 0.114675, 32: 0.198195, 128: 0.376653}
# h100_sxm/moe/sglang/0.5.14 (sglang_fused_moe_triton) and h100_sxm/moe/vllm/0.24.0
# (OpenAI triton_kernels, what SGLang serves gpt-oss with on Hopper), same shape and routing.
SGLANG_H100_FUSED_TRITON_MXFP4_MS = {32: 1.134}
VLLM_H100_TRITON_KERNELS_MXFP4_MS = {8: 0.200288, 32: 0.383373}
# h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet, fp8 (CutlassFP8ScaledMMLinearKernel), (m, n, k).
VLLM_H200_FP8_GEMM_MS = {
    (2048, 6144, 4096): 0.08874,
    (2048, 16384, 4096): 0.18646,
    (2048, 4096, 16384): 0.25351,
    (8192, 6144, 4096): 0.35195,
    (2048, 4096, 4096): 0.07078,
}


def _gpt_oss_moe_ms(kernels: GpuKernels, hardware, tokens: list[int]) -> np.ndarray:  # type: ignore[no-untyped-def]
    arch = get_architecture("gpt-oss-120b")
    fmt = kernel_format(arch.precision, experts=True)  # type: ignore[arg-type]
    assert fmt == "mxfp4"
    seconds = kernels.moe_time(
        hardware, np.array(tokens, dtype=np.float64), ep=1, moe_tp=1, fmt=fmt, **GPT_OSS_EXPERTS
    )
    return seconds * 1e3


@pytest.mark.parametrize("engine", ["tensorrt-llm", "sglang"])
@pytest.mark.parametrize("gpu", ["b200", "b300", "gb200"])
def test_blackwell_engines_serve_mxfp4_experts_with_mxfp8_activations(
    engine: str, gpu: str
) -> None:
    kernels = get_engine(engine).gpus[gpu]
    assert kernels.moe_served == {"mxfp4": "mxfp4_mxfp8"}
    assert kernels.moe_fit("mxfp4")[1] == "mxfp4_mxfp8"
    assert kernels.errors["moe_mxfp4_mxfp8"]["n"] > 0
    # The checkpoint's own W4A16 kernels stay measured beside them (not read for serving).
    assert "mxfp4" in kernels.moe and "mxfp4_mxfp8" in kernels.moe


def test_mxfp4_experts_at_decode_batches_read_the_served_cell() -> None:
    tokens = sorted(SGLANG_B200_TRTLLM_GEN_W4A8_MS)
    ours = _gpt_oss_moe_ms(get_engine("tensorrt-llm").gpus["b200"], B200, tokens)
    for t, ms in zip(tokens, ours, strict=True):
        served, w4a16 = SGLANG_B200_TRTLLM_GEN_W4A8_MS[t], TRTLLM_B200_W4A16_MXFP4_MS[t]
        assert ms == pytest.approx(served, rel=1e-5), (t, ms, served)  # the measured curve
        assert ms == pytest.approx(TRTLLM_B200_W4A8_MXFP4_MXFP8_MS[t], rel=0.12)  # its own
        assert ms < w4a16 / 2.5, (t, ms, w4a16)  # not the W4A16 path (4-5x slower here)


@pytest.mark.parametrize(
    ("engine", "gpu"),
    [("vllm", "b200"), ("vllm", "h200"), ("sglang", "h200"), ("tensorrt-llm", "h200")],
)
def test_vllm_and_hopper_keep_the_checkpoints_own_mxfp4_kernels(engine: str, gpu: str) -> None:
    kernels = get_engine(engine).gpus[gpu]
    assert kernels.moe_served == {}
    assert kernels.moe_fit("mxfp4")[1] == "mxfp4"


def test_sglang_on_hopper_times_mxfp4_experts_on_the_triton_kernels_it_serves_with() -> None:
    kernels = get_engine("sglang").gpus["h100-sxm"]
    assert "h100_sxm/moe/vllm/0.24.0/moe_perf.parquet" in kernels.files
    tokens = sorted(VLLM_H100_TRITON_KERNELS_MXFP4_MS)
    ours = _gpt_oss_moe_ms(kernels, get_hardware("h100-sxm"), tokens)
    for t, ms in zip(tokens, ours, strict=True):
        assert ms == pytest.approx(VLLM_H100_TRITON_KERNELS_MXFP4_MS[t], rel=1e-3), (t, ms)
    assert ours[-1] < SGLANG_H100_FUSED_TRITON_MXFP4_MS[32] / 2  # not the generic fused MoE


def test_mxfp4_experts_read_their_measured_curve_at_decode_batches() -> None:
    """The MXFP4 formula over every row of the format (other checkpoints' Marlin kernels
    among them) was 1.7x slow for gpt-oss's FlashInfer path on vLLM B200 at 32 tokens."""
    from dataclasses import replace

    kernels = get_engine("vllm").gpus["b200"]
    tokens = sorted(VLLM_B200_W4A16_MXFP4_MS)
    ours = _gpt_oss_moe_ms(kernels, B200, tokens)
    for t, ms in zip(tokens, ours, strict=True):
        assert ms == pytest.approx(VLLM_B200_W4A16_MXFP4_MS[t], rel=1e-6)
    formula = _gpt_oss_moe_ms(replace(kernels, moe_curves={}), B200, [32])
    assert formula[0] > 1.4 * VLLM_B200_W4A16_MXFP4_MS[32]
    # Other formats read their measured curves at decode sizes too (DeepSeek's fp8 experts on
    # SGLang H200; tests/hardware/test_engine_moe_tables.py pins the rows).
    sglang = get_engine("sglang").gpus["h200"]
    shape = dict(hidden=7168, inter=2048, experts=256, topk=8, ep=1, moe_tp=8, fmt="fp8_block")
    curve = sglang.moe_curves["fp8_block/7168/2048/256/8/8/1"]
    assert sglang.moe_time(H200, 64.0, **shape) == pytest.approx(float(curve.at(64.0)), rel=1e-12)


def test_served_formats_round_trip_and_stand_in_where_unmeasured() -> None:
    kernels = get_engine("tensorrt-llm").gpus["b200"]
    again = GpuKernels.from_json("b200", json.loads(json.dumps(kernels.to_json())))
    assert again.moe_served == kernels.moe_served
    assert again.to_json() == kernels.to_json()
    # A served format the fits lack falls back to the checkpoint's own, then its stand-ins.
    from dataclasses import replace

    lacking = replace(kernels, moe={k: v for k, v in kernels.moe.items() if k != "mxfp4_mxfp8"})
    assert lacking.moe_fit("mxfp4")[1] == "mxfp4"


def test_gpt_oss_decode_step_on_tensorrt_llm_b200_is_mostly_the_served_experts() -> None:
    """gpt-oss-120b at TP 2, 32 decoding sequences: the step reads the MXFP8-activation
    experts (before: the W4A16 table, 16 ms TPOT where 5.3 ms was measured)."""
    arch = get_architecture("gpt-oss-120b")
    deployment = Deployment(architecture=arch, hardware=B200, tp=2, precision=arch.precision)
    step = get_engine("tensorrt-llm").step_model(deployment)
    seconds = float(step.seconds(32, 32 * 1537, 0, 0, 0))
    assert 3.5e-3 < seconds < 8e-3


def test_fp8_gemms_on_vllm_read_within_30_percent_of_their_cells() -> None:
    """Llama-sized fp8 GEMMs: 23-40% slow with the rate growing in M alone, 10-27% now."""
    kernels = get_engine("vllm").gpus["h200"]
    assert kernels.errors["gemm_fp8"]["median"] <= 0.15  # held out (was 30% with M alone)
    fit, fmt = kernels.gemm_fit("fp8")
    assert fmt == "fp8" and fit.half_n > 0 and fit.half_k > 0
    for (m, n, k), ms in VLLM_H200_FP8_GEMM_MS.items():
        ours = float(kernels.gemm_time(H200, m, n, k, "fp8")) * 1e3
        assert abs(ours / ms - 1.0) < 0.3, ((m, n, k), ours, ms)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm"])
def test_each_gemm_fit_keeps_or_improves_its_held_out_errors(engine: str) -> None:
    """The N- and K-dependent rate is taken only where the held-out shapes say so; every
    engine's fp8 GEMMs are then within 20% median on every GPU."""
    for kernels in get_engine(engine).gpus.values():
        for fit in kernels.gemm.values():
            assert (fit.half_n > 0) == (fit.half_k > 0)
        assert kernels.errors["gemm_fp8"]["median"] <= 0.2, (engine, kernels.gpu)


def test_a_fit_without_width_factors_keeps_its_file_form_and_rate() -> None:
    plain = OpFit(latency_s=1e-6, compute=0.8, half=16.0)
    assert "half_n" not in plain.to_json() and "half_k" not in plain.to_json()
    assert float(plain.shape_efficiency(4096.0, 4096.0)) == 1.0
    shaped = OpFit(latency_s=1e-6, compute=0.8, half=16.0, half_n=1024.0, half_k=4096.0)
    assert float(shaped.shape_efficiency(1024.0, 4096.0)) == pytest.approx(0.25)
    assert OpFit.from_json(json.loads(json.dumps(shaped.to_json()))) == shaped


def test_pinned_cells_are_the_databases() -> None:
    """The literals above are the kernel database's cells (needs the calibration extra)."""
    pytest.importorskip("aiconfigurator_core")
    from idealized_runtime.cost_model.hardware.engines.kernel_fit import database_root

    pandas = pytest.importorskip("pandas")
    root = database_root()
    moe = pandas.read_parquet(root / "b200_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet")
    moe = moe[
        (moe["hidden_size"] == 2880)
        & (moe["inter_size"] == 2880)
        & (moe["num_experts"] == 128)
        & (moe["topk"] == 4)
        & (moe["moe_tp_size"] == 1)
        & (moe["moe_ep_size"] == 1)
        & (moe["distribution"] == "power_law_1.01")
    ]
    for dtype, cells in (
        ("w4a8_mxfp4_mxfp8", TRTLLM_B200_W4A8_MXFP4_MXFP8_MS),
        ("w4a16_mxfp4", TRTLLM_B200_W4A16_MXFP4_MS),
    ):
        for tokens, ms in cells.items():
            rows = moe[(moe["moe_dtype"] == dtype) & (moe["num_tokens"] == tokens)]
            assert float(rows["latency"].min()) == pytest.approx(ms, abs=1e-6)
    for path, cells, kernel, dtype in (
        ("b200_sxm/moe/vllm/0.24.0", VLLM_B200_W4A16_MXFP4_MS, "gptossmxfp4moe", "w4a16_mxfp4"),
        ("h100_sxm/moe/vllm/0.24.0", VLLM_H100_TRITON_KERNELS_MXFP4_MS, "oaitriton",
         "w4a16_mxfp4"),
        ("h100_sxm/moe/sglang/0.5.14", SGLANG_H100_FUSED_TRITON_MXFP4_MS, "fused_moe_triton",
         "w4a16_mxfp4"),
        ("b200_sxm/moe/sglang/0.5.14", SGLANG_B200_TRTLLM_GEN_W4A8_MS, "flashinfer_trtllm",
         "w4a8_mxfp4_mxfp8"),
    ):  # fmt: skip
        table = pandas.read_parquet(root / path / "moe_perf.parquet")
        table = table[
            (table["hidden_size"] == 2880)
            & (table["num_experts"] == 128)
            & (table["moe_tp_size"] == 1)
            & (table["moe_ep_size"] == 1)
            & (table["distribution"] == "power_law_1.01")
            & (table["moe_dtype"] == dtype)
            & table["kernel_source"].str.contains(kernel)
        ]
        for tokens, ms in cells.items():
            cell = table[table["num_tokens"] == tokens]["latency"].min()
            assert float(cell) == pytest.approx(ms, abs=1e-3)
    gemm = pandas.read_parquet(root / "h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet")
    gemm = gemm[gemm["gemm_dtype"] == "fp8"]
    for (m, n, k), ms in VLLM_H200_FP8_GEMM_MS.items():
        rows = gemm[(gemm["m"] == m) & (gemm["n"] == n) & (gemm["k"] == k)]
        assert float(rows["latency"].min()) == pytest.approx(ms, abs=1e-5)


def test_sliding_window_layers_attend_to_the_window_only() -> None:
    """gpt-oss: every other layer attends to the last 128 positions. Up to the window the
    step costs what all-full attention would; beyond it only the 18 full layers grow."""
    arch = get_architecture("gpt-oss-120b")
    assert arch.sliding_window == 128 and arch.num_sliding_layers() == 18
    full = arch.model_copy(update={"layer_pattern": ("full",)})
    engine = get_engine("vllm")

    def step(architecture, context: float) -> float:  # type: ignore[no-untyped-def]
        deployment = Deployment(architecture=architecture, hardware=B200, precision=arch.precision)
        return float(engine.step_model(deployment).seconds(32, 32 * (context + 1), 0, 0, 0))

    assert step(arch, 100) == pytest.approx(step(full, 100), rel=1e-12)
    assert step(arch, 8000) < step(full, 8000)
    grown_sliding = step(arch, 16000) - step(arch, 8000)
    grown_full = step(full, 16000) - step(full, 8000)
    assert grown_sliding == pytest.approx(grown_full / 2, rel=1e-9)
    # A prompt chunk likewise: its sliding layers attend to at most the window per token.
    deployment = Deployment(architecture=arch, hardware=B200, precision=arch.precision)
    model = engine.step_model(deployment)
    long = float(model.seconds(0, 0, 8192, 8192 * 8193 / 2, 1))
    all_full = Deployment(architecture=full, hardware=B200, precision=arch.precision)
    assert long < float(engine.step_model(all_full).seconds(0, 0, 8192, 8192 * 8193 / 2, 1))
