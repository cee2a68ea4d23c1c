"""Serving a model on real accelerators: how many GPUs, what a request costs, batch throughput.

Three questions, three functions (their signatures are stable: the runner and the REST service
call the first two):

``min_gpus``
    The fewest GPUs of a kind that hold the weights and the KV cache of ``batch_size`` sequences
    of ``context_tokens``, keeping ``reserve_fraction`` of each GPU's memory for activations,
    the CUDA context and allocator slack (0.10, as vLLM's default gpu_memory_utilization 0.9).
    Layouts tried, fewest GPUs first: tensor parallelism over tp = 1, 2, 4, 8 GPUs of one node
    (tp must divide num_heads, and divide or be a multiple of num_kv_heads, since a KV head
    cannot be split; it is replicated when tp > num_kv_heads). Beyond one node, tensor
    parallelism would all-reduce every layer over the network, so the planner adds pipeline
    stages instead: pp groups of the largest valid tp, each holding ceil(layers / pp) layers
    (and the embedding or the LM head on the end stages).
``cost_variants``
    Accelerator-seconds, energy and dollars of a runtime on ``num_gpus`` GPUs.
``decode_throughput``
    Idealized decode throughput and cost per million output tokens at batch sizes 1..256:
    a step reads the weights once for the whole batch and each sequence's KV cache, and does
    batch x the FLOPs, so throughput grows with the batch until compute catches up with memory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    Architecture,
    Dtype,
    FittedCostModel,
    Hardware,
    Precision,
)
from idealized_runtime.cost_model.roofline import (
    IDEAL,
    Efficiency,
    check_precision,
    check_size,
    decode_step_time,
    end_weight_parameters,
    kv_bytes_per_token_layer,
    stored_layer_bytes,
)

GPUS_PER_NODE = 8
DEFAULT_RESERVE_FRACTION = 0.10
# Beyond this many GPUs a "deployment" is not a serving plan any more.
MAX_GPUS = 1024
BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GB = 1e9


@dataclass(frozen=True)
class GpuPlan:
    """A layout that fits: ``tp`` GPUs per pipeline stage, ``pp`` stages."""

    num_gpus: int
    tp: int
    pp: int
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float
    usable_bytes_per_gpu: float

    @property
    def used_fraction(self) -> float:
        return (self.weight_bytes_per_gpu + self.kv_bytes_per_gpu) / self.usable_bytes_per_gpu


def valid_tensor_parallel_sizes(arch: Architecture, max_tp: int = GPUS_PER_NODE) -> list[int]:
    """Powers of two up to ``max_tp`` that split the heads evenly (see the module docstring)."""
    sizes = []
    tp = 1
    while tp <= max_tp:
        if arch.num_heads % tp == 0 and (arch.kv_heads % tp == 0 or tp % arch.kv_heads == 0):
            sizes.append(tp)
        tp *= 2
    return sizes


def memory_per_gpu(
    arch: Architecture,
    tp: int,
    pp: int,
    context_tokens: int,
    batch_size: int,
    dtype: Dtype,
    precision: Precision | None = None,
) -> tuple[float, float]:
    """(weight bytes, KV bytes) on the fullest GPU of a tp x pp layout.

    Weights at ``precision`` (default: ``dtype``), quantized ones with their scales; the KV
    cache holds ``context_tokens`` per sequence, at most the window in sliding-window layers.
    Stages hold consecutive blocks of ceil(layers / pp) layers, the embedding on the first and
    the LM head on the last; the fullest stage is the one that counts."""
    precision = precision or Precision.from_dtype(dtype)
    check_size(arch)
    per_stage = math.ceil(arch.num_layers / pp)
    kv_token_layer = kv_bytes_per_token_layer(arch, precision, tp)
    embedding, head = (
        params * precision.dense_weight_bytes for params in end_weight_parameters(arch)
    )
    if arch.tie_embeddings and pp > 1:  # the last stage keeps its own copy for the LM head
        head += arch.vocab_size * arch.hidden_size * precision.dense_weight_bytes
    # Prefix sums over layers: each stage's weights and kept KV tokens in O(1).
    weights_before = np.concatenate(([0.0], np.cumsum(stored_layer_bytes(arch, precision))))
    window = min(context_tokens, arch.sliding_window or context_tokens)
    kept = [
        window if arch.attention_kind(i) == "sliding" else context_tokens
        for i in range(min(arch.num_layers, len(arch.layer_pattern)))
    ]
    kept_before = np.concatenate(([0.0], np.cumsum(np.resize(kept, arch.num_layers))))
    worst = (0.0, 0.0)
    for start in range(0, arch.num_layers, per_stage):
        stop = min(start + per_stage, arch.num_layers)
        weights = float(weights_before[stop] - weights_before[start])
        weights += (embedding if start == 0 else 0.0) + (head if stop == arch.num_layers else 0.0)
        kv = float(kept_before[stop] - kept_before[start]) * kv_token_layer * batch_size
        if weights / tp + kv > sum(worst):
            worst = (weights / tp, kv)
    return worst


def plan_gpus(
    arch: Architecture,
    hardware_or_memory_gb: Hardware | float,
    *,
    context_tokens: int,
    batch_size: int = 1,
    dtype: Dtype = "bfloat16",
    reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
    gpus_per_node: int = GPUS_PER_NODE,
    tp: int | None = None,
    precision: Precision | None = None,
) -> GpuPlan:
    """The smallest layout that fits (see the module docstring); InputError if none does.

    ``tp`` fixes the tensor-parallel size (then only pipeline stages are added)."""
    memory_gb = (
        hardware_or_memory_gb.memory_gb
        if isinstance(hardware_or_memory_gb, Hardware)
        else float(hardware_or_memory_gb)
    )
    if not memory_gb > 0:
        raise InputError(f"GPU memory must be positive, got {memory_gb} GB")
    if not 0 <= reserve_fraction < 1:
        raise InputError(f"reserve_fraction must be in [0, 1), got {reserve_fraction}")
    if context_tokens < 1 or batch_size < 1:
        raise InputError("context_tokens and batch_size must be >= 1")
    usable = memory_gb * GB * (1.0 - reserve_fraction)
    sizes = valid_tensor_parallel_sizes(arch, gpus_per_node)
    if tp is not None:
        if tp not in valid_tensor_parallel_sizes(arch, max(tp, gpus_per_node)):
            raise InputError(
                f"tensor-parallel size {tp} is not valid for {arch.name} (num_heads "
                f"{arch.num_heads}, num_kv_heads {arch.kv_heads}); valid: "
                + ", ".join(map(str, sizes))
            )
        sizes = [tp]

    def plan(tp: int, pp: int) -> GpuPlan | None:
        weights, kv = memory_per_gpu(arch, tp, pp, context_tokens, batch_size, dtype, precision)
        if weights + kv > usable:
            return None
        return GpuPlan(tp * pp, tp, pp, weights, kv, usable)

    for size in sizes:
        if found := plan(size, 1):
            return found
    widest = sizes[-1]
    for pp in range(2, min(arch.num_layers, MAX_GPUS // widest) + 1):
        if found := plan(widest, pp):
            return found
    weights, kv = memory_per_gpu(
        arch, widest, arch.num_layers, context_tokens, batch_size, dtype, precision
    )
    label = precision.label if precision else dtype
    raise InputError(
        f"{arch.name} ({label}, {batch_size} x {context_tokens} tokens of context) does not fit "
        f"on {memory_gb:g} GB GPUs: even one layer per pipeline stage at tensor-parallel size "
        f"{widest} needs {(weights + kv) / GB:.1f} GB per GPU, {usable / GB:.1f} GB usable"
    )


def min_gpus(
    arch: Architecture,
    hardware_or_memory_gb: Hardware | float,
    *,
    context_tokens: int,
    batch_size: int = 1,
    dtype: Dtype = "bfloat16",
    reserve_fraction: float = DEFAULT_RESERVE_FRACTION,
    precision: Precision | None = None,
) -> int:
    """Minimum number of GPUs of a kind to serve ``arch`` (see ``plan_gpus`` for the layout)."""
    return plan_gpus(
        arch,
        hardware_or_memory_gb,
        context_tokens=context_tokens,
        batch_size=batch_size,
        dtype=dtype,
        reserve_fraction=reserve_fraction,
        precision=precision,
    ).num_gpus


def cost_variants(runtime_s: float, num_gpus: int, hardware: Hardware) -> dict[str, float]:
    """What ``runtime_s`` on ``num_gpus`` GPUs of ``hardware`` costs.

    - ``gpu_seconds``: runtime x GPUs (the cost-aware idealized runtime).
    - ``energy_j``: board power (TDP) x GPUs x runtime. An upper bound for the GPUs themselves
      (decode rarely draws full TDP) that leaves out host CPUs, networking and cooling (PUE).
    - ``cost_usd``: GPU-hours x the indicative hourly price in ``data/hardware.yaml``
      (0 where no price is known).
    """
    if not (math.isfinite(runtime_s) and runtime_s >= 0):
        raise InputError(f"runtime must be a finite non-negative number of seconds: {runtime_s}")
    if num_gpus < 1:
        raise InputError(f"num_gpus must be >= 1, got {num_gpus}")
    gpu_seconds = float(runtime_s) * num_gpus
    energy_j = hardware.board_power_w * gpu_seconds
    return {
        "runtime_s": float(runtime_s),
        "num_gpus": float(num_gpus),
        "gpu_seconds": gpu_seconds,
        "energy_j": energy_j,
        "energy_wh": energy_j / 3600.0,
        "cost_usd": hardware.hourly_price_usd * gpu_seconds / 3600.0,
    }


@dataclass(frozen=True)
class ThroughputPoint:
    """Decode at one batch size: step time, output tokens/s, cost per million output tokens."""

    batch_size: int
    num_gpus: int
    step_s: float
    tokens_per_s: float
    usd_per_million_tokens: float
    joules_per_token: float
    memory_bound: bool
    fits: bool  # weights + KV of the whole batch fit on ``num_gpus`` GPUs


def decode_throughput(
    arch: Architecture,
    hardware: Hardware,
    *,
    context_tokens: int,
    batch_sizes: Sequence[int] = BATCH_SIZES,
    tp: int | None = None,
    dtype: Dtype = "bfloat16",
    efficiency: Efficiency = IDEAL,
    precision: Precision | None = None,
) -> list[ThroughputPoint]:
    """Idealized decode throughput per batch size at a context length.

    ``tp`` defaults to the GPUs the model needs at batch 1 (a single-node layout); batches
    whose KV cache would not fit on them are still computed but flagged ``fits=False``.
    """
    if tp is None:
        plan = plan_gpus(
            arch, hardware, context_tokens=context_tokens, dtype=dtype, precision=precision
        )
        if plan.pp > 1:
            raise InputError(
                f"{arch.name} needs {plan.num_gpus} {hardware.name} GPUs over {plan.pp} pipeline "
                "stages; the throughput table models one node (pass tp explicitly)"
            )
        tp = plan.tp
    points = []
    for batch in batch_sizes:
        step = decode_step_time(
            arch,
            hardware,
            context_tokens,
            tp=tp,
            dtype=dtype,
            batch=batch,
            efficiency=efficiency,
            precision=precision,
        )
        seconds = float(step.total_s)
        tokens_per_s = batch / seconds
        cost = cost_variants(seconds, tp, hardware)
        weights, kv = memory_per_gpu(arch, tp, 1, context_tokens, batch, dtype, precision)
        usable = hardware.memory_gb * GB * (1.0 - DEFAULT_RESERVE_FRACTION)
        points.append(
            ThroughputPoint(
                batch_size=batch,
                num_gpus=tp,
                step_s=seconds,
                tokens_per_s=tokens_per_s,
                usd_per_million_tokens=cost["cost_usd"] / batch * 1e6,
                joules_per_token=cost["energy_j"] / batch,
                memory_bound=bool(step.memory_bound),
                fits=weights + kv <= usable,
            )
        )
    return points


# --- one request, end to end (what `idealized-runtime estimate` and the REST API print) -------


@dataclass(frozen=True)
class Estimate:
    """A request's runtime and costs, and where the figures come from.

    ``source``: ``profiled`` (a fit of measured timings), ``calibrated`` (the hardware model
    with a shipped stack calibration) or ``analytic`` (the ideal roofline).
    """

    source: str
    model: str
    hardware: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    batch_size: int
    runtime_s: float
    alpha_s: float
    beta_s: float  # mean seconds per decode step of this request
    tp: int
    num_gpus: int
    costs: dict[str, float]  # cost_variants(); empty when the hardware is unknown
    notes: tuple[str, ...] = ()
    precision: str | None = None  # Precision.label of a hardware-model estimate

    @property
    def output_tokens_per_s(self) -> float:
        return self.batch_size * self.num_output_tokens / self.runtime_s

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "model": self.model,
            "hardware": self.hardware,
            "num_prompt_tokens": self.num_prompt_tokens,
            "num_output_tokens": self.num_output_tokens,
            "batch_size": self.batch_size,
            "runtime_s": self.runtime_s,
            "alpha_s": self.alpha_s,
            "beta_s": self.beta_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "tensor_parallel_size": self.tp,
            "num_gpus": self.num_gpus,
            "precision": self.precision,
            **{k: v for k, v in self.costs.items() if k not in ("runtime_s", "num_gpus")},
            "notes": list(self.notes),
        }


def _check_tokens(num_prompt_tokens: int, num_output_tokens: int, batch_size: int) -> None:
    if num_prompt_tokens < 1 or num_output_tokens < 0:
        raise InputError("prompt token counts must be >= 1 and output token counts >= 0")
    if batch_size < 1:
        raise InputError(f"batch size must be >= 1, got {batch_size}")


def estimate_from_fit(
    fit: FittedCostModel,
    num_prompt_tokens: int,
    num_output_tokens: int,
    *,
    hardware: Hardware | None = None,
    num_gpus: int | None = None,
) -> Estimate:
    """A fitted (profiled) model's figures; costs on ``hardware`` (default: the fit's stack's,
    when the catalog knows it) over ``num_gpus`` (default: the stack's device count)."""
    from idealized_runtime.cost_model import evaluate

    _check_tokens(num_prompt_tokens, num_output_tokens, 1)
    runtime = float(evaluate.predict_runtime(fit, num_prompt_tokens, num_output_tokens))
    alpha = float(evaluate.predict_alpha(fit, num_prompt_tokens))
    steps = max(num_output_tokens - 1, 0)
    overhead = fit.overhead_s or 0.0
    beta = (
        (runtime - alpha - overhead) / steps
        if steps
        else fit.beta_s + fit.beta_per_context_token_s * num_prompt_tokens
    )
    stack = fit.stack
    tp = stack.tensor_parallel_size if stack else 1
    gpus = num_gpus or (stack.num_devices if stack else 1)
    notes = []
    if hardware is None and stack is not None:
        from idealized_runtime.core.catalog import hardware_catalog

        hardware = hardware_catalog().get(stack.hardware)
    if hardware is None:
        notes.append("hardware unknown: no GPU-seconds, energy or dollars")
    return Estimate(
        source="profiled",
        model=fit.model,
        hardware=hardware.name if hardware else None,
        num_prompt_tokens=num_prompt_tokens,
        num_output_tokens=num_output_tokens,
        batch_size=1,
        runtime_s=runtime,
        alpha_s=alpha,
        beta_s=beta,
        tp=tp,
        num_gpus=gpus,
        costs=cost_variants(runtime, gpus, hardware) if hardware else {},
        notes=tuple(notes),
    )


def estimate_from_architecture(
    arch: Architecture,
    hardware: Hardware,
    num_prompt_tokens: int,
    num_output_tokens: int,
    *,
    batch_size: int = 1,
    tp: int | None = None,
    dtype: Dtype = "bfloat16",
    efficiency: Efficiency = IDEAL,
    source: str = "analytic",
    precision: Precision | None = None,
) -> Estimate:
    """The hardware model's figures for one request (``batch_size`` identical sequences).

    The GPUs are the smallest layout holding the weights and the KV cache of p + o tokens per
    sequence (``plan_gpus``). With pipeline stages the request still runs its layers one stage
    after another, so its time is that of all layers at the stage's tensor-parallel size.
    """
    from idealized_runtime.cost_model.roofline import predict_alpha, predict_beta, predict_runtime

    _check_tokens(num_prompt_tokens, num_output_tokens, batch_size)
    precision = precision or Precision.from_dtype(dtype)
    check_precision(hardware, precision)
    if num_prompt_tokens + num_output_tokens > arch.max_context:
        raise InputError(
            f"{num_prompt_tokens} prompt + {num_output_tokens} output tokens exceed the context "
            f"length of {arch.name} ({arch.max_context} tokens)"
        )
    plan = plan_gpus(
        arch,
        hardware,
        context_tokens=num_prompt_tokens + num_output_tokens,
        batch_size=batch_size,
        dtype=dtype,
        tp=tp,
        precision=precision,
    )
    kwargs = {
        "tp": plan.tp,
        "dtype": dtype,
        "batch": batch_size,
        "efficiency": efficiency,
        "precision": precision,
    }
    runtime = float(predict_runtime(arch, hardware, num_prompt_tokens, num_output_tokens, **kwargs))
    alpha = float(predict_alpha(arch, hardware, num_prompt_tokens, **kwargs))
    steps = max(num_output_tokens - 1, 0)
    # With one output token there is no decode step to average over: report the time of the
    # step that would come next, at this context.
    beta = (
        (runtime - alpha) / steps
        if steps
        else float(predict_beta(arch, hardware, num_prompt_tokens, **kwargs))
    )
    notes = []
    if plan.pp > 1:
        notes.append(f"{plan.pp} pipeline stages of tensor-parallel size {plan.tp}")
    return Estimate(
        source=source,
        model=arch.name,
        hardware=hardware.name,
        num_prompt_tokens=num_prompt_tokens,
        num_output_tokens=num_output_tokens,
        batch_size=batch_size,
        runtime_s=runtime,
        alpha_s=alpha,
        beta_s=beta,
        tp=plan.tp,
        num_gpus=plan.num_gpus,
        costs=cost_variants(runtime, plan.num_gpus, hardware),
        notes=tuple(notes),
        precision=precision.label,
    )
