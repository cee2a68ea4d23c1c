"""Reference stacks: one calibration of the time model per engine family, on published figures.

A stack is what turns the roofline's FLOPs and bytes into the seconds a real engine takes. Its
few parameters are physical (``roofline.Efficiency``): the fraction of peak matmul FLOP/s and of
HBM bandwidth its kernels reach, the fraction of the interconnect its all-reduces reach, a
latency per all-reduce (paid twice per layer under tensor parallelism, whatever the engine), a
time per layer (host launches; near zero once an engine captures CUDA graphs or compiles the
decode step) and a fixed time per forward pass (sampling, scheduling, synchronisation).

Modern stacks (``pytorch-compiled``: gpt-fast and torchao; ``lmdeploy``; ``tensorrt-llm``) are
fitted on ``data/published/measurements.csv``: each figure is predicted from the row's
architecture, GPU, tensor-parallel size, batch and token counts, and the parameters minimise the
log errors over the stack's rows, lightly pulled toward typical values so that a stack with few
rows stays physical. ``helm-megatron-2022`` is the calibration of the HELM efficiency paper's
A100 Megatron-LM grid (``data/calibrations/a100-megatron-2022.json``; that old name is an alias).

Two effects near the roofline's ridge are fitted per stack: the matmul rate grows with the
tokens in a pass (``gemm_half_tokens``), and memory traffic overlaps the math only partly
(``compute_memory_serialization``).

Stacks are fitted on 16-bit (bf16/fp16) figures; quantized figures of the same engines (fp8,
int8, int4) then fit, per weight-format kind (``kernel_format``), a few kernel factors on top
(``format_factors``: achieved bandwidth, matmul rate and saturation scale relative to the 16-bit
kernels). Errors are shipped per weight format from bytes and FLOPs alone
(``quantized_predicted``) and with the factors, in sample and held out (``quantized_calibrated``).

Honest errors: besides the in-sample error, every stack ships its leave-one-source-out error
(calibrated without a source's rows, predicting them) and its leave-one-model-out error. A
stack whose rows come from one source is held out against the other modern stacks' averaged
calibration.

Regenerate ``data/stacks/*.json`` with ``python -m idealized_runtime.cost_model.stacks``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

from idealized_runtime.core.catalog import data_path, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import Architecture, Hardware, Precision, parse_precision
from idealized_runtime.cost_model.roofline import (
    DECODE_CHUNKS,
    IDEAL,
    Efficiency,
    PhaseCosts,
    PromptCosts,
    compute_hardware,
    forward_costs,
    pass_time,
    predict_alpha,
    prompt_costs,
    prompt_time,
)
from idealized_runtime.cost_model.serving import Estimate, estimate_from_architecture, min_gpus

STACKS_DIR = "stacks"
HELM_STACK = "helm-megatron-2022"
# The estimate default for ``--arch``: the modern stack best calibrated for a batch-1 request on
# today's GPUs (batch-1 figures from four sources on A100 and H100, TP 1-8, four weight formats;
# held-out errors within the targets). LMDeploy's are lower but come from one source on one GPU.
DEFAULT_STACK = "pytorch-compiled"
ALIASES: dict[str, str] = {"a100-megatron-2022": HELM_STACK}

# Engine family of each engine named in the published table.
ENGINE_FAMILIES: dict[str, str] = {
    "gpt-fast": "pytorch-compiled",
    "torchao": "pytorch-compiled",
    "lmdeploy": "lmdeploy",
    "tensorrt-llm": "tensorrt-llm",
    "vllm": "vllm",
    "sglang": "sglang",
}
FAMILY_DESCRIPTIONS: dict[str, str] = {
    "pytorch-compiled": "PyTorch with torch.compile and CUDA graphs (gpt-fast, torchao), batch 1",
    "lmdeploy": "LMDeploy TurboMind v0.1, static batches, last prompt token in the 1st decode step",
    "tensorrt-llm": "TensorRT-LLM engines with in-flight batching",
    "vllm": "vLLM with CUDA graphs",
    "sglang": "SGLang with CUDA graphs",
}
# 16-bit weights; every other format the precision parser knows is a quantized row.
DENSE_WEIGHTS = ("bf16", "fp16")
# Engine versions that prefill a prompt without its last token and feed that token to the first
# decode step (TurboMind up to v0.1.0a1: ``LlamaBatch::ContextDecode`` "skip last input token
# (will process with decoder later)"; from v0.1.0a2 one unified pass yields the first token).
# Their first-token latency is a pass over p - 1 tokens plus a decode step, twice the decode
# step for a short prompt (``Efficiency.last_prompt_token_in_decode``).
LAST_PROMPT_TOKEN_IN_DECODE: dict[str, tuple[str, ...]] = {"lmdeploy": ("v0.1.0a0", "v0.1.0a1")}
# Engines whose tensor-parallel all-reduce is NCCL's ring, whose latency grows with the number
# of GPUs (``Efficiency.ring_allreduce``): gpt-fast's tp.py (``funcol.all_reduce`` on an NCCL
# process group) and TurboMind v0.1 (``ftNcclAllReduceSum`` after attention and the MLP; its
# custom all-reduce off by default). TensorRT-LLM's latency-optimized custom all-reduce, on by
# default on NVLink GPUs, and vLLM's and SGLang's one-shot kernels take one step whatever tp.
RING_ALLREDUCE_ENGINES: tuple[str, ...] = ("gpt-fast", "torchao", "lmdeploy")
# Metrics a row can be predicted for: per-sequence and static-batch figures whose batch is known.
PREDICTABLE = (
    "decode_tokens_per_s",
    "ttft_s",
    "time_per_output_token_s",
    "request_latency_s",
    "output_throughput_tokens_per_s",
    "output_throughput_tokens_per_s_per_gpu",
)
# What a batch-1 latency benchmark that states no lengths runs (gpt-fast's generate.py default:
# a five-token prompt, 200 new tokens).
DEFAULT_PROMPT_TOKENS = 5
DEFAULT_OUTPUT_TOKENS = 200

# Fitted parameters: (lower, upper, typical value the fit is lightly pulled toward, scale).
# The all-reduce's achieved fraction of the link bandwidth has a floor of 0.4: NCCL's own
# all-reduce benchmark (nccl-tests) reaches 200-230 of an A100's 300 GB/s over NVLink and, per
# its maintainers, 370 of an H100's 450 GB/s, so a fit that asks for less is explaining
# figures that are slow for another reason (e.g. an engine's MoE kernels) by the interconnect.
FITTED: dict[str, tuple[float, float, float, float]] = {
    "compute": (0.05, 1.0, 0.6, 0.1),
    "bandwidth": (0.2, 1.0, 0.75, 0.1),
    "interconnect": (0.4, 1.0, 0.6, 0.1),
    "layer_overhead_s": (0.0, 2e-4, 5e-6, 1e-5),
    "allreduce_latency_s": (0.0, 1e-4, 1e-5, 1e-5),
    "fixed_overhead_s": (0.0, 0.02, 5e-4, 1e-3),
    "compute_memory_serialization": (0.0, 1.0, 0.3, 0.1),
    "gemm_half_tokens": (0.0, 512.0, 16.0, 16.0),
}
# A held-out calibration left with fewer of its stack's own figures than twice the fitted
# parameters pools them with the other stacks' figures.
MIN_OWN_ROWS = 2 * len(FITTED)
# What only figures on several GPUs reveal: the all-reduce's achieved bandwidth and latency.
TP_PARAMETERS = ("interconnect", "allreduce_latency_s")
PRIOR_WEIGHT = 0.05  # pull toward the typical values, per parameter, in units of its scale
# Per weight format, what its kernels reach relative to the stack's 16-bit ones: multipliers of
# the achieved bandwidth (dequantizing int4 costs bandwidth; fp8 GEMMs may beat bf16 ones) and
# of the achieved compute, bounded; fitted on the format's figures, pulled toward 1.
FORMAT_FACTORS: dict[str, tuple[float, float]] = {
    "bandwidth": (0.2, 2.0),
    "compute": (0.2, 2.0),
    "gemm_half_tokens": (0.05, 20.0),
}
FORMAT_PRIOR_WEIGHT = 0.1  # per factor, on log(factor)
# Kernel factors are fitted with a robust loss (soft L1: quadratic up to this log error, then
# linear): a format's figures span engine releases, and a few of them were measured with kernels
# their release called experimental (TensorRT-LLM 0.8's fp8 GQA) or conflict with the same
# workload published elsewhere; three factors describing the format's typical kernels should
# not bend toward those.
FORMAT_LOSS_SCALE = 0.1
# A figure that no engine can reach under its stated settings: the ideal roofline (100% of peak
# FLOP/s and HBM bandwidth, no overhead) already takes at least this fraction of its published
# time, while measured HBM copy bandwidth stays near 90% of the datasheet peak. Such a figure was
# measured under settings other than the ones stated (or misprinted); it stays in the table and
# in every error report (with and without it), but calibrations are not fitted on it.
BEYOND_ROOFLINE = 0.95


@dataclass(frozen=True)
class Target:
    """One published figure the time model predicts."""

    row_id: str
    source_id: str
    engine: str
    family: str
    model: str
    gpu: str
    tp: int
    batch: int
    prompt_tokens: int
    output_tokens: int
    metric: str
    value: float
    weights: str = "bf16"
    kv_cache: str | None = None
    activations: str | None = None
    last_prompt_token_in_decode: bool = False  # the engine's way to the first token
    ring_allreduce: bool = False  # the engine's all-reduce (``RING_ALLREDUCE_ENGINES``)

    @property
    def precision(self) -> Precision:
        return _precision(self.weights, self.kv_cache, self.activations)

    @property
    def quantized(self) -> bool:
        return self.weights not in DENSE_WEIGHTS

    @property
    def kind(self) -> str:
        """What the figure measures: the prompt pass ("ttft") or the decode phase ("decode")."""
        return "ttft" if self.metric == "ttft_s" else "decode"


def targets_from_rows(rows: Iterable, *, quantized: bool = True) -> list[Target]:
    """The rows the time model can predict (a weight format it counts, a known batch, an
    architecture and a GPU in the catalogs, a precision the GPU runs), as targets; with
    ``quantized=False`` 16-bit rows only. Other rows are skipped, not errors."""
    targets = []
    for row in rows:
        family = ENGINE_FAMILIES.get(row.engine)
        if family is None or row.metric not in PREDICTABLE:
            continue
        if row.weights not in DENSE_WEIGHTS and not quantized:
            continue
        try:
            precision = _precision(row.weights, row.kv_cache, row.activations)
        except InputError:
            continue  # a number format the hardware model does not count (e.g. nvfp4)
        if row.batch_size is None or (row.pipeline_parallel_size or 1) > 1:
            continue
        if row.cuda_graphs_or_compiled is False and family == "pytorch-compiled":
            continue  # an eager-mode baseline, not the compiled stack
        if row.metric == "ttft_s" and row.batch_size > 1:
            continue  # a static batch's TTFT includes queueing behind the other prompts
        output = row.output_tokens or DEFAULT_OUTPUT_TOKENS
        prompt = row.prompt_tokens or DEFAULT_PROMPT_TOKENS
        if not _fits_in_memory(row.model, row.gpu, row.tensor_parallel_size, row.batch_size,
                               prompt + output, precision):  # fmt: skip
            continue  # the engine had to queue sequences (or refused the format): skip
        if row.metric == "ttft_s":
            output = 1
        targets.append(
            Target(
                row_id=row.row_id,
                source_id=row.source_id,
                engine=row.engine,
                family=family,
                model=row.model,
                gpu=row.gpu,
                tp=row.tensor_parallel_size,
                batch=row.batch_size,
                prompt_tokens=prompt,
                output_tokens=output,
                metric=row.metric,
                value=row.value,
                weights=row.weights,
                kv_cache=row.kv_cache,
                activations=row.activations,
                last_prompt_token_in_decode=holds_last_prompt_token(row.engine, row.engine_version),
                ring_allreduce=row.engine in RING_ALLREDUCE_ENGINES,
            )
        )
    return targets


def holds_last_prompt_token(engine: str, version: str | None) -> bool:
    """Whether ``engine`` at ``version`` runs the last prompt token in the first decode step
    (``LAST_PROMPT_TOKEN_IN_DECODE``)."""
    versions = LAST_PROMPT_TOKEN_IN_DECODE.get(engine, ())
    return bool(version) and version.split()[0] in versions


def _fits_in_memory(
    model: str, gpu: str, tp: int, batch: int, context: int, precision: Precision
) -> bool:
    """Whether ``batch`` sequences of ``context`` tokens fit in ``tp`` GPUs (weights + KV) and
    the GPU runs ``precision`` (fp8 matmuls need fp8 tensor cores)."""

    try:
        arch, hardware = _arch(model), get_hardware(gpu)
        kwargs = {"context_tokens": context, "batch_size": batch, "precision": precision}
        if min_gpus(arch, hardware, **kwargs) > tp:
            return False
        predict_alpha(arch, hardware, 1, tp=tp, precision=precision)  # refused formats raise
        return True
    except (InputError, LookupError):
        return False


@lru_cache(maxsize=64)
def _precision(weights: str, kv_cache: str | None, activations: str | None) -> Precision:
    return parse_precision(weights, kv_cache, activations)


def published_targets(*, quantized: bool = True) -> list[Target]:
    from idealized_runtime.core.published import load_published

    return targets_from_rows(load_published(), quantized=quantized)


def precision_errors(
    targets: Sequence[Target],
    efficiency: Efficiency,
    factors: Mapping[str, Mapping[str, float]] | None = None,
) -> dict:
    """Errors on quantized figures of a stack calibrated on 16-bit ones, per weight format;
    without ``factors`` the precision transfer rests on the byte and FLOP counts alone."""
    by_format: dict[str, list[Target]] = {}
    for t in targets:
        if t.quantized:
            by_format.setdefault(t.weights, []).append(t)
    summaries = {}
    for weights, rows in sorted(by_format.items()):
        eff = format_efficiency(efficiency, (factors or {}).get(kernel_format(weights)))
        summaries[weights] = error_summary(relative_errors(rows, eff), [t.kind for t in rows])
    return {weights: summary["all"] for weights, summary in summaries.items()}


def quantized_speedup_errors(
    targets: Sequence[Target],
    efficiency: Efficiency,
    factors: Mapping[str, Mapping[str, float]] | None = None,
    *,
    predicted: Mapping[str, float] | None = None,
) -> list[dict]:
    """Error of quantized / 16-bit ratios of the same figure (model, source, GPU, TP, batch,
    lengths, metric), predicted by one stack calibration (with per-format ``factors``), or
    taken from ``predicted`` (row id -> predicted figure, e.g. held-out predictions)."""

    def predict(t: Target) -> float:
        if predicted is not None and t.row_id in predicted:
            return predicted[t.row_id]
        factor = (factors or {}).get(kernel_format(t.weights))
        return predict_target(t, format_efficiency(efficiency, factor))

    by_case: dict[tuple, dict[str, Target]] = {}
    for t in targets:
        case = (t.source_id, t.model, t.gpu, t.tp, t.batch, t.prompt_tokens, t.output_tokens,
                t.metric)  # fmt: skip
        by_case.setdefault(case, {})[t.weights] = t
    results = []
    for case, per_format in sorted(by_case.items()):
        base = next((per_format[w] for w in DENSE_WEIGHTS if w in per_format), None)
        if base is None:
            continue
        base_predicted = predict(base)
        for weights, t in sorted(per_format.items()):
            if not t.quantized:
                continue
            published = t.value / base.value
            ratio_predicted = predict(t) / base_predicted
            results.append(
                {
                    "source_id": case[0],
                    "model": case[1],
                    "gpu": case[2],
                    "tp": case[3],
                    "weights": weights,
                    "metric": case[7],
                    "published": published,
                    "predicted": ratio_predicted,
                    "error": ratio_predicted / published - 1.0,
                }
            )
    return results


@lru_cache(maxsize=256)
def _arch(name: str) -> Architecture:
    from idealized_runtime.core.architectures import load_architecture

    return load_architecture(name)


@dataclass(frozen=True)
class _TargetWork:
    """What a target's passes cost, counted once: the counts do not depend on the stack's
    efficiency, so a calibration re-times them without re-walking the layers."""

    hardware: Hardware
    num_layers: int
    prompt: PromptCosts
    decode: PhaseCosts | None  # one pass per chunk of decode steps, at the chunk's mean context
    decode_steps: np.ndarray | None  # steps in each chunk


@lru_cache(maxsize=4096)
def _target_work(target: Target) -> _TargetWork:
    arch = _arch(target.model)
    hardware = compute_hardware(get_hardware(target.gpu), target.precision)
    kwargs = {"batch": target.batch, "tp": target.tp, "precision": target.precision}
    p = float(target.prompt_tokens)
    prompt = prompt_costs(
        arch, p, last_token_in_decode=target.last_prompt_token_in_decode, **kwargs
    )
    if target.metric == "ttft_s":
        return _TargetWork(hardware, arch.num_layers, prompt, None, None)
    # The decode steps in DECODE_CHUNKS chunks at their mean contexts, as predict_runtime sums.
    steps = max(target.output_tokens - 1.0, 0.0)
    edges = steps * np.linspace(0.0, 1.0, DECODE_CHUNKS + 1)
    contexts = p - 1.0 + (edges[:-1] + edges[1:] + 1.0) / 2.0
    decode = forward_costs(arch, np.ones_like(contexts), contexts, **kwargs)
    return _TargetWork(hardware, arch.num_layers, prompt, decode, np.diff(edges))


def predict_target(target: Target, efficiency: Efficiency) -> float:
    """The figure ``target`` publishes, predicted by the time model with ``efficiency``
    (``roofline.predict_alpha`` / ``predict_runtime`` on the target's row, counted once). The
    first token and the all-reduces come the way the target's engine runs them (its work is
    counted that way, its all-reduce timed that way), whatever ``efficiency`` says."""
    work = _target_work(target)
    if target.tp > 1 and efficiency.ring_allreduce != target.ring_allreduce:
        efficiency = _with_ring_allreduce(efficiency, target.ring_allreduce)
    timing = {"num_layers": work.num_layers, "tp": target.tp, "efficiency": efficiency}
    alpha = float(prompt_time(work.prompt, work.hardware, **timing))
    if target.metric == "ttft_s":
        return alpha
    assert work.decode is not None and work.decode_steps is not None
    betas = pass_time(work.decode, work.hardware, **timing).total_s
    o = target.output_tokens
    runtime = alpha + float(np.sum(work.decode_steps * betas))
    if target.metric == "decode_tokens_per_s":
        return o / runtime
    if target.metric == "request_latency_s":
        return runtime
    if target.metric == "time_per_output_token_s":
        return (runtime - alpha) / max(o - 1, 1)
    throughput = target.batch * o / runtime
    if target.metric == "output_throughput_tokens_per_s_per_gpu":
        return throughput / target.tp
    return throughput


@lru_cache(maxsize=256)
def _with_ring_allreduce(efficiency: Efficiency, ring: bool) -> Efficiency:
    return replace(efficiency, ring_allreduce=ring)


@lru_cache(maxsize=4096)
def roofline_fraction(target: Target) -> float:
    """The ideal roofline's time for ``target`` over its published time: the fraction of the
    GPU's peaks the published figure needs (above 1: faster than the hardware allows)."""
    predicted = predict_target(target, IDEAL)
    if target.metric in ("ttft_s", "request_latency_s", "time_per_output_token_s"):
        return predicted / target.value
    return target.value / predicted


def beyond_roofline(target: Target) -> bool:
    """Whether ``target`` needs at least ``BEYOND_ROOFLINE`` of the GPU's peaks (a marked row)."""
    return roofline_fraction(target) >= BEYOND_ROOFLINE


def fittable(targets: Sequence[Target]) -> list[Target]:
    """``targets`` without marked rows (``beyond_roofline``): what calibrations fit on."""
    return [t for t in targets if not beyond_roofline(t)]


def relative_errors(targets: Sequence[Target], efficiency: Efficiency) -> np.ndarray:
    """predicted / published - 1 per target."""
    return np.array([predict_target(t, efficiency) / t.value - 1.0 for t in targets])


def _efficiency(x: np.ndarray) -> Efficiency:
    values = dict(zip(FITTED, (float(v) for v in x), strict=True))
    return Efficiency(**values, host_overlap=1.0, attention_score_passes=0.0)


def fit_stack(
    targets: Sequence[Target],
    *,
    prior: Efficiency | None = None,
    tp_prior: Efficiency | None = None,
) -> Efficiency:
    """Least squares on log errors over ``targets`` (marked rows left out: ``fittable``),
    lightly pulled toward typical values (or toward ``prior``'s, e.g. other stacks' calibration
    when ``targets`` are few). Figures all at TP 1 cannot pin the cost of tensor parallelism:
    with ``tp_prior`` those parameters (``TP_PARAMETERS``) are taken from it instead."""
    from scipy.optimize import least_squares  # only calibration needs scipy, not estimates

    if not targets:
        raise InputError("a stack needs at least one published figure to calibrate on")
    targets = fittable(targets) or list(targets)
    lower = np.array([b[0] for b in FITTED.values()])
    upper = np.array([b[1] for b in FITTED.values()])
    typical = np.array([b[2] for b in FITTED.values()])
    if prior is not None:
        typical = np.clip([getattr(prior, name) for name in FITTED], lower, upper)
    scale = np.array([b[3] for b in FITTED.values()])
    full = typical.copy()
    free = np.ones(len(FITTED), dtype=bool)
    if tp_prior is not None and all(t.tp == 1 for t in targets):
        for i, name in enumerate(FITTED):
            if name in TP_PARAMETERS:
                full[i] = np.clip(getattr(tp_prior, name), lower[i], upper[i])
                free[i] = False

    def parameters(x: np.ndarray) -> np.ndarray:
        values = full.copy()
        values[free] = x
        return values

    def residuals(x: np.ndarray) -> np.ndarray:
        eff = _efficiency(parameters(x))
        fit = [np.log(predict_target(t, eff) / t.value) for t in targets]
        prior = PRIOR_WEIGHT * (x - typical[free]) / scale[free] * 0.1
        return np.concatenate([fit, prior])

    result = least_squares(
        residuals,
        typical[free],
        bounds=(lower[free], upper[free]),
        x_scale=scale[free],
        ftol=1e-6,
        xtol=1e-6,
    )
    return _efficiency(parameters(result.x))


def kernel_format(weights: str) -> str:
    """The kernel family of a weight format: int4 kernels dequantize alike whatever the group
    size, so formats share their factors by kind (``int4-g32`` and ``int4-g64``: ``int4``)."""
    return weights.split("-g")[0]


def format_efficiency(efficiency: Efficiency, factors: Mapping[str, float] | None) -> Efficiency:
    """``efficiency`` with a weight format's kernel factors applied (capped at the peak)."""
    if not factors:
        return efficiency
    scaled = {name: getattr(efficiency, name) * float(factors[name]) for name in factors}
    for fraction in ("compute", "bandwidth"):  # fractions of a peak: at most 1
        if fraction in scaled:
            scaled[fraction] = min(1.0, scaled[fraction])
    return replace(efficiency, **scaled)


def fit_format_factors(targets: Sequence[Target], efficiency: Efficiency) -> dict[str, float]:
    """The kernel factors of one weight format (``FORMAT_FACTORS``) that best predict
    ``targets`` (figures in that format) on top of the stack's 16-bit ``efficiency``."""
    from scipy.optimize import least_squares

    targets = fittable(targets)
    if not targets:
        return {}
    names = list(FORMAT_FACTORS)
    lower = np.log([FORMAT_FACTORS[n][0] for n in names])
    upper = np.log([FORMAT_FACTORS[n][1] for n in names])

    def residuals(x: np.ndarray) -> np.ndarray:
        eff = format_efficiency(efficiency, dict(zip(names, np.exp(x), strict=True)))
        fit = [np.log(predict_target(t, eff) / t.value) for t in targets]
        return np.concatenate([fit, FORMAT_PRIOR_WEIGHT * x])

    result = least_squares(
        residuals,
        np.zeros(len(names)),
        bounds=(lower, upper),
        loss="soft_l1",
        f_scale=FORMAT_LOSS_SCALE,
    )
    return {n: float(v) for n, v in zip(names, np.exp(result.x), strict=True)}


def fit_all_format_factors(
    targets: Sequence[Target], efficiency: Efficiency
) -> dict[str, dict[str, float]]:
    """Kernel factors per quantized weight format among ``targets``."""
    kinds = sorted({kernel_format(t.weights) for t in targets if t.quantized})
    return {
        kind: fit_format_factors(
            [t for t in targets if t.quantized and kernel_format(t.weights) == kind], efficiency
        )
        for kind in kinds
    }


def error_summary(errors: Sequence[float] | np.ndarray, kinds: Sequence[str]) -> dict:
    """n, median and 90th percentile of |error|, overall and per kind (decode, ttft)."""
    errors = np.abs(np.asarray(errors, dtype=np.float64))
    kinds_arr = np.asarray(kinds)

    def stats(values: np.ndarray) -> dict:
        if values.size == 0:
            return {"n": 0, "median": None, "p90": None}
        return {
            "n": int(values.size),
            "median": float(np.median(values)),
            "p90": float(np.percentile(values, 90)),
        }

    summary = {"all": stats(errors)}
    for kind in ("decode", "ttft"):
        summary[kind] = stats(errors[kinds_arr == kind]) if errors.size else stats(errors)
    return summary


@lru_cache(maxsize=16)
def pooled_fit(targets: tuple[Target, ...]) -> Efficiency:
    """The other stacks' calibration a thin held-out group leans on: each engine family among
    ``targets`` calibrated on its own figures, their parameters averaged, so that every engine
    counts once (one fit over all their rows lets the engine that publishes the most figures
    set the typical all-reduce and overhead costs for the others). Fitted once however many
    held-out groups lean on it."""
    families = sorted({t.family for t in targets})
    fits = [fit_stack([t for t in targets if t.family == family]) for family in families]
    return _efficiency(np.array([np.mean([getattr(f, name) for f in fits]) for name in FITTED]))


def _held_out_priors(
    train: Sequence[Target], fallback: Sequence[Target]
) -> tuple[Efficiency | None, Efficiency | None]:
    """(prior, tp_prior) of a held-out calibration on ``train``: the averaged calibration of
    ``fallback`` (the other stacks' figures) as the whole prior when ``train`` is too thin to
    pin the parameters (fewer than ``MIN_OWN_ROWS``), or for the all-reduce parameters alone
    when ``train`` is all on one GPU (the group held the stack's only multi-GPU figures)."""
    if not fallback:
        return None, None
    if len(train) < MIN_OWN_ROWS:
        return pooled_fit(tuple(fallback)), None
    if all(t.tp == 1 for t in train):
        return None, pooled_fit(tuple(fallback))
    return None, None


def held_out_errors(
    targets: Sequence[Target],
    key: Callable[[Target], str],
    *,
    fallback: Sequence[Target] = (),
) -> np.ndarray:
    """Error of each target when the stack is calibrated without its group (``key``).

    A group that leaves fewer than ``MIN_OWN_ROWS`` of the stack's figures behind (too few to
    pin its parameters) is predicted by a calibration on what is left, pulled toward the
    calibration of ``fallback`` (the other stacks' rows) instead of the typical values, or by
    that calibration itself when nothing is left; with no fallback, NaN."""
    errors = np.full(len(targets), np.nan)
    for group in sorted({key(t) for t in targets}):
        held = [i for i, t in enumerate(targets) if key(t) == group]
        train = [t for t in targets if key(t) != group]
        prior, tp_prior = _held_out_priors(train, fallback)
        if not train and prior is None:
            continue
        efficiency = fit_stack(train, prior=prior, tp_prior=tp_prior) if train else prior
        errors[held] = relative_errors([targets[i] for i in held], efficiency)
    return errors


def quantized_held_out_errors(
    targets: Sequence[Target],
    key: Callable[[Target], str] | None,
    *,
    fallback: Sequence[Target] = (),
) -> np.ndarray:
    """Error of each quantized target of one stack (``targets``: its 16-bit and quantized
    figures) predicted by a calibration that never saw the target's group (``key``; None: in
    sample): the 16-bit parameters refitted without the group, then each format's kernel
    factors refitted on that format's remaining figures (none left: bytes and FLOPs alone)."""
    errors = np.full(len(targets), np.nan)
    quantized = [i for i, t in enumerate(targets) if t.quantized]
    groups = sorted({key(targets[i]) for i in quantized}) if key else [None]
    for group in groups:
        held = [i for i in quantized if key is None or key(targets[i]) == group]
        train = [t for t in targets if key is None or key(t) != group]
        dense = [t for t in train if not t.quantized]
        prior, tp_prior = _held_out_priors(dense, fallback)
        if not dense and prior is None:
            continue
        base = fit_stack(dense, prior=prior, tp_prior=tp_prior) if dense else prior
        assert base is not None
        factors = fit_all_format_factors([t for t in train if t.quantized], base)
        for i in held:
            t = targets[i]
            eff = format_efficiency(base, factors.get(kernel_format(t.weights)))
            errors[i] = predict_target(t, eff) / t.value - 1.0
    return errors


def tp_speedup_errors(targets: Sequence[Target], predicted: Sequence[float]) -> list[dict]:
    """Error of TP=k / TP=1 ratios of the same figure (model, source, GPU, batch, lengths)."""
    by_case: dict[tuple, dict[int, tuple[float, float]]] = {}
    for t, pred in zip(targets, predicted, strict=True):
        if t.metric not in ("decode_tokens_per_s", "ttft_s"):
            continue
        case = (t.source_id, t.model, t.gpu, t.batch, t.prompt_tokens, t.output_tokens, t.metric)
        by_case.setdefault(case, {})[t.tp] = (t.value, pred)
    results = []
    for case, per_tp in sorted(by_case.items()):
        if 1 not in per_tp:
            continue
        base_measured, base_predicted = per_tp[1]
        for tp, (measured, pred) in sorted(per_tp.items()):
            if tp == 1 or not np.isfinite(pred) or not np.isfinite(base_predicted):
                continue
            ratio = measured / base_measured
            ratio_predicted = pred / base_predicted
            results.append(
                {
                    "source_id": case[0],
                    "model": case[1],
                    "gpu": case[2],
                    "metric": case[6],
                    "tp": tp,
                    "published": ratio,
                    "predicted": ratio_predicted,
                    "error": ratio_predicted / ratio - 1.0,
                }
            )
    return results


# --- the stack object -----------------------------------------------------------------------


@dataclass(frozen=True)
class StackCalibration:
    """A named stack: its time-model parameters, what they were fitted on, and their errors."""

    name: str
    description: str
    efficiency: Efficiency
    engines: tuple[str, ...] = ()
    hardware: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    rows: tuple[str, ...] = ()
    errors: dict = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    notes: str = ""
    # Per quantized weight format: kernel factors on ``efficiency`` (``FORMAT_FACTORS``).
    format_factors: dict[str, dict[str, float]] = field(default_factory=dict)

    def efficiency_for(self, weights: str) -> Efficiency:
        """The stack's efficiency for weights in ``weights`` (its format's kernel factors when
        calibrated; else the 16-bit one, the format counted by its bytes and FLOPs alone)."""
        return format_efficiency(self.efficiency, self.format_factors.get(kernel_format(weights)))

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "aliases": list(self.aliases),
            "engines": list(self.engines),
            "hardware": list(self.hardware),
            "models": list(self.models),
            "efficiency": self.efficiency.to_dict(),
            "format_factors": self.format_factors,
            "sources": list(self.sources),
            "rows": list(self.rows),
            "errors": self.errors,
            "notes": self.notes,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> StackCalibration:
        try:
            return cls(
                name=data["name"],
                description=data.get("description", ""),
                efficiency=Efficiency.from_dict(data["efficiency"]),
                engines=tuple(data.get("engines", ())),
                hardware=tuple(data.get("hardware", ())),
                models=tuple(data.get("models", ())),
                sources=tuple(data.get("sources", ())),
                rows=tuple(data.get("rows", ())),
                errors=dict(data.get("errors", {})),
                aliases=tuple(data.get("aliases", ())),
                notes=data.get("notes", ""),
                format_factors={
                    weights: {name: float(v) for name, v in factors.items()}
                    for weights, factors in dict(data.get("format_factors", {})).items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InputError(f"not a stack file: missing or bad {error}") from None

    def headline_error(self, kind: str = "decode") -> float | None:
        """Median |error| of ``kind`` figures held out by source (else by model, else in
        sample): the number to rank stacks by."""
        for split in ("leave_one_source_out", "leave_one_model_out", "in_sample"):
            value = self.errors.get(split, {}).get(kind, {}).get("median")
            if value is not None:
                return float(value)
        return None


def calibrate_stack(
    name: str,
    targets: Sequence[Target],
    *,
    fallback: Sequence[Target] = (),
    description: str | None = None,
    held_out: bool = True,
) -> StackCalibration:
    """Fit a stack on ``targets`` and record its in-sample (and held-out) errors."""
    single_gpu = all(t.tp == 1 for t in targets)
    tp_prior = pooled_fit(tuple(fallback)) if single_gpu and fallback else None
    efficiency = replace(
        fit_stack(targets, tp_prior=tp_prior),
        last_prompt_token_in_decode=all(t.last_prompt_token_in_decode for t in targets),
        ring_allreduce=all(t.ring_allreduce for t in targets),
    )
    kinds = [t.kind for t in targets]
    in_sample = relative_errors(targets, efficiency)
    errors: dict = {"in_sample": error_summary(in_sample, kinds)}
    marked = np.array([beyond_roofline(t) for t in targets])
    if marked.any():
        errors["beyond_roofline"] = {
            t.row_id: round(roofline_fraction(t), 3) for t in targets if beyond_roofline(t)
        }
    if held_out:
        by_source = held_out_errors(targets, lambda t: t.source_id, fallback=fallback)
        by_model = held_out_errors(targets, lambda t: t.model, fallback=fallback)
        for split, values in (
            ("leave_one_source_out", by_source),
            ("leave_one_model_out", by_model),
        ):
            keep = ~np.isnan(values)
            kept_kinds = [k for k, m in zip(kinds, keep, strict=True) if m]
            errors[split] = error_summary(values[keep], kept_kinds)
            if marked.any():
                keep &= ~marked
                kept_kinds = [k for k, m in zip(kinds, keep, strict=True) if m]
                errors[f"{split}_unmarked"] = error_summary(values[keep], kept_kinds)
        if len({t.source_id for t in targets}) == 1:
            errors["held_out_note"] = (
                "one source: held out by source means predicted by the other stacks' averaged "
                "calibration"
            )
        predicted = [t.value * (1 + e) for t, e in zip(targets, by_source, strict=True)]
        ratios = tp_speedup_errors(targets, predicted)
        if ratios:
            absolute = np.abs([r["error"] for r in ratios])
            errors["tp_speedup_leave_one_source_out"] = {
                "n": len(ratios),
                "median": float(np.median(absolute)),
                "max": float(np.max(absolute)),
            }
    return StackCalibration(
        name=name,
        description=description or FAMILY_DESCRIPTIONS.get(name, name),
        efficiency=efficiency,
        engines=tuple(sorted({t.engine for t in targets})),
        hardware=tuple(sorted({t.gpu for t in targets})),
        models=tuple(sorted({t.model for t in targets})),
        sources=tuple(sorted({t.source_id for t in targets})),
        rows=tuple(t.row_id for t in targets),
        errors=errors,
    )


def helm_stack() -> StackCalibration:
    """HELM's 2022 Megatron-LM A100 stack, from its shipped calibration."""
    from idealized_runtime.cost_model.calibration import SHIPPED_CALIBRATION, shipped_calibration

    shipped = shipped_calibration(SHIPPED_CALIBRATION)
    return StackCalibration(
        name=HELM_STACK,
        description="Megatron-LM (2022), fp16, no CUDA graphs: the HELM efficiency paper's stack",
        efficiency=shipped.efficiency,
        engines=("megatron-lm-2022",),
        hardware=(shipped.hardware,),
        models=shipped.models,
        sources=("helm-efficiency-megatron-a100-grid",),
        errors={
            "in_sample": {
                "ttft": {"n": len(shipped.models), "median": shipped.alpha_mape, "p90": None},
                "decode": {"n": len(shipped.models), "median": shipped.beta_mape, "p90": None},
            }
        },
        aliases=tuple(a for a, target in ALIASES.items() if target == HELM_STACK),
        notes="Fitted on the profiled (p, o) grid of 13 models; see data/calibrations/.",
    )


def calibrate_published(
    targets: Sequence[Target] | None = None, *, held_out: bool = True
) -> list[StackCalibration]:
    """One stack per engine family with rows in the published table."""
    targets = list(published_targets() if targets is None else targets)
    dense = [t for t in targets if not t.quantized]
    families = sorted({t.family for t in dense})
    stacks = []
    for family in families:
        own = [t for t in dense if t.family == family]
        others = [t for t in dense if t.family != family]
        stack = calibrate_stack(family, own, fallback=others, held_out=held_out)
        quantized = [t for t in targets if t.family == family and t.quantized]
        if quantized:
            factors = fit_all_format_factors(quantized, stack.efficiency)
            stack = replace(stack, format_factors=factors)
            stack.errors["quantized_predicted"] = precision_errors(quantized, stack.efficiency)
            stack.errors["quantized_calibrated"] = quantized_errors(
                own + quantized, fallback=others, held_out=held_out
            )
        stacks.append(stack)
    return stacks


def quantized_errors(
    targets: Sequence[Target], *, fallback: Sequence[Target] = (), held_out: bool = True
) -> dict:
    """Per quantized weight format of one stack's figures (16-bit and quantized), the errors
    with per-format kernel factors: in sample and held out by source and by model, and the
    error of quantized / 16-bit speed-ups held out by source."""
    splits: dict[str, Callable[[Target], str] | None] = {"in_sample": None}
    if held_out:
        splits |= {
            "leave_one_source_out": lambda t: t.source_id,
            "leave_one_model_out": lambda t: t.model,
        }
    formats = sorted({t.weights for t in targets if t.quantized})
    result: dict = {weights: {} for weights in formats}
    for split, key in splits.items():
        values = quantized_held_out_errors(targets, key, fallback=fallback)
        for weights in formats:
            at = [i for i, t in enumerate(targets) if t.weights == weights]
            kinds = [targets[i].kind for i in at]
            result[weights][split] = error_summary(values[at], kinds)["all"]
        if split == "leave_one_source_out":
            predicted = {
                t.row_id: t.value * (1 + e)
                for t, e in zip(targets, values, strict=True)
                if t.quantized and np.isfinite(e)
            }
            # 16-bit figures as predicted by the calibration without their source, too.
            dense_errors = held_out_errors(
                [t for t in targets if not t.quantized], key, fallback=fallback
            )
            dense = [t for t in targets if not t.quantized]
            predicted |= {
                t.row_id: t.value * (1 + e) for t, e in zip(dense, dense_errors, strict=True)
            }
            ratios = quantized_speedup_errors(targets, IDEAL, predicted=predicted)
            for weights in formats:
                absolute = np.abs([r["error"] for r in ratios if r["weights"] == weights])
                if absolute.size:
                    result[weights]["speedup_leave_one_source_out"] = {
                        "n": int(absolute.size),
                        "median": float(np.median(absolute)),
                        "max": float(np.max(absolute)),
                    }
    return result


# --- shipped stacks -------------------------------------------------------------------------


def stacks_dir() -> Path:
    return data_path(STACKS_DIR)


@lru_cache(maxsize=1)
def shipped_stacks() -> dict[str, StackCalibration]:
    """Every stack in ``data/stacks/``, by name."""
    found = {}
    for path in sorted(stacks_dir().glob("*.json")):
        stack = StackCalibration.from_json(json.loads(path.read_text(encoding="utf-8")))
        found[stack.name] = stack
    return found


def stack_names() -> list[str]:
    return sorted(shipped_stacks())


def get_stack(name: str) -> StackCalibration:
    """A shipped stack by name or alias; unknown names raise a one-line ``InputError``."""
    stacks = shipped_stacks()
    resolved = ALIASES.get(name, name)
    if resolved not in stacks:
        raise InputError(f"unknown stack {name!r}; known: {', '.join(sorted(stacks))}")
    return stacks[resolved]


def save_stack(stack: StackCalibration, directory: str | Path) -> Path:
    path = Path(directory) / f"{stack.name}.json"
    with atomic_writer(path) as handle:
        json.dump(stack.to_json(), handle, indent=2)
        handle.write("\n")
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Calibrate the reference stacks")
    parser.add_argument(
        "--out", default=str(Path(__file__).resolve().parent.parent / "data" / STACKS_DIR)
    )
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for stack in [*calibrate_published(), helm_stack()]:
        path = save_stack(stack, args.out)
        print(f"wrote {path}: {len(stack.rows)} rows, errors {stack.errors}")


if __name__ == "__main__":
    main()


# --- estimates on a stack ----------------------------------------------------------------


def hardware_model_estimate(
    arch: Architecture,
    hardware: Hardware,
    num_prompt_tokens: int,
    num_output_tokens: int,
    *,
    batch_size: int = 1,
    tp: int | None = None,
    precision: Precision | None = None,
    ideal: bool = False,
    stack: str | None = None,
) -> tuple[Estimate, str]:
    """The hardware model's estimate as ``estimate --arch`` and the REST API give it: on a
    reference stack (source ``calibrated``; the stack's name is returned; default
    ``DEFAULT_STACK``) or the ideal roofline (``ideal``: source ``analytic``,
    name ""). ``precision`` defaults to the checkpoint's own (``arch.precision``), else bf16."""
    precision = precision or arch.precision or Precision()
    if ideal:
        if stack is not None:
            raise InputError("a reference stack and the ideal roofline exclude one another")
        efficiency, source, calibration = IDEAL, "analytic", ""
    else:
        chosen = get_stack(stack or DEFAULT_STACK)
        efficiency = chosen.efficiency_for(precision.weights)
        source, calibration = "calibrated", chosen.name
    estimate = estimate_from_architecture(
        arch,
        hardware,
        num_prompt_tokens,
        num_output_tokens,
        batch_size=batch_size,
        tp=tp,
        dtype=precision.compute_dtype,
        efficiency=efficiency,
        source=source,
        precision=precision,
    )
    return estimate, calibration


class HardwareModelRequest(Protocol):
    """What a hardware-model estimate reads from a request: the REST API's body, a benchmark
    file's ``estimates`` entry (any object with these attributes)."""

    prompt_tokens: int
    output_tokens: int
    batch_size: int
    weights: str | None
    kv_cache: str | None
    activations: str | None
    ideal: bool
    stack: str | None

    @property
    def tp(self) -> int | None: ...


def estimate_request(
    request: HardwareModelRequest, arch: Architecture, hardware: Hardware
) -> tuple[Estimate, Precision, str]:
    """``hardware_model_estimate`` for ``request`` on ``arch`` and ``hardware``: the precision
    parsed from the request's labels (unset parts: the checkpoint's own), the estimate, and the
    stack's name ("" for the ideal roofline). InputError for refused input."""
    precision = parse_precision(
        request.weights, request.kv_cache, request.activations, default=arch.precision
    )
    estimate, calibration = hardware_model_estimate(
        arch,
        hardware,
        request.prompt_tokens,
        request.output_tokens,
        batch_size=request.batch_size,
        tp=request.tp,
        precision=precision,
        ideal=request.ideal,
        stack=request.stack,
    )
    return estimate, precision, calibration
