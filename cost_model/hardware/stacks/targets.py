"""Published figures as targets of the time model, and their prediction.

A ``Target`` is one row of ``data/published/measurements.csv`` the hardware model can predict
(an engine family it calibrates, a known batch, an architecture and a GPU in the catalogs, a
precision the GPU runs); ``predict_target`` predicts its figure on a stack ``Efficiency``, its
work counted once however often a fit re-times it; ``roofline_fraction`` marks figures no engine
can reach under their stated settings (``beyond_roofline``: kept in the reports, not fitted).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from idealized_runtime.core.catalog import get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    IDEAL,
    Architecture,
    Deployment,
    Efficiency,
    Hardware,
    Precision,
    parse_precision,
)
from idealized_runtime.cost_model.hardware.counts import (
    PhaseCosts,
    PromptCosts,
    forward_costs,
    prompt_costs,
)
from idealized_runtime.cost_model.hardware.planner import min_gpus
from idealized_runtime.cost_model.hardware.roofline import (
    DECODE_CHUNKS,
    compute_hardware,
    hardware_model_alpha,
    pass_time,
    prompt_time,
)

# Engine family of each engine named in the published table.
ENGINE_FAMILIES: dict[str, str] = {
    "gpt-fast": "pytorch-compiled",
    "torchao": "pytorch-compiled",
    "lmdeploy": "lmdeploy",
    "tensorrt-llm": "tensorrt-llm",
    "vllm": "vllm",
    "sglang": "sglang",
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
        deployment = Deployment(architecture=arch, hardware=hardware, tp=tp, precision=precision)
        hardware_model_alpha(deployment, 1)  # a format the GPU cannot run raises
        return True
    except (InputError, LookupError):
        return False


@lru_cache(maxsize=64)
def _precision(weights: str, kv_cache: str | None, activations: str | None) -> Precision:
    return parse_precision(weights, kv_cache, activations)


def published_targets(*, quantized: bool = True) -> list[Target]:
    from idealized_runtime.core.published import load_published

    return targets_from_rows(load_published(), quantized=quantized)


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
    # The decode steps in DECODE_CHUNKS chunks at their mean contexts, as
    # hardware_model_runtime sums them.
    steps = max(target.output_tokens - 1.0, 0.0)
    edges = steps * np.linspace(0.0, 1.0, DECODE_CHUNKS + 1)
    contexts = p - 1.0 + (edges[:-1] + edges[1:] + 1.0) / 2.0
    decode = forward_costs(arch, np.ones_like(contexts), contexts, **kwargs)
    return _TargetWork(hardware, arch.num_layers, prompt, decode, np.diff(edges))


def predict_target(target: Target, efficiency: Efficiency) -> float:
    """The figure ``target`` publishes, predicted by the time model with ``efficiency``
    (``roofline.hardware_model_alpha`` / ``hardware_model_runtime`` on the target's row, counted
    once). The first token and the all-reduces come the way the target's engine runs them (its
    work is counted that way, its all-reduce timed that way), whatever ``efficiency`` says."""
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
