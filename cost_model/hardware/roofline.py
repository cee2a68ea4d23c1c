"""Timing: the seconds of a forward pass on a ``Hardware`` at a stack's ``Efficiency``.

``counts`` gives the work per GPU of one forward pass; this module turns it into time:

    gpu  = max(compute, memory) + all-reduces          (the roofline, plus communication;
                                                        stacks may blend max toward sum)
    host = num_layers * layer_overhead                  (kernel launches, framework dispatch)
    pass = (gpu^k + host^k)^(1/k) + fixed_overhead      (k = host_overlap)

The host term: a framework launches kernels asynchronously, so launch time hides behind GPU
work when the GPU is the bottleneck (k -> infinity: max) and adds to it when every launch waits
(k = 1: sum). Real stacks sit in between; calibration fits k. The ideal stack has no overhead,
so the default ``Efficiency()`` is the pure roofline.

A request's alpha (prompt up to the first token), beta (a decode step) and runtime(p, o) follow
(``hardware_model_alpha``, ``hardware_model_beta``, ``hardware_model_runtime``), and
``to_fitted_cost_model`` tabulates them as a fit usable wherever a measured fit is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    BF16,
    IDEAL,
    Deployment,
    Efficiency,
    FittedCostModel,
    Hardware,
    Precision,
    Provenance,
)
from idealized_runtime.cost_model.hardware.counts import (
    Array,
    PhaseCosts,
    PromptCosts,
    forward_costs,
    prompt_costs,
)

# HELM's profiled prompt sizes (the Megatron A100 grid): where analytic fits tabulate alpha(p).
HELM_PROMPT_SIZES: tuple[int, ...] = (
    1, 16, 32, 64, 128, 192, 256, 320, 384, 428, 472, 512, 576, 640, 704, 768, 832, 896, 960,
    1024, 1152, 1280, 1408, 1536, 1664, 1792, 1920,
)  # fmt: skip
# Decode steps of a request are summed in this many equal chunks (exact when the step time is
# linear in the context, within a fraction of a percent at the roofline's kinks).
DECODE_CHUNKS = 16


@dataclass(frozen=True)
class PhaseTime:
    """Seconds of one forward pass, by part; ``total_s`` is what the request waits for."""

    compute_s: Array
    memory_s: Array
    communication_s: Array
    host_s: Array
    total_s: Array

    @property
    def memory_bound(self) -> NDArray[np.bool_]:
        return self.memory_s >= self.compute_s


def check_precision(hardware: Hardware, precision: Precision) -> None:
    """Refuse, in one line, a precision the GPU cannot compute in (fp8 without fp8 tensor
    cores, NVFP4 without fp4 ones). Weight-only fp8 still runs there: the weights are
    dequantized to bf16 per GEMM."""
    if precision.fp4_compute and hardware.peak_fp4_tflops is None:
        raise InputError(
            f"{hardware.name} has no fp4 tensor cores: nvfp4 weights with fp4 activations run "
            "on Blackwell GPUs (b200, b300, gb200); use --activations bf16 for weight-only nvfp4"
        )
    if precision.fp8_compute and hardware.peak_fp8_tflops is None:
        raise InputError(
            f"{hardware.name} has no fp8 tensor cores: fp8 activations are not supported there; "
            "use --activations bf16 for weight-only fp8 (dequantized to bf16), or a GPU with fp8"
        )


def compute_hardware(hardware: Hardware, precision: Precision | None) -> Hardware:
    """``hardware`` as the time model sees it at ``precision``: fp8 matmuls (W8A8) run at the
    fp8 tensor-core peak, NVFP4 (W4A4) at the fp4 one; weight-only formats dequantize and run
    at the 16-bit peak."""
    if precision is None or not (precision.fp8_compute or precision.fp4_compute):
        return hardware
    check_precision(hardware, precision)
    peak = hardware.peak_fp4_tflops if precision.fp4_compute else hardware.peak_fp8_tflops
    return hardware.model_copy(update={"peak_dense_tflops": peak})


# --- stage 2: time --------------------------------------------------------------------------


def _check_hardware(hardware: Hardware, tp: int) -> None:
    if tp > 1 and hardware.interconnect_gbps <= 0:
        raise InputError(f"hardware {hardware.name} has no interconnect bandwidth for tp = {tp}")


def unaligned_factor(hardware: Hardware) -> float:
    """Throughput of unaligned fp16/bf16 GEMMs as a fraction of aligned ones, from the datasheet.

    ``Hardware.unaligned_matmul_tflops`` is the GPU's peak fp16 rate without tensor cores (e.g.
    A100: 78 of 312 TFLOP/s, NVIDIA A100 Tensor Core GPU Architecture whitepaper, table 1): the
    rate of the kernels cuBLAS falls back to when a dimension breaks alignment, an a-priori
    figure, not a fitted one. Unknown (None): no penalty.
    """
    if hardware.unaligned_matmul_tflops is None:
        return 1.0
    return min(1.0, hardware.unaligned_matmul_tflops / hardware.peak_dense_tflops)


def pass_time(
    costs: PhaseCosts,
    hardware: Hardware,
    *,
    num_layers: int,
    tp: int = 1,
    efficiency: Efficiency = IDEAL,
) -> PhaseTime:
    """Seconds of one forward pass whose per-GPU work is ``costs`` (see the module docstring)."""
    _check_hardware(hardware, tp)
    eff = efficiency
    # Per GEMM: aligned FLOPs at the stack's compute efficiency, unaligned ones at that times
    # the GPU's a-priori unaligned factor.
    aligned_flops = costs.flops - costs.unaligned_flops
    rate = hardware.peak_dense_tflops * 1e12 * eff.compute
    if eff.gemm_half_tokens > 0 and costs.tokens is not None:
        rate = rate * costs.tokens / (costs.tokens + eff.gemm_half_tokens)
    compute = aligned_flops / rate + costs.unaligned_flops / (rate * unaligned_factor(hardware))
    traffic = costs.bytes + eff.attention_score_passes * costs.score_bytes
    memory = traffic / (hardware.memory_bandwidth_gbps * 1e9 * eff.bandwidth)
    if tp > 1:
        ring = 2.0 * (tp - 1) / tp * costs.allreduce_bytes
        per_allreduce = ring / (hardware.interconnect_gbps * 1e9 * eff.interconnect)
        latency = eff.allreduce_latency_s * ((tp - 1) if eff.ring_allreduce else 1)
        communication = costs.num_allreduces * (per_allreduce + latency)
    else:
        communication = np.zeros_like(compute)
    if eff.compute_memory_serialization > 0:
        gpu = _soft_max(compute, memory, 1.0 / eff.compute_memory_serialization)
    else:
        gpu = np.maximum(compute, memory)
    gpu = gpu + communication
    host = np.full_like(gpu, num_layers * eff.layer_overhead_s)
    total = _soft_max(gpu, host, eff.host_overlap) + eff.fixed_overhead_s
    return PhaseTime(
        compute_s=compute,
        memory_s=memory,
        communication_s=communication,
        host_s=host,
        total_s=total,
    )


def _soft_max(a: Array, b: Array, k: float) -> Array:
    """(a^k + b^k)^(1/k), computed without overflow; a + b at k = 1, -> max(a, b) as k grows."""
    top = np.maximum(a, b)
    safe = np.where(top > 0, top, 1.0)
    return np.where(top > 0, safe * ((a / safe) ** k + (b / safe) ** k) ** (1.0 / k), 0.0)


def prompt_time(
    costs: PromptCosts,
    hardware: Hardware,
    *,
    num_layers: int,
    tp: int = 1,
    efficiency: Efficiency = IDEAL,
) -> Array:
    """Seconds until the first output token: the passes ``costs`` counts, at ``efficiency``."""
    timing = {"num_layers": num_layers, "tp": tp, "efficiency": efficiency}
    seconds = np.where(costs.runs_first, pass_time(costs.first, hardware, **timing).total_s, 0.0)
    if costs.tail is not None:
        seconds = seconds + pass_time(costs.tail, hardware, **timing).total_s
    return seconds


def hardware_model_alpha(deployment: Deployment, num_prompt_tokens: ArrayLike) -> Array:
    """alpha(p): the prompt's processing up to and including the first output token."""
    arch, efficiency = deployment.architecture, deployment.efficiency
    costs = prompt_costs(
        arch,
        num_prompt_tokens,
        batch=deployment.batch_size,
        tp=deployment.tp,
        precision=deployment.precision,
        last_token_in_decode=efficiency.last_prompt_token_in_decode,
    )
    hardware = compute_hardware(deployment.hardware, deployment.precision)
    return prompt_time(
        costs, hardware, num_layers=arch.num_layers, tp=deployment.tp, efficiency=efficiency
    )


def decode_step_time(deployment: Deployment, context_tokens: ArrayLike) -> PhaseTime:
    """One decode step of the deployment's batch, each sequence with ``context_tokens`` cached
    tokens."""
    arch = deployment.architecture
    c = np.asarray(context_tokens, dtype=np.float64)
    costs = forward_costs(
        arch,
        np.ones_like(c),
        c,
        batch=deployment.batch_size,
        tp=deployment.tp,
        precision=deployment.precision,
    )
    hardware = compute_hardware(deployment.hardware, deployment.precision)
    return pass_time(
        costs,
        hardware,
        num_layers=arch.num_layers,
        tp=deployment.tp,
        efficiency=deployment.efficiency,
    )


def hardware_model_beta(deployment: Deployment, context_tokens: ArrayLike) -> Array:
    """beta(context): seconds of a decode step at a context length."""
    return decode_step_time(deployment, context_tokens).total_s


def hardware_model_alpha_beta(
    deployment: Deployment, prompt_sizes: ArrayLike = HELM_PROMPT_SIZES
) -> tuple[Array, Array]:
    """(alpha at ``prompt_sizes``, beta at contexts ``prompt_sizes``): a quick table."""
    sizes = np.asarray(prompt_sizes, dtype=np.float64)
    return hardware_model_alpha(deployment, sizes), hardware_model_beta(deployment, sizes)


def hardware_model_runtime(
    deployment: Deployment, num_prompt_tokens: ArrayLike, num_output_tokens: ArrayLike
) -> Array:
    """runtime(p, o) = alpha(p) + sum over decode steps i = 1..o-1 of beta(p + i - 1).

    Vectorized over broadcast arrays of p and o; the decode sum uses ``DECODE_CHUNKS`` chunks
    of steps, each at its mean context (exact wherever beta is linear in the context).
    """
    p = np.asarray(num_prompt_tokens, dtype=np.float64)
    o = np.asarray(num_output_tokens, dtype=np.float64)
    if np.any(p < 1) or np.any(o < 0):
        raise InputError("prompt token counts must be >= 1 and output token counts >= 0")
    p, o = np.broadcast_arrays(p, o)
    alpha = hardware_model_alpha(deployment, p)
    steps = np.maximum(o - 1.0, 0.0)[..., None]  # o = 0: prompt only, no decode step
    edges = steps * np.linspace(0.0, 1.0, DECODE_CHUNKS + 1)
    counts = np.diff(edges, axis=-1)
    # Steps (s0, s1] have contexts p + i - 1 whose mean is p - 1 + (s0 + s1 + 1) / 2.
    contexts = p[..., None] - 1.0 + (edges[..., :-1] + edges[..., 1:] + 1.0) / 2.0
    beta = hardware_model_beta(deployment, contexts)
    return alpha + np.sum(counts * beta, axis=-1)


def to_fitted_cost_model(
    deployment: Deployment,
    *,
    method: str = "analytic",
    model_name: str | None = None,
    prompt_sizes: ArrayLike = HELM_PROMPT_SIZES,
    max_context: int | None = None,
    runner: str = "analytic-roofline",
) -> FittedCostModel:
    """The analytic model as a ``FittedCostModel``, usable wherever a fit is (convert, reports).

    alpha is tabulated at ``prompt_sizes`` (interpolated between them); beta(context) is
    summarised by a least-squares line over contexts up to ``max_context`` (default: the
    largest prompt size + 2048, capped at the architecture's context window).
    """
    arch, precision = deployment.architecture, deployment.precision
    sizes = np.asarray(prompt_sizes, dtype=np.float64)
    alphas = hardware_model_alpha(deployment, sizes)
    limit = max_context or min(int(sizes.max()) + 2048, max(arch.max_context, 2))
    contexts = np.linspace(1.0, float(limit), 64)
    betas = hardware_model_beta(deployment, contexts)
    slope, intercept = np.polyfit(contexts, betas, 1)
    if slope < 0:  # cannot happen physically; keep the table valid anyway
        slope, intercept = 0.0, float(np.mean(betas))
    return FittedCostModel(
        model=model_name or arch.name,
        method=method,  # type: ignore[arg-type]
        alpha_rule="interpolate",
        prompt_sizes=[int(s) for s in sizes],
        prompt_runtimes_s=[float(a) for a in alphas],
        beta_s=max(0.0, float(intercept)),
        beta_per_context_token_s=float(slope),
        stack=Provenance(
            runner=runner,
            hardware=deployment.hardware.name,
            num_devices=deployment.tp,
            tensor_parallel_size=deployment.tp,
            dtype=precision.compute_dtype,
            notes=f"{method} hardware model, batch {deployment.batch_size}"
            + (f", precision {precision.label}" if precision != BF16 else ""),
        ),
    )
