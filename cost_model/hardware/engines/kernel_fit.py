"""Fitting an engine's kernel models (``kernels``) to its measured per-operation database.

The measurements are AIConfigurator's kernel databases (PyPI ``aiconfigurator-core``,
Apache-2.0): ``systems/data/<gpu>/<op>/<engine>/<version>/*.parquet`` with the latency of each
GEMM shape and format, attention by batch and context, MLA, MoE by tokens and layout, and the
engines' collectives, measured on the GPUs themselves. Only calibration reads them (the package
is an optional extra, ``pip install idealized-runtime[calibration]``); the fitted parameters
ship in ``data/engines/`` with the package version and the files used.

Per operation, where an engine measures several kernels for one shape the fastest is taken (the
engine's own choice among them). Each formula is fitted by least squares on log times, on every
fifth shape held out first: the held-out median and 90th-percentile errors are recorded with
the fit, then it is refitted on all shapes. ``fit_gpu_kernels`` does one engine on one GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Hardware
from idealized_runtime.cost_model.hardware.engines.kernels import (
    MLA_LATENT,
    MLA_QK_DIM,
    MLA_V_DIM,
    PROMPT_GRID_FLOPS,
    RUNNER_SEPARATOR,
    GpuKernels,
    MeasuredCurve,
    MeasuredGrid,
    OpFit,
    decode_layout,
    moe_layout,
    prompt_layout,
)

if TYPE_CHECKING:
    import pandas

# GPU folders of the database and our catalog's names for them.
DATABASE_GPUS: dict[str, str] = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
}
# The database's engine folders for our engine names.
DATABASE_ENGINES: dict[str, str] = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm"}
# The database's format names for ours, and which formats are fitted.
GEMM_FORMATS: dict[str, str] = {
    "bfloat16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
}
MOE_FORMATS: dict[str, str] = {
    "bfloat16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "int4_wo": "int4_wo",
    "w4a16_mxfp4": "mxfp4",
    "w4a8_mxfp4_mxfp8": "mxfp4_mxfp8",
}
# The measured MoE format an engine runs a checkpoint format's experts in on a GPU, where it is
# not the format's own. On Blackwell (SM100) TensorRT-LLM and SGLang serve MXFP4 experts
# (gpt-oss) with MXFP8 activations: TensorRT-LLM's default MXFP4 algorithm there is
# W4A8_MXFP4_MXFP8 (W4A16_MXFP4 on Hopper), SGLang's flashinfer_mxfp4 runner quantizes the
# activations to MXFP8 at its default --flashinfer-mxfp4-moe-precision. TensorRT-LLM's W4A16
# table times a path 4-5x slower at decode batches (gpt-oss-120b's experts, 32 tokens: 0.62 ms
# against 0.15 ms on B200). vLLM keeps FlashInfer's MXFP4 x BF16 kernels there.
BLACKWELL_GPUS = ("b200_sxm", "b300_sxm", "gb200")
MOE_SERVED: dict[tuple[str, str], dict[str, str]] = {
    (engine, gpu): {"mxfp4": "mxfp4_mxfp8"}
    for engine in ("trtllm", "sglang")
    for gpu in BLACKWELL_GPUS
}
# Whose measured MoE kernels stand for an engine's in a format on a GPU, where the engine's own
# table times another kernel than it serves with: (owner engine, a kernel_source substring).
# SGLang serves gpt-oss's MXFP4 experts on Hopper with OpenAI's triton_kernels (its
# moe_runner_backend "triton_kernel" for GPT-OSS at EP 1); its Hopper tables time its generic
# fused Triton MoE instead (gpt-oss-120b's experts, 32 tokens on H100: 1.13 ms), vLLM's the
# triton_kernels path it also serves gpt-oss with there (0.38 ms).
# TensorRT-LLM serves block-scaled fp8 experts (DeepSeek's) on Blackwell with its TRTLLM MoE
# backend, the TensorRT-LLM-gen kernels (InferenceX's dsr1_fp8_b200_trt.sh: moe_config backend
# TRTLLM); its own Blackwell table times the DEEPGEMM backend instead, 2-3x slower at decode
# sizes under MoE TP (DeepSeek's experts at MoE TP 8 on B200, 1 / 16 / 64 tokens: 0.098 /
# 0.220 / 0.349 ms against 0.035 / 0.102 / 0.181 ms). SGLang's table times the same kernels
# through FlashInfer (trtllm_fp8_block_scale_moe). The same holds for MXFP4 experts with MXFP8
# activations (gpt-oss on Blackwell; InferenceX's gptoss_fp4_b200_trt*.sh set the TRTLLM
# backend): TensorRT-LLM's own table measures them at MoE TP 1 only, SGLang's times the
# TensorRT-LLM-gen kernels at every TP / EP split (where both measured, within 4-10%: 4 / 64
# tokens at EP 1, 0.051 / 0.207 against 0.053 / 0.227 ms); vLLM's FlashInfer MXFP4 x MXFP8
# path (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8) runs the same kernels, which its own table times
# on other architectures' shapes only.
MOE_OWNERS: dict[tuple[str, str], dict[str, tuple[str, str]]] = {
    **{("sglang", gpu): {"w4a16_mxfp4": ("vllm", "oaitriton")} for gpu in ("h100_sxm", "h200_sxm")},
    **{
        ("trtllm", gpu): {
            "fp8_block": ("sglang", "flashinfer_trtllm"),
            "w4a8_mxfp4_mxfp8": ("sglang", "flashinfer_trtllm"),
        }
        for gpu in BLACKWELL_GPUS
    },
    **{
        ("vllm", gpu): {"w4a8_mxfp4_mxfp8": ("sglang", "flashinfer_trtllm")}
        for gpu in BLACKWELL_GPUS
    },
}
# MoE runners an engine can be launched with beside its default, where the kernel database
# measured them on a GPU: runner -> {database format: [(owner engine, its kernel_source)]},
# fitted under "format@runner" (``GpuKernels.moe_runners``; ``SchedulerDefaults.moe_runner``),
# each source's newest version that measured the kernel; a shape measured by an earlier source
# is not read from a later one. SGLang's Triton fused MoE for bf16 experts on Blackwell: what
# its --moe-runner-backend auto gives bf16 experts outside the architectures it promotes to
# FlashInfer's TensorRT-LLM kernels (SGLang 0.5.6 promoted DeepSeek-V3 and Qwen3's fp8 experts
# only, sglang#13489; the 0.5.14 table times bf16 Qwen3 experts on those kernels). Its own
# table times the Triton kernel on other shapes than Qwen3's; vLLM's fused_moe, the Triton kernel
# SGLang's was taken from, times Qwen3's too (on shapes both measured, SGLang's 1.05-1.5x
# slower, median 1.15-1.3x by size: the stand-in errs fast).
MOE_RUNNERS: dict[tuple[str, str], dict[str, dict[str, list[tuple[str, str]]]]] = {
    ("sglang", gpu): {
        "triton": {"bfloat16": [("sglang", "sglang_fused_moe_triton"), ("vllm", "vllm_fused_moe")]}
    }
    for gpu in BLACKWELL_GPUS
}
# Whose measured GEMMs stand for an engine's in a format, where the engine's own table times
# something else than the kernel a served step runs. vLLM 0.24's block-scaled fp8 table
# (DeepGemmFp8BlockScaledMMKernel, CutlassFp8BlockScaledMMKernel, FlashInfer's) sits on a floor
# at every shape up to M = 1024 (m <= 16, n and k 1024-4096: a median of 59 us on H100/H200,
# 231-447 us on B200/B300/GB200), where the other engines' block-scaled tables and vLLM's own
# per-tensor fp8 table measure 7-10 us; above the floor the rows agree with SGLang's (H200,
# 16384 x 16384 x 4096: 1.70 ms against 1.84 ms). A decode step replays CUDA graphs, which pay
# no such floor; SGLang's table times DeepGEMM's gemm_nt, the kernel vLLM's DeepGEMM path runs.
GEMM_OWNERS: dict[tuple[str, str], dict[str, str]] = {
    ("vllm", gpu): {"fp8_block": "sglang"} for gpu in DATABASE_GPUS
}
KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}
# vLLM's static_scaled_fp8_quant over m x k activations: one elementwise kernel, measured
ELEMENTWISE_FILE = "scale_matrix_perf.parquet"
MS = 1e-3  # the database's latencies are milliseconds
HOLD_OUT_EVERY = 5
MAX_ROWS = 3000  # shapes per fit (a deterministic sample of larger tables)
# Routing of MoE measurements: a mildly skewed power law, as real routers are uneven.
MOE_DISTRIBUTIONS = ("power_law_1.01", "balanced")
# Whose context-MLA table stands for an engine's on a GPU, where the engine's own times another
# path than the one it serves prompts with. SGLang on Hopper serves DeepSeek-style prompts on the
# MHA path (FlashInfer's or FA3's ragged prefill over the 192/128-wide heads the latent expands
# to); its Hopper context_mla tables time the absorbed 576/512-wide path instead: about 180 TFLOPS
# counted as MHA at every length and head count, slower than its own fa3 and flashinfer
# attention modules with their projections (wideep_context_mla_perf: 1.18 ms at 8k tokens and 16
# heads on H200, against 1.99 ms for the attention alone). TensorRT-LLM's Hopper table times the
# MHA-path kernel on the same GPU.
MLA_CONTEXT_OWNERS: dict[tuple[str, str], str] = {
    ("sglang", "h100_sxm"): "trtllm",
    ("sglang", "h200_sxm"): "trtllm",
}


def database_root(path: str | Path | None = None) -> Path:
    """The kernel database's ``systems/data`` folder: ``path``, or the installed package's."""
    if path is not None:
        root = Path(path)
    else:
        try:
            import aiconfigurator_core  # type: ignore[import-not-found]
        except ImportError:
            raise InputError(
                "the kernel database needs aiconfigurator-core (pip install "
                "'idealized-runtime[calibration]'), or give its systems/data folder"
            ) from None
        root = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    if not root.is_dir():
        raise InputError(f"{root}: not a kernel database folder (systems/data)")
    return root


def package_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aiconfigurator-core")
    except PackageNotFoundError:
        return None


def _version_key(version: str) -> tuple:
    parts = []
    for piece in version.replace("rc", ".rc.").replace("post", ".post.").split("."):
        parts.append((0, int(piece), "") if piece.isdigit() else (1, 0, piece))
    return tuple(parts)


def version_files(root: Path, gpu: str, op: str, engine: str, name: str) -> list[Path]:
    """``name`` under ``<gpu>/<op>/<engine>/<version>/``, newest engine version first."""
    folder = root / gpu / op / engine
    if not folder.is_dir():
        return []
    versions = sorted((p.name for p in folder.iterdir() if (p / name).is_file()), key=_version_key)
    return [folder / version / name for version in reversed(versions)]


def newest_file(root: Path, gpu: str, op: str, engine: str, name: str) -> Path | None:
    """The newest engine version's ``name`` under ``<gpu>/<op>/<engine>/``, if any."""
    found = version_files(root, gpu, op, engine, name)
    return found[0] if found else None


def _widest_moe_table(root: Path, gpu: str, engine: str) -> tuple[Path, pandas.DataFrame] | None:
    """The MoE table of the version that measured the most of the formats fitted here, the
    newest among equals: a later version may remeasure a few formats only (TensorRT-LLM
    1.3.0rc23 on H100/H200: bf16 and per-tensor fp8, without the block-scaled fp8 of DeepSeek
    checkpoints that 1.3.0rc20 measured)."""
    best: tuple[int, Path, pandas.DataFrame] | None = None
    for path in version_files(root, gpu, "moe", engine, "moe_perf.parquet"):  # newest first
        frame = _read(path)
        measured = len(set(frame["moe_dtype"]) & set(MOE_FORMATS))
        if best is None or measured > best[0]:
            best = (measured, path, frame)
    return (best[1], best[2]) if best is not None and best[0] > 0 else None


def _read(path: Path) -> pandas.DataFrame:
    import pandas

    return pandas.read_parquet(path)


def _fastest(frame: pandas.DataFrame, keys: Sequence[str]) -> pandas.DataFrame:
    """One row per shape: the fastest kernel measured for it."""
    return frame.groupby(list(keys), as_index=False)["latency"].min()


def _sample(frame: pandas.DataFrame) -> pandas.DataFrame:
    if len(frame) <= MAX_ROWS:
        return frame.reset_index(drop=True)
    return frame.sample(MAX_ROWS, random_state=0).reset_index(drop=True)


# --- the generic fit --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Parameter:
    name: str
    start: float
    lower: float
    upper: float
    log: bool = True  # fitted as log(value)


def _fit(
    parameters: Sequence[_Parameter],
    predict: Callable[[OpFit, np.ndarray], np.ndarray],
    rows: np.ndarray,
    seconds: np.ndarray,
    base: OpFit = OpFit(),
) -> tuple[OpFit, dict[str, float]]:
    """Least squares on log(predicted / measured) over ``rows``; held-out errors of a fit on
    four fifths of them, then the fit on all."""
    from scipy.optimize import least_squares

    def to_x(values: Sequence[float]) -> np.ndarray:
        return np.array(
            [np.log(v) if p.log else v for p, v in zip(parameters, values, strict=True)]
        )

    def to_fit(x: np.ndarray) -> OpFit:
        values = {
            p.name: float(np.exp(v) if p.log else v) for p, v in zip(parameters, x, strict=True)
        }
        return replace(base, **values)

    lower = to_x([p.lower for p in parameters])
    upper = to_x([p.upper for p in parameters])
    start = np.clip(to_x([p.start for p in parameters]), lower + 1e-9, upper - 1e-9)

    def solve(index: np.ndarray) -> OpFit:
        def residuals(x: np.ndarray) -> np.ndarray:
            return np.log(predict(to_fit(x), rows[index]) / seconds[index])

        result = least_squares(
            residuals, start, bounds=(lower, upper), loss="soft_l1", f_scale=0.1, max_nfev=400
        )
        return to_fit(result.x)

    return _held_out(solve, predict, rows, seconds, len(parameters))


def _held_out(
    solve: Callable[[np.ndarray], OpFit],
    predict: Callable[[OpFit, np.ndarray], np.ndarray],
    rows: np.ndarray,
    seconds: np.ndarray,
    n_parameters: int,
) -> tuple[OpFit, dict[str, float]]:
    """The errors on every fifth row of a fit on the others, then the fit on all rows; no
    errors where too few rows are held out (or left) to say anything."""
    order = np.arange(len(seconds))
    held = order % HOLD_OUT_EVERY == 0
    if held.sum() >= 3 and (~held).sum() >= n_parameters + 2:
        trial = solve(order[~held])
        summary = _error_summary(np.abs(predict(trial, rows[held]) / seconds[held] - 1.0))
    else:
        summary = {"n": 0}
    return solve(order), summary


def _error_summary(errors: np.ndarray | list[float]) -> dict[str, float]:
    """Count, median and 90th percentile of held-out |predicted / measured - 1| (what each fit
    records); count 0 when nothing was held out."""
    held = np.asarray(errors, dtype=np.float64)
    if held.size == 0:
        return {"n": 0}
    return {
        "n": int(held.size),
        "median": round(float(np.median(held)), 4),
        "p90": round(float(np.percentile(held, 90)), 4),
    }


def _blank_kernels(hardware: Hardware) -> GpuKernels:
    """Kernels with every fit at its default: a fit on trial replaces one operation's."""
    return GpuKernels(hardware.name, "", {}, {}, OpFit(), OpFit(), OpFit(), OpFit())


def _latency_s(shapes: pandas.DataFrame) -> np.ndarray:
    """The database's latencies (milliseconds) in seconds."""
    return shapes["latency"].to_numpy() * MS


# --- per operation ------------------------------------------------------------------------------


def _gemm_fit(frame: pandas.DataFrame, hardware: Hardware, fmt: str) -> tuple[OpFit, dict]:
    """The GEMM formula with its rate growing in M, and also in N and K where that predicts
    the held-out shapes better (a lower median error, no higher 90th percentile)."""
    shapes = _sample(_fastest(frame, ["m", "n", "k"]))
    rows = shapes[["m", "n", "k"]].to_numpy(dtype=np.float64)
    seconds = _latency_s(shapes)
    dummy = _blank_kernels(hardware)

    def predict(fit: OpFit, x: np.ndarray) -> np.ndarray:
        kernels = replace(dummy, gemm={fmt: fit})
        return kernels.gemm_time(hardware, x[:, 0], x[:, 1], x[:, 2], fmt)

    parameters = [
        _Parameter("latency_s", 5e-6, 5e-7, 1e-4),
        _Parameter("compute", 0.7, 0.05, 1.0),
        _Parameter("half", 32.0, 0.5, 4096.0),
        _Parameter("bandwidth", 0.7, 0.05, 1.0),
        _Parameter("sharpness", 3.0, 1.0, 20.0),
    ]
    fit, errors = _fit(parameters, predict, rows, seconds)
    widths = [_Parameter("half_n", 64.0, 1.0, 65536.0), _Parameter("half_k", 64.0, 1.0, 65536.0)]
    shaped, shaped_errors = _fit([*parameters, *widths], predict, rows, seconds)
    better = shaped_errors.get("median", 1.0) < errors.get("median", 0.0)
    if better and shaped_errors["p90"] <= errors["p90"]:
        return shaped, shaped_errors
    return fit, errors


def _moe_fit(frame: pandas.DataFrame, hardware: Hardware, fmt: str) -> tuple[OpFit, dict]:
    keys = [
        "num_tokens",
        "hidden_size",
        "inter_size",
        "topk",
        "num_experts",
        "moe_tp_size",
        "moe_ep_size",
    ]
    shapes = _sample(_fastest(frame, keys))
    rows = shapes[keys].to_numpy(dtype=np.float64)
    seconds = _latency_s(shapes)
    dummy = _blank_kernels(hardware)

    def predict(fit: OpFit, x: np.ndarray) -> np.ndarray:
        kernels = replace(dummy, moe={fmt: fit})
        t, h, i, k, e, mtp, ep = x.T
        return kernels.moe_time(
            hardware, t, hidden=h, inter=i, experts=e, topk=k, ep=ep, moe_tp=mtp, fmt=fmt
        )

    return _fit(
        [
            _Parameter("latency_s", 2e-5, 1e-6, 1e-3),
            _Parameter("compute", 0.5, 0.02, 1.0),
            _Parameter("half", 16.0, 0.1, 4096.0),
            _Parameter("bandwidth", 0.6, 0.05, 1.0),
            _Parameter("sharpness", 2.0, 1.0, 20.0),
        ],
        predict,
        rows,
        seconds,
    )


def _context_attention_fit(frame: pandas.DataFrame, hardware: Hardware) -> tuple[OpFit, dict]:
    frame = frame[(frame["window_size"] == 0) & (frame["kv_cache_dtype"] == "bfloat16")]
    keys = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"]
    shapes = _sample(_fastest(frame, keys))
    b, s, h, _, d = (shapes[k].to_numpy(dtype=np.float64) for k in keys)
    flops = 4.0 * b * h * d * s * (s + 1.0) / 2.0
    return _prompt_fit(np.stack([flops, s], axis=1), shapes, hardware, mla=False)


def _prompt_fit(rows: np.ndarray, shapes: Any, hardware: Hardware, mla: bool) -> tuple[OpFit, dict]:
    """Prompt attention: FLOPs at a rate growing with the chunk's positions."""
    seconds = _latency_s(shapes)
    dummy = _blank_kernels(hardware)

    def predict(fit: OpFit, x: np.ndarray) -> np.ndarray:
        kernels = replace(dummy, context_attention=fit, mla_context=fit)
        return kernels.context_attention_time(hardware, x[:, 0], x[:, 1], mla=mla)

    return _fit(
        [
            _Parameter("latency_s", 1e-5, 5e-7, 1e-3),
            _Parameter("compute", 0.5, 0.02, 1.0),
            _Parameter("half", 256.0, 1.0, 65536.0),
        ],
        predict,
        rows,
        seconds,
    )


def _decode_attention_fit(frame: pandas.DataFrame, hardware: Hardware) -> tuple[OpFit, dict]:
    frame = frame[frame["window_size"] == 0]
    keys = ["batch_size", "step", "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype"]
    shapes = _sample(_fastest(frame, keys))
    b, s, h, kvh, d = (shapes[k].to_numpy(dtype=np.float64) for k in keys[:5])
    element = shapes["kv_cache_dtype"].map(KV_BYTES).to_numpy(dtype=np.float64)
    kv_bytes = b * (s + 1.0) * 2.0 * kvh * d * element
    flops = 4.0 * b * h * d * (s + 1.0)
    return _decode_fit(np.stack([kv_bytes, flops, b], axis=1), shapes, hardware, mla=False)


def _decode_fit(rows: np.ndarray, shapes: Any, hardware: Hardware, mla: bool) -> tuple[OpFit, dict]:
    seconds = _latency_s(shapes)
    dummy = _blank_kernels(hardware)

    def predict(fit: OpFit, x: np.ndarray) -> np.ndarray:
        kernels = replace(dummy, decode_attention=fit, mla_decode=fit)
        return kernels.decode_attention_time(hardware, x[:, 0], x[:, 1], x[:, 2], mla=mla)

    return _fit(
        [
            _Parameter("latency_s", 1e-5, 5e-7, 1e-3),
            _Parameter("bandwidth", 0.6, 0.02, 1.0),
            _Parameter("compute", 0.3, 0.01, 1.0),
            _Parameter("per_sequence_s", 1e-8, 1e-10, 1e-5),
        ],
        predict,
        rows,
        seconds,
        base=OpFit(sharpness=4.0),
    )


def _mla_frames(frame: pandas.DataFrame) -> pandas.DataFrame:
    frame = frame[frame["kv_cache_dtype"].isin(KV_BYTES)].copy()
    frame["heads"] = frame["num_heads"]  # the heads on one GPU (tp_size says how they came)
    return frame


def _mla_context_fit(frame: pandas.DataFrame, hardware: Hardware) -> tuple[OpFit, dict]:
    frame = _mla_frames(frame)
    frame = frame[frame["kv_cache_dtype"] == "bfloat16"]
    shapes = _sample(_fastest(frame, ["batch_size", "isl", "heads"]))
    b, s, h = (shapes[k].to_numpy(dtype=np.float64) for k in ("batch_size", "isl", "heads"))
    flops = 2.0 * b * h * (MLA_QK_DIM + MLA_V_DIM) * s * (s + 1.0) / 2.0
    return _prompt_fit(np.stack([flops, s], axis=1), shapes, hardware, mla=True)


def _mla_decode_grids(frame: pandas.DataFrame) -> tuple[dict[str, MeasuredGrid], dict]:
    """MLA decode's measured (batch, context) grid per heads count and cache format, keyed by
    ``decode_layout``."""
    frame = _mla_frames(frame)
    cells = _fastest(frame, ["heads", "kv_cache_dtype", "batch_size", "step"])
    return _decode_grids(
        cells, ["heads", "kv_cache_dtype"], lambda h, dtype: decode_layout(h, KV_BYTES[dtype])
    )


def _gqa_decode_grids(
    frame: pandas.DataFrame, layouts: set[tuple[int, int, int]]
) -> tuple[dict[str, MeasuredGrid], dict]:
    """Decode attention's measured (batch, context) grid of every per-GPU layout (heads, KV
    heads, head dim) of a shipped architecture, per cache format, keyed by ``decode_layout``
    (full attention; the one formula stays for the rest)."""
    by = ["num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype"]
    frame = frame[(frame["window_size"] == 0) & frame["kv_cache_dtype"].isin(KV_BYTES)]
    cells = _fastest(_rows_of(frame, by[:3], layouts), [*by, "batch_size", "step"])
    return _decode_grids(
        cells, by, lambda h, kv, d, dtype: decode_layout(h, KV_BYTES[dtype], kv, int(d))
    )


def _decode_grids(
    cells: pandas.DataFrame, by: list[str], key: Callable[..., str]
) -> tuple[dict[str, MeasuredGrid], dict]:
    """A measured (batch, context) grid per group of ``by``; a cell the database lacks (a few
    long contexts at large batches) is its row's longest measured cell scaled linearly in
    positions, one between measured cells log-log between them. Held out: every fifth inner
    column predicted from a grid without it."""
    grids: dict[str, MeasuredGrid] = {}
    errors: list[float] = []
    for group_key, group in cells[cells["latency"] > 0].groupby(by):
        table = group.pivot(index="batch_size", columns="step", values="latency") * MS
        positions = table.columns.to_numpy(dtype=np.float64) + 1.0
        values = table.to_numpy(dtype=np.float64, copy=True)
        if np.isnan(values[:, 0]).any() or len(positions) < 2 or len(table.index) < 2:
            continue  # no shortest context for some batch, or a line: not a grid
        for row in values:
            known = np.flatnonzero(~np.isnan(row))
            last = known[-1]
            inner = np.isnan(row[:last])
            row[:last][inner] = np.exp(
                np.interp(np.log(positions[:last][inner]), np.log(positions[known]),
                          np.log(row[known]))
            )  # fmt: skip
            row[last + 1 :] = row[last] * positions[last + 1 :] / positions[last]
        batches = tuple(float(b) for b in table.index)
        grids[key(*group_key)] = _grid(batches, positions, values)
        for j in range(1, len(positions) - 1, HOLD_OUT_EVERY):
            keep = np.arange(len(positions)) != j
            trial = _grid(batches, positions[keep], values[:, keep])
            predicted = trial.at(np.array(batches), np.full(len(batches), positions[j]))
            errors.extend(np.abs(predicted / values[:, j] - 1.0))
    return grids, _error_summary(errors)


def _prompt_grids(
    cells: pandas.DataFrame, by: list[str], flops_per_position: Callable[..., float],
    key: Callable[..., str],
) -> tuple[dict[str, MeasuredGrid], dict]:  # fmt: skip
    """Prompt attention's measured seconds per ``PROMPT_GRID_FLOPS`` causal FLOPs over (batch
    of prompts, prompt length) per group of ``by`` (``flops_per_position``: per position
    attended, of the group). A cell the database lacks (long prompts at large batches) takes
    its row's nearest measured length's rate (a saturated GPU's), one between measured cells
    log-log between them. Held out: every fifth inner length predicted from a grid without
    it."""
    grids: dict[str, MeasuredGrid] = {}
    errors: list[float] = []
    for group_key, group in cells[cells["latency"] > 0].groupby(by):
        table = group.pivot(index="batch_size", columns="isl", values="latency") * MS
        lengths = table.columns.to_numpy(dtype=np.float64)
        batches = table.index.to_numpy(dtype=np.float64)
        causal = batches[:, None] * lengths * (lengths + 1.0) / 2.0
        values = table.to_numpy(dtype=np.float64) / (
            causal * flops_per_position(*group_key) / PROMPT_GRID_FLOPS
        )
        if len(lengths) < 3 or len(batches) < 2 or np.isnan(values).all(axis=1).any():
            continue  # a batch with no length measured, or too few lengths: not a grid
        for row in values:
            known = np.flatnonzero(~np.isnan(row))
            row[:] = np.exp(np.interp(np.log(lengths), np.log(lengths[known]),
                                      np.log(row[known])))  # fmt: skip
        found = tuple(float(b) for b in batches)
        grids[key(*group_key)] = _grid(found, lengths, values)
        for j in range(1, len(lengths) - 1, HOLD_OUT_EVERY):
            keep = np.arange(len(lengths)) != j
            trial = _grid(found, lengths[keep], values[:, keep])
            predicted = trial.at(batches, np.full(len(batches), lengths[j]))
            errors.extend(np.abs(predicted / values[:, j] - 1.0))
    return grids, _error_summary(errors)


def _gqa_prompt_grids(
    frame: pandas.DataFrame, layouts: set[tuple[int, int, int]]
) -> tuple[dict[str, MeasuredGrid], dict]:
    """Prompt attention's measured grid of every per-GPU layout (heads, KV heads, head dim) of
    a shipped architecture (full attention, the 16-bit cache the formula is fitted on), keyed
    by ``prompt_layout``."""
    by = ["num_heads", "num_key_value_heads", "head_dim"]
    frame = frame[(frame["window_size"] == 0) & (frame["kv_cache_dtype"] == "bfloat16")]
    cells = _fastest(_rows_of(frame, by, layouts), [*by, "batch_size", "isl"])
    return _prompt_grids(
        cells, by, lambda h, kv, d: 4.0 * h * d, lambda h, kv, d: prompt_layout(h, kv, int(d))
    )


def _mla_prompt_grids(frame: pandas.DataFrame) -> tuple[dict[str, MeasuredGrid], dict]:
    """MLA prompt attention's measured grid per heads count on one GPU (16-bit cache), keyed by
    ``prompt_layout``."""
    frame = _mla_frames(frame)
    cells = _fastest(frame[frame["kv_cache_dtype"] == "bfloat16"], ["heads", "batch_size", "isl"])
    return _prompt_grids(
        cells, ["heads"], lambda h: 2.0 * h * (MLA_QK_DIM + MLA_V_DIM), lambda h: prompt_layout(h)
    )


def _elementwise_fit(frame: pandas.DataFrame, hardware: Hardware) -> tuple[OpFit, dict]:
    """One elementwise pass: latency + bytes at a fraction of the HBM bandwidth, fitted on a
    measured single-kernel pass over an m x k activation (vLLM's static_scaled_fp8_quant:
    reads 16-bit values, writes 8-bit ones, 3 bytes per element)."""
    shapes = _sample(_fastest(frame, ["m", "k"]))
    nbytes = shapes["m"].to_numpy(dtype=np.float64) * shapes["k"].to_numpy(dtype=np.float64) * 3
    hbm = hardware.memory_bandwidth_gbps * 1e9

    def predict(fit: OpFit, x: np.ndarray) -> np.ndarray:
        return fit.latency_s + x[:, 0] / (hbm * fit.bandwidth)

    return _fit(
        [_Parameter("latency_s", 2e-6, 1e-7, 1e-4), _Parameter("bandwidth", 0.6, 0.05, 1.0)],
        predict,
        nbytes[:, None],
        _latency_s(shapes),
    )


def _rows_of(
    frame: pandas.DataFrame, columns: list[str], layouts: set[tuple[int, ...]]
) -> pandas.DataFrame:
    """The rows of ``frame`` whose ``columns`` (as whole numbers) form one of ``layouts``."""
    return frame[[tuple(int(v) for v in row) in layouts for row in frame[columns].to_numpy()]]


def shipped_attention_layouts() -> set[tuple[int, int, int]]:
    """(heads, KV heads, head dim) per GPU of the shipped architectures without MLA at tensor
    parallelism 1, 2, 4 and 8 (KV heads replicated when fewer than the GPUs)."""
    from idealized_runtime.core.catalog import architectures

    return {
        (a.num_heads // tp, max(a.kv_heads // tp, 1), a.dim_per_head)
        for a in architectures().values()
        if not a.mla
        for tp in (1, 2, 4, 8)
        if a.num_heads % tp == 0
    }


def shipped_moe_layouts() -> set[tuple[int, int, int, int]]:
    """(hidden, expert width, experts, top-k) of the MoE architectures the package ships."""
    from idealized_runtime.core.catalog import architectures

    return {
        (a.hidden_size, a.expert_ffn_hidden_size, a.num_experts, a.experts_per_token)
        for a in architectures().values()
        if a.num_experts > 1
    }


def _runner_rows(
    root: Path, gpu: str, dtype: str, sources: list[tuple[str, str]], files: list[Path]
) -> pandas.DataFrame:
    """The rows of a MoE runner's kernels in ``dtype``: from each (owner engine,
    kernel_source) of ``sources``, its newest table that measured the kernel, less
    the shapes an earlier source measured; in one routing distribution
    (``MOE_DISTRIBUTIONS``)."""
    import pandas

    shape = ["hidden_size", "inter_size", "num_experts", "topk"]
    frames: list[pandas.DataFrame] = []
    for owner, kernel in sources:
        for path in version_files(root, gpu, "moe", owner, "moe_perf.parquet"):
            frame = _read(path)
            rows = frame[(frame["moe_dtype"] == dtype) & (frame["kernel_source"] == kernel)]
            if frames and len(rows):
                seen = pandas.concat(frames)[shape].drop_duplicates()
                rows = rows.merge(seen, on=shape, how="left", indicator=True)
                rows = rows[rows["_merge"] == "left_only"].drop(columns="_merge")
            if len(rows):
                if path not in files:
                    files.append(path)
                frames.append(rows)
                break
    return _one_distribution(pandas.concat(frames)) if frames else pandas.DataFrame()


def _one_distribution(frame: pandas.DataFrame) -> pandas.DataFrame:
    """``frame``'s MoE rows in the first routing distribution of ``MOE_DISTRIBUTIONS`` it has
    (all of them where it has none of those)."""
    for distribution in MOE_DISTRIBUTIONS:
        chosen = frame[frame["distribution"] == distribution]
        if len(chosen):
            return chosen
    return frame


def _moe_curves(
    frame: pandas.DataFrame, layouts: set[tuple[int, int, int, int]], runner: str = ""
) -> tuple[dict[str, MeasuredCurve], dict]:
    """The measured MoE curve over every token count measured of every layout of a shipped
    architecture, per format and MoE TP / EP split, keyed by ``moe_layout`` (of the format
    and ``runner``'s suffix). Held out: every fifth inner point predicted from its curve
    without it."""
    columns = ["hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size", "moe_ep_size"]
    shipped = _rows_of(frame, columns[:4], layouts)
    curves: dict[str, MeasuredCurve] = {}
    errors: list[float] = []
    for name, fmt in MOE_FORMATS.items():
        rows = shipped[shipped["moe_dtype"] == name]
        for layout, group in rows.groupby(columns):
            fastest = group.groupby("num_tokens")["latency"].min()
            tokens = fastest.index.to_numpy(dtype=np.float64)
            if tokens.size < 3:
                continue
            seconds = fastest.to_numpy(dtype=np.float64) * MS
            key = moe_layout(fmt + runner, *(float(v) for v in layout))
            curves[key] = MeasuredCurve(tuple(tokens), tuple(seconds))
            for j in range(1, len(tokens) - 1, HOLD_OUT_EVERY):
                others = np.arange(len(tokens)) != j
                trial = MeasuredCurve(tuple(tokens[others]), tuple(seconds[others]))
                errors.append(abs(float(trial.at(tokens[j])) / seconds[j] - 1.0))
    return curves, _error_summary(errors)


def _grid(batches: tuple[float, ...], positions: np.ndarray, values: np.ndarray) -> MeasuredGrid:
    rows = tuple(tuple(float(t) for t in row) for row in values)
    return MeasuredGrid(batches, tuple(float(p) for p in positions), rows)


def _mla_decode_fit(frame: pandas.DataFrame, hardware: Hardware) -> tuple[OpFit, dict]:
    frame = _mla_frames(frame)
    shapes = _sample(_fastest(frame, ["batch_size", "step", "heads", "kv_cache_dtype"]))
    b, s, h = (shapes[k].to_numpy(dtype=np.float64) for k in ("batch_size", "step", "heads"))
    element = shapes["kv_cache_dtype"].map(KV_BYTES).to_numpy(dtype=np.float64)
    kv_bytes = b * (s + 1.0) * MLA_LATENT * element
    flops = 2.0 * b * h * (s + 1.0) * (2 * 512 + 64)  # absorbed: q.latent and p.latent
    return _decode_fit(np.stack([kv_bytes, flops, b], axis=1), shapes, hardware, mla=True)


# Bytes per element of the collectives' dtypes (``allreduce_dtype``, ``nccl_dtype``).
COLLECTIVE_BYTES = {
    "float32": 4.0, "float": 4.0, "bfloat16": 2.0, "float16": 2.0, "half": 2.0,
    "fp8": 1.0, "float8": 1.0, "int8": 1.0,
}  # fmt: skip


def _message_bytes(frame: pandas.DataFrame) -> pandas.DataFrame:
    """``frame`` with ``message_bytes``: the databases' ``message_size`` counts elements of the
    row's dtype (the same size takes 1.5x longer in half than in int8 over NCCL), while the
    step model sends bytes; a table without a dtype is taken as bf16, what engines reduce."""
    column = next((c for c in ("allreduce_dtype", "nccl_dtype") if c in frame.columns), None)
    if column is None:
        width = 2.0
    else:
        names = frame[column].astype(str).str.lower()
        unknown = sorted(set(names) - set(COLLECTIVE_BYTES))
        if unknown:
            raise InputError(f"unknown collective dtype(s) {', '.join(unknown)}")
        width = names.map(COLLECTIVE_BYTES).to_numpy(dtype=np.float64)
    return frame.assign(message_bytes=frame["message_size"].to_numpy(dtype=np.float64) * width)


def _collective_fit(
    frame: pandas.DataFrame, hardware: Hardware, ring: Callable[[int], float]
) -> tuple[OpFit, dict]:
    shapes = _fastest(_message_bytes(frame), ["num_gpus", "message_bytes"])
    gpus = sorted(int(n) for n in shapes["num_gpus"].unique())
    link_rate = hardware.interconnect_gbps * 1e9
    rows = shapes[["num_gpus", "message_bytes"]].to_numpy(dtype=np.float64)
    seconds = _latency_s(shapes)
    parameters = [_Parameter("link", 0.6, 0.05, 1.5)] + [
        _Parameter(f"latency_{n}", 1e-5, 5e-7, 1e-3) for n in gpus
    ]

    def predict(fit: OpFit, x: np.ndarray) -> np.ndarray:
        return np.array([float(fit.collective(m, int(n), ring(int(n)), link_rate)) for n, m in x])

    # The per-GPU-count latencies are parameters of their own: fit them through a wrapper.
    from scipy.optimize import least_squares

    def unpack(x: np.ndarray) -> OpFit:
        return OpFit(
            link=float(np.exp(x[0])),
            latency_by_gpus={n: float(np.exp(v)) for n, v in zip(gpus, x[1:], strict=True)},
        )

    start = np.log([p.start for p in parameters])
    bounds = (np.log([p.lower for p in parameters]), np.log([p.upper for p in parameters]))

    def solve(index: np.ndarray) -> OpFit:
        result = least_squares(
            lambda x: np.log(predict(unpack(x), rows[index]) / seconds[index]), start, bounds=bounds
        )
        # The line serves GPU counts not measured; at a measured count, the measured curve.
        return replace(unpack(result.x), curve_by_gpus=_curves(rows[index], seconds[index]))

    return _held_out(solve, predict, rows, seconds, len(parameters))


def _curves(rows: np.ndarray, seconds: np.ndarray) -> dict[int, tuple[tuple[float, float], ...]]:
    """(message bytes, seconds) by GPU count, bytes ascending, from (GPUs, bytes) rows."""
    curves: dict[int, tuple[tuple[float, float], ...]] = {}
    for gpus in sorted({int(n) for n in rows[:, 0]}):
        mine = rows[:, 0] == gpus
        order = np.argsort(rows[mine, 1])
        points = zip(rows[mine, 1][order], seconds[mine][order], strict=True)
        curves[gpus] = tuple((float(b), float(t)) for b, t in points)
    return curves


# --- one engine on one GPU ----------------------------------------------------------------------


def _allreduce_frame(root: Path, gpu: str, engine: str) -> tuple[Any, Path] | None:
    path = newest_file(root, gpu, "comm", engine, "custom_allreduce_perf.parquet")
    if path is None:
        return None
    frame = _read(path)
    if "backend" in frame.columns:  # CUDA-graph captured kernels: what serving runs
        graph = frame[frame["backend"].astype(str).str.endswith("graph")]
        frame = graph if len(graph) else frame
    return frame, path


def fit_gpu_kernels(root: Path, database_gpu: str, engine: str, hardware: Hardware) -> GpuKernels:
    """Fit every operation of ``engine`` (a database engine folder) on ``database_gpu``."""
    import pandas

    files: list[Path] = []
    errors: dict[str, dict[str, float]] = {}

    def need(op: str, name: str, owner: str = engine) -> Path:
        path = newest_file(root, database_gpu, op, owner, name)
        if path is None:
            raise InputError(f"{database_gpu}/{op}/{owner}: no {name} in the kernel database")
        files.append(path)
        return path

    gemm_path = need("gemm", "gemm_perf.parquet")
    gemm_frame = _read(gemm_path)
    gemm: dict[str, OpFit] = {}
    owners = GEMM_OWNERS.get((engine, database_gpu), {})
    for name, fmt in GEMM_FORMATS.items():
        frame = gemm_frame
        if fmt in owners:
            frame = _read(need("gemm", "gemm_perf.parquet", owners[fmt]))
        rows = frame[frame["gemm_dtype"] == name]
        if len(rows) >= 20:
            gemm[fmt], errors[f"gemm_{fmt}"] = _gemm_fit(rows, hardware, fmt)
    moe: dict[str, OpFit] = {}
    widest = _widest_moe_table(root, database_gpu, engine)
    if widest is not None:
        moe_path, moe_frame = widest
        files.append(moe_path)
        for dtype, (owner, kernel) in MOE_OWNERS.get((engine, database_gpu), {}).items():
            owned = _widest_moe_table(root, database_gpu, owner)
            if owned is None:
                continue
            owner_path, owner_frame = owned
            rows = owner_frame[
                (owner_frame["moe_dtype"] == dtype)
                & owner_frame["kernel_source"].astype(str).str.contains(kernel)
            ]
            if len(rows):
                files.append(owner_path)
                moe_frame = pandas.concat([moe_frame[moe_frame["moe_dtype"] != dtype], rows])
        moe_frame = _one_distribution(moe_frame)
        for name, fmt in MOE_FORMATS.items():
            rows = moe_frame[moe_frame["moe_dtype"] == name]
            if len(rows) >= 20:
                moe[fmt], errors[f"moe_{fmt}"] = _moe_fit(rows, hardware, fmt)
        moe_curves, errors["moe_curve"] = _moe_curves(moe_frame, shipped_moe_layouts())
        for runner, formats in MOE_RUNNERS.get((engine, database_gpu), {}).items():
            for dtype, sources in formats.items():
                rows = _runner_rows(root, database_gpu, dtype, sources, files)
                key = f"{MOE_FORMATS[dtype]}{RUNNER_SEPARATOR}{runner}"
                if len(rows) >= 20:
                    moe[key], errors[f"moe_{key}"] = _moe_fit(rows, hardware, key)
                    curves, _ = _moe_curves(rows, shipped_moe_layouts(), RUNNER_SEPARATOR + runner)
                    moe_curves.update(curves)
    context_frame = _read(need("attention", "context_attention_perf.parquet"))
    context, errors["context_attention"] = _context_attention_fit(context_frame, hardware)
    prompt_grids, errors["prompt_grid"] = _gqa_prompt_grids(
        context_frame, shipped_attention_layouts()
    )
    generation = _read(need("attention", "generation_attention_perf.parquet"))
    decode, errors["decode_attention"] = _decode_attention_fit(generation, hardware)
    decode_grids, errors["decode_grid"] = _gqa_decode_grids(generation, shipped_attention_layouts())
    mla: dict[str, OpFit] = {}
    grids: dict[str, MeasuredGrid] = {}
    mla_prompt_grids: dict[str, MeasuredGrid] = {}
    for kind, name, fitter in (
        ("mla_context", "context_mla_perf.parquet", _mla_context_fit),
        ("mla_decode", "generation_mla_perf.parquet", _mla_decode_fit),
    ):
        owner = engine
        if kind == "mla_context":
            owner = MLA_CONTEXT_OWNERS.get((engine, database_gpu), engine)
        path = newest_file(root, database_gpu, "mla", owner, name)
        if path is not None:
            files.append(path)
            frame = _read(path)
            mla[kind], errors[kind] = fitter(frame, hardware)
            if kind == "mla_context":
                mla_prompt_grids, errors["mla_prompt_grid"] = _mla_prompt_grids(frame)
            if kind == "mla_decode":
                grids, errors["mla_decode_grid"] = _mla_decode_grids(frame)
    # One elementwise pass, timed by the one database kernel that is a single such pass on
    # every GPU (vLLM's static fp8 quantization; the other engines' quantize tables time
    # several kernels or none): the same CUDA kernel class under every engine.
    elementwise_path = newest_file(root, database_gpu, "quantize", "vllm", ELEMENTWISE_FILE)
    elementwise = None
    if elementwise_path is not None:
        files.append(elementwise_path)
        elementwise, errors["elementwise"] = _elementwise_fit(_read(elementwise_path), hardware)
    allreduce_source = _allreduce_frame(root, database_gpu, engine)
    nccl = newest_file(root, database_gpu, "comm", "nccl", "nccl_perf.parquet")
    if nccl is None:
        raise InputError(f"{database_gpu}: no NCCL measurements in the kernel database")
    nccl_frame = _read(nccl)
    files.append(nccl)
    if allreduce_source is None:
        allreduce_frame = nccl_frame[nccl_frame["op_name"] == "all_reduce"]
    else:
        allreduce_frame, path = allreduce_source
        files.append(path)
    allreduce, errors["allreduce"] = _collective_fit(
        allreduce_frame, hardware, lambda n: 2.0 * (n - 1) / n
    )
    alltoall, errors["alltoall"] = _collective_fit(
        nccl_frame[nccl_frame["op_name"] == "alltoall"], hardware, lambda n: (n - 1) / n
    )
    served = {
        own: measured
        for own, measured in MOE_SERVED.get((engine, database_gpu), {}).items()
        if measured in moe
    }
    return GpuKernels(
        gpu=DATABASE_GPUS.get(database_gpu, database_gpu),
        version=gemm_path.parent.name,
        gemm=gemm,
        moe=moe,
        context_attention=context,
        decode_attention=decode,
        allreduce=allreduce,
        alltoall=alltoall,
        mla_context=mla.get("mla_context"),
        mla_decode=mla.get("mla_decode"),
        mla_decode_grids=grids,
        elementwise=elementwise,
        decode_grids=decode_grids,
        prompt_grids=prompt_grids,
        mla_prompt_grids=mla_prompt_grids,
        moe_curves=moe_curves,
        moe_served=served,
        files=tuple(str(p.relative_to(root)) for p in files),
        errors=errors,
    )
