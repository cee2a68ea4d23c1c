"""MoE layers of a measured expert layout read the engine's measured rows at every token count,
decode batches included; each engine reads the table of the kernels it serves with (TensorRT-LLM
on Blackwell: the TensorRT-LLM-gen block-scaled fp8 experts; vLLM: DeepGEMM's block-scaled fp8
GEMMs). Database cells are pinned as literals (the shipped engine files are checked against them
without the calibration extra); where aiconfigurator-core is installed, also against the parquet
files."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from idealized_runtime.core.catalog import get_hardware
from idealized_runtime.cost_model.hardware.engines.catalog import get_engine
from idealized_runtime.cost_model.hardware.engines.kernels import GpuKernels, moe_layout

B200, H200 = get_hardware("b200"), get_hardware("h200")
DEEPSEEK = (7168, 2048, 256, 8)  # hidden, expert width, experts, top-k
QWEN3_235B = (4096, 1536, 128, 8)
GPT_OSS_120B = (2880, 2880, 128, 4)
# SGLang's B200 cells of the TensorRT-LLM-gen MXFP4 x MXFP8 experts (gpt-oss-120b), MoE TP 8.
GPT_OSS_W4A8_TP8_MS = {1: 0.016523, 4: 0.022892, 16: 0.039831, 64: 0.060748, 256: 0.086056}
# (engine, our GPU, format, layout, MoE TP, EP): the database file, the dtype, a kernel_source
# substring (None: every kernel, the fastest taken) and the fastest power_law_1.01 cell by
# tokens, milliseconds.
MEASURED: dict[tuple, tuple[str, str, str | None, dict[int, float]]] = {
    ("tensorrt-llm", "h200", "fp8_block", DEEPSEEK, 8, 1): (
        "h200_sxm/moe/trtllm/1.3.0rc20", "fp8_block", None,
        {1: 0.099731, 4: 0.146816, 16: 0.237158, 64: 0.408589, 256: 0.59456},
    ),
    ("tensorrt-llm", "b200", "fp8_block", DEEPSEEK, 8, 1): (
        "b200_sxm/moe/sglang/0.5.14", "fp8_block", "flashinfer_trtllm",
        {1: 0.035304, 4: 0.049692, 16: 0.10215, 64: 0.180974, 256: 0.266212},
    ),
    ("vllm", "h200", "bf16", QWEN3_235B, 8, 1): (
        "h200_sxm/moe/vllm/0.24.0", "bfloat16", None,
        {1: 0.032346, 4: 0.059834, 16: 0.103021, 64: 0.159411, 256: 0.22121},
    ),
    ("vllm", "h200", "fp8_block", QWEN3_235B, 4, 1): (
        "h200_sxm/moe/vllm/0.24.0", "fp8_block", None,
        {1: 0.037088, 4: 0.071123, 16: 0.120205, 64: 0.186694, 256: 0.238317},
    ),
    ("sglang", "h200", "bf16", QWEN3_235B, 8, 1): (
        "h200_sxm/moe/sglang/0.5.14", "bfloat16", None,
        {1: 0.026963, 4: 0.056344, 16: 0.097445, 64: 0.149066, 256: 0.211698},
    ),
    ("tensorrt-llm", "b200", "nvfp4", DEEPSEEK, 1, 8): (
        "b200_sxm/moe/trtllm/1.3.0rc20", "nvfp4", None,
        {1: 0.03575, 4: 0.048499, 16: 0.08359, 64: 0.1128, 256: 0.157005},
    ),
    ("tensorrt-llm", "b200", "nvfp4", DEEPSEEK, 4, 1): (
        "b200_sxm/moe/trtllm/1.3.0rc20", "nvfp4", None,
        {1: 0.020909, 4: 0.047846, 16: 0.091744, 64: 0.174912, 256: 0.212986},
    ),
    ("tensorrt-llm", "b200", "mxfp4", GPT_OSS_120B, 8, 1): (
        "b200_sxm/moe/sglang/0.5.14", "w4a8_mxfp4_mxfp8", "flashinfer_trtllm",
        GPT_OSS_W4A8_TP8_MS,
    ),
    ("vllm", "b200", "mxfp4_mxfp8", GPT_OSS_120B, 8, 1): (
        "b200_sxm/moe/sglang/0.5.14", "w4a8_mxfp4_mxfp8", "flashinfer_trtllm",
        GPT_OSS_W4A8_TP8_MS,
    ),
    ("sglang", "b200", "nvfp4", DEEPSEEK, 1, 8): (
        "b200_sxm/moe/sglang/0.5.14", "nvfp4", None,
        {1: 0.036346, 4: 0.043147, 16: 0.070367, 64: 0.127354, 256: 0.139557},
    ),
}  # fmt: skip
# TensorRT-LLM's own B200 table (DEEPGEMM backend) at the same layout: not what it serves.
TRTLLM_B200_DEEPGEMM_MS = {1: 0.097658, 4: 0.133466, 16: 0.22016, 64: 0.349197}
# Block-scaled fp8 GEMMs on H200 (m, n, k): SGLang's DeepGEMM cell and vLLM's own (its floor).
SGLANG_H200_FP8_BLOCK_GEMM_MS = {(64, 4096, 4096): 0.011226, (8192, 16384, 4096): 1.019231}
VLLM_H200_FP8_BLOCK_GEMM_MS = {(64, 4096, 4096): 0.084043, (8192, 16384, 4096): 0.854571}


def _moe_ms(kernels: GpuKernels, gpu, fmt: str, layout, moe_tp: int, ep: int, tokens) -> np.ndarray:  # type: ignore[no-untyped-def]
    hidden, inter, experts, topk = layout
    seconds = kernels.moe_time(
        gpu, np.asarray(tokens, dtype=np.float64), hidden=hidden, inter=inter,
        experts=experts, topk=topk, ep=ep, moe_tp=moe_tp, fmt=fmt,
    )  # fmt: skip
    return np.asarray(seconds) * 1e3


def _case_id(case: tuple) -> str:
    engine, gpu, fmt, _, moe_tp, ep = case
    return f"{engine}-{gpu}-{fmt}-tp{moe_tp}ep{ep}"


@pytest.mark.parametrize("case", list(MEASURED), ids=_case_id)
def test_decode_sized_moe_reads_equal_the_measured_rows(case: tuple) -> None:
    engine, gpu, fmt, layout, moe_tp, ep = case
    cells = MEASURED[case][3]
    kernels = get_engine(engine).gpus[gpu]
    hardware = get_hardware(gpu)
    tokens = sorted(cells)
    ours = _moe_ms(kernels, hardware, fmt, layout, moe_tp, ep, tokens)
    for t, ms in zip(tokens, ours, strict=True):
        assert ms == pytest.approx(cells[t], rel=1e-5), (t, ms, cells[t])
    # Between measured counts: log-log between the neighbouring rows.
    between = float(_moe_ms(kernels, hardware, fmt, layout, moe_tp, ep, [8.0])[0])
    assert cells[4] < between < cells[16]
    assert between == pytest.approx((cells[4] * cells[16]) ** 0.5, rel=0.15)


def test_tensorrt_llm_moe_tp_without_ep_is_no_longer_read_under_its_table() -> None:
    """The one formula fitted on every layout reads every TP / EP split alike at equal bytes
    and FLOPs: DeepSeek's experts at MoE TP 8 on H200 came out 16-43% under the measured rows
    at 1-512 tokens (the same work at EP 8 runs in 0.4-0.8 of the time at 1-16 tokens)."""
    kernels = get_engine("tensorrt-llm").gpus["h200"]
    cells = MEASURED[("tensorrt-llm", "h200", "fp8_block", DEEPSEEK, 8, 1)][3]
    tokens = [1, 4, 16]
    formula = _moe_ms(replace(kernels, moe_curves={}), H200, "fp8_block", DEEPSEEK, 8, 1, tokens)
    ours = _moe_ms(kernels, H200, "fp8_block", DEEPSEEK, 8, 1, tokens)
    for t, f, o in zip(tokens, formula, ours, strict=True):
        assert f < 0.85 * cells[t] and o == pytest.approx(cells[t], rel=1e-6), (t, f, o)
    ep8 = _moe_ms(kernels, H200, "fp8_block", DEEPSEEK, 1, 8, tokens)
    assert all(ep8 < 0.8 * ours)  # the split matters: 32 whole experts against 256 slices


def test_tensorrt_llm_on_blackwell_serves_block_fp8_experts_with_trtllm_gen_kernels() -> None:
    for gpu in ("b200", "b300", "gb200"):
        kernels = get_engine("tensorrt-llm").gpus[gpu]
        folder = {"b200": "b200_sxm", "b300": "b300_sxm", "gb200": "gb200"}[gpu]
        assert f"{folder}/moe/sglang/0.5.14/moe_perf.parquet" in kernels.files
    ours = _moe_ms(get_engine("tensorrt-llm").gpus["b200"], B200, "fp8_block", DEEPSEEK, 8, 1,
                   sorted(TRTLLM_B200_DEEPGEMM_MS))  # fmt: skip
    for ms, deepgemm in zip(ours, TRTLLM_B200_DEEPGEMM_MS.values(), strict=True):
        assert ms < 0.6 * deepgemm  # not the DEEPGEMM backend's rows (1.9-2.8x slower)
    # Hopper keeps TensorRT-LLM's own CUTLASS table.
    assert not any("/sglang/" in f for f in get_engine("tensorrt-llm").gpus["h200"].files)


def test_mxfp4_experts_with_mxfp8_activations_read_the_trtllm_gen_rows_on_blackwell() -> None:
    """TensorRT-LLM (its TRTLLM MoE backend) and vLLM (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8)
    serve gpt-oss's experts on Blackwell with the TensorRT-LLM-gen W4A8 kernels, which SGLang's
    table times at every split; TensorRT-LLM's own table at MoE TP 1 agrees within 4%. vLLM's
    default (MXFP4 x BF16) stays on its own table."""
    tokens = [4, 64]
    tp1 = _moe_ms(get_engine("tensorrt-llm").gpus["b200"], B200, "mxfp4", GPT_OSS_120B, 1, 1,
                  tokens)  # fmt: skip
    trtllm_own_tp1_ms = [0.051, 0.207]  # moe_torch_flow, power_law_1.01
    assert tp1 == pytest.approx(trtllm_own_tp1_ms, rel=0.12)
    vllm = get_engine("vllm").gpus["b200"]
    bf16_activations = _moe_ms(vllm, B200, "mxfp4", GPT_OSS_120B, 8, 1, tokens)
    mxfp8 = _moe_ms(vllm, B200, "mxfp4_mxfp8", GPT_OSS_120B, 8, 1, tokens)
    assert all(mxfp8 < bf16_activations)


def test_vllm_block_fp8_gemms_read_deepgemm_not_the_tables_floor() -> None:
    """vLLM 0.24's block-scaled fp8 GEMM rows sit on a floor (60-90 us on Hopper, about
    180-450 us on Blackwell) at every shape up to M = 1024; the GEMMs read SGLang's DeepGEMM
    table instead, as fast as vLLM's own per-tensor fp8 GEMMs at decode sizes."""
    for gpu, kernels in get_engine("vllm").gpus.items():
        assert any(f.endswith("/gemm/sglang/0.5.14/gemm_perf.parquet") for f in kernels.files), gpu
        assert kernels.errors["gemm_fp8_block"]["median"] <= 0.2, gpu
        hardware = get_hardware(gpu)
        block = float(kernels.gemm_time(hardware, 16.0, 4096.0, 4096.0, "fp8_block"))
        tensor = float(kernels.gemm_time(hardware, 16.0, 4096.0, 4096.0, "fp8"))
        assert block < 25e-6 and block < 2.0 * tensor, (gpu, block, tensor)
    kernels = get_engine("vllm").gpus["h200"]
    for (m, n, k), ms in SGLANG_H200_FP8_BLOCK_GEMM_MS.items():
        ours = float(kernels.gemm_time(H200, m, n, k, "fp8_block")) * 1e3
        assert abs(ours / ms - 1.0) < 0.35, ((m, n, k), ours, ms)
    small = float(kernels.gemm_time(H200, 64.0, 4096.0, 4096.0, "fp8_block")) * 1e3
    assert small < VLLM_H200_FP8_BLOCK_GEMM_MS[(64, 4096, 4096)] / 3


def test_pinned_moe_and_gemm_cells_are_the_databases() -> None:
    """The literals above are the kernel database's cells (needs the calibration extra)."""
    pytest.importorskip("aiconfigurator_core")
    pandas = pytest.importorskip("pandas")
    from idealized_runtime.cost_model.hardware.engines.kernel_fit import database_root

    root = database_root()
    deepgemm = ("b200_sxm/moe/trtllm/1.3.0rc20", "fp8_block", "deepgemm", TRTLLM_B200_DEEPGEMM_MS)
    checks = [(*MEASURED[c][:3], MEASURED[c][3], c[3], c[4], c[5]) for c in MEASURED]
    checks.append((*deepgemm, DEEPSEEK, 8, 1))
    for folder, dtype, kernel, cells, layout, moe_tp, ep in checks:
        table = pandas.read_parquet(root / folder / "moe_perf.parquet")
        hidden, inter, experts, topk = layout
        table = table[
            (table["moe_dtype"] == dtype)
            & (table["hidden_size"] == hidden)
            & (table["inter_size"] == inter)
            & (table["num_experts"] == experts)
            & (table["topk"] == topk)
            & (table["moe_tp_size"] == moe_tp)
            & (table["moe_ep_size"] == ep)
            & (table["distribution"] == "power_law_1.01")
        ]
        if kernel is not None:
            table = table[table["kernel_source"].str.contains(kernel)]
        for tokens, ms in cells.items():
            cell = table[table["num_tokens"] == tokens]["latency"].min()
            assert float(cell) == pytest.approx(ms, abs=1e-6), (folder, dtype, tokens)
    for engine, cells in (("sglang/0.5.14", SGLANG_H200_FP8_BLOCK_GEMM_MS),
                          ("vllm/0.24.0", VLLM_H200_FP8_BLOCK_GEMM_MS)):  # fmt: skip
        gemm = pandas.read_parquet(root / f"h200_sxm/gemm/{engine}/gemm_perf.parquet")
        gemm = gemm[gemm["gemm_dtype"] == "fp8_block"]
        for (m, n, k), ms in cells.items():
            rows = gemm[(gemm["m"] == m) & (gemm["n"] == n) & (gemm["k"] == k)]
            assert float(rows["latency"].min()) == pytest.approx(ms, abs=1e-6)


def test_every_measured_layout_reads_its_curve_from_one_token() -> None:
    """Every shipped curve starts at the smallest count measured (1 token in these tables), so
    a decode batch reads the rows, not the formula fitted on every layout."""
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        for gpu, kernels in get_engine(engine).gpus.items():
            assert kernels.moe_curves, (engine, gpu)
            starts = {curve.sizes[0] for curve in kernels.moe_curves.values()}
            assert starts == {1.0}, (engine, gpu, starts)
            assert kernels.errors["moe_curve"]["median"] <= 0.05
    key = moe_layout("fp8_block", *DEEPSEEK, 8, 1)
    assert key in get_engine("tensorrt-llm").gpus["h200"].moe_curves
