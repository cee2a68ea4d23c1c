"""Analytic (roofline) runtime of one request, from the architecture and the accelerator.

Stage 1 counts work, per GPU, of one forward pass that processes ``new_tokens`` per sequence
on top of ``context_tokens`` already in the KV cache (prompt: new = p, context = 0; decode step:
new = 1, context = tokens so far): matmul FLOPs, weight/KV/activation bytes, all-reduce traffic.
Stage 2 turns that into seconds on a ``Hardware`` with ``Efficiency`` factors:

    gpu  = max(compute, memory) + all-reduces          (the roofline, plus communication)
    host = num_layers * layer_overhead                  (kernel launches, framework dispatch)
    pass = (gpu^k + host^k)^(1/k) + fixed_overhead      (k = host_overlap)

The host term: a framework launches kernels asynchronously, so launch time hides behind GPU
work when the GPU is the bottleneck (k -> infinity: max) and adds to it when every launch waits
(k = 1: sum). Real stacks sit in between; calibration fits k. The ideal stack has no overhead,
so the default ``Efficiency()`` is the pure roofline.

Counting conventions (deliberately explicit, tested against hand arithmetic):
- matmul FLOPs: 2 per multiply-accumulate, over the weight matrices a token touches (MoE: its
  ``experts_per_token`` experts, plus the router); norms, biases, activations are elementwise
  and left out of FLOPs (they are in activation bytes).
- attention FLOPs: QK^T and PV, causal: the i-th new token attends to context + i positions,
  2 * 2 * num_heads * head_dim FLOPs per attended position.
- LM head: logits only where a next token is sampled (the last position of each sequence).
- weight bytes: every weight the pass needs is read once per pass, whatever the batch (the
  point of batching). MoE: the non-expert weights plus the experts the pass's tokens hit; with
  T tokens routed uniformly at random, E * (1 - (1 - k/E)^T) distinct experts are expected
  (batch-1 decode reads k experts; a long prompt or a big batch reads all E). The embedding
  table is gathered, not read whole; the LM head matrix is read whole.
- KV bytes: the pass reads the K and V of every attended position once and writes the new
  ones (fused attention: scores never leave the chip). Unfused stacks write and re-read the
  score matrix; ``Efficiency.attention_score_passes`` counts how often (0 for the ideal).
- tensor parallelism over ``tp`` GPUs (Megatron style): matmuls, heads and the vocabulary are
  split; KV heads are split too, or replicated when tp > num_kv_heads; each layer ends its
  attention and its MLP with an all-reduce of the hidden states (one per layer for parallel
  attention+MLP blocks), a ring all-reduce costing 2 (tp - 1) / tp * bytes / bandwidth + latency.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    DTYPE_BYTES,
    Architecture,
    Dtype,
    FittedCostModel,
    Hardware,
    Stack,
)

Array = NDArray[np.float64]

# HELM's profiled prompt sizes (the Megatron A100 grid): where analytic fits tabulate alpha(p).
HELM_PROMPT_SIZES: tuple[int, ...] = (
    1, 16, 32, 64, 128, 192, 256, 320, 384, 428, 472, 512, 576, 640, 704, 768, 832, 896, 960,
    1024, 1152, 1280, 1408, 1536, 1664, 1792, 1920,
)  # fmt: skip
# Tensor cores need the GEMM dimensions cuBLAS sees (M/N/K, leading dimensions) in multiples of
# 16 bytes (8 fp16/bf16 elements) for their fast kernels; cuBLAS falls back to slower ones
# otherwise (NVIDIA, "Matrix Multiplication Background User's Guide", section "Tensor Core
# Requirements", and the cuBLAS documentation, "Tensor Core Usage"). How much slower is a property
# of the GPU, not of the stack: ``Hardware.unaligned_matmul_tflops`` (see ``unaligned_factor``).
GEMM_ALIGNMENT_BYTES = 16
# Decode steps of a request are summed in this many equal chunks (exact when the step time is
# linear in the context, within a fraction of a percent at the roofline's kinks).
DECODE_CHUNKS = 16


@dataclass(frozen=True)
class Efficiency:
    """How far a software stack is from the hardware's peaks. Defaults: the ideal roofline."""

    compute: float = 1.0  # fraction of peak dense tensor FLOP/s the matmuls reach
    bandwidth: float = 1.0  # fraction of peak memory bandwidth reached
    interconnect: float = 1.0  # fraction of the per-GPU interconnect bandwidth reached
    layer_overhead_s: float = 0.0  # host time per layer per forward pass (launches, dispatch)
    allreduce_latency_s: float = 0.0  # fixed latency of one all-reduce (tp > 1 only)
    fixed_overhead_s: float = 0.0  # per forward pass (embedding, sampling, synchronisation)
    attention_score_passes: float = 0.0  # times an unfused stack moves the score matrix
    host_overlap: float = 1.0  # k in (gpu^k + host^k)^(1/k): 1 adds, large k overlaps

    def __post_init__(self) -> None:
        for name in ("compute", "bandwidth", "interconnect"):
            value = getattr(self, name)
            if not (0 < value <= 1):
                raise InputError(f"efficiency {name} must be in (0, 1], got {value}")
        for name in (
            "layer_overhead_s",
            "allreduce_latency_s",
            "fixed_overhead_s",
            "attention_score_passes",
        ):
            if not (getattr(self, name) >= 0 and math.isfinite(getattr(self, name))):
                raise InputError(f"efficiency {name} must be finite and >= 0")
        if not (self.host_overlap >= 1 and math.isfinite(self.host_overlap)):
            raise InputError(f"efficiency host_overlap must be >= 1, got {self.host_overlap}")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, float]) -> Efficiency:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise InputError(f"unknown efficiency factors: {', '.join(sorted(unknown))}")
        return cls(**{k: float(v) for k, v in values.items()})


IDEAL = Efficiency()


@dataclass(frozen=True)
class PhaseCosts:
    """Work of one forward pass (or a sum of passes), per GPU. Fields broadcast as arrays."""

    flops: Array  # matmul + attention FLOPs
    unaligned_flops: Array  # the part of ``flops`` in GEMMs with unaligned dimensions
    weight_bytes: Array
    kv_bytes: Array  # KV cache read + written
    activation_bytes: Array
    score_bytes: Array  # one write+read of the attention score matrix (unfused stacks only)
    allreduce_bytes: Array  # payload of each all-reduce
    num_allreduces: Array
    num_passes: Array

    @property
    def bytes(self) -> Array:
        """Memory traffic of the ideal (fused-attention) stack."""
        return self.weight_bytes + self.kv_bytes + self.activation_bytes

    @property
    def arithmetic_intensity(self) -> Array:
        return self.flops / self.bytes


@dataclass(frozen=True)
class RequestCosts:
    """A request's work: the prompt pass and the sum of its o - 1 decode steps, per GPU."""

    prompt: PhaseCosts
    decode: PhaseCosts

    @property
    def flops(self) -> Array:
        return self.prompt.flops + self.decode.flops

    @property
    def bytes(self) -> Array:
        return self.prompt.bytes + self.decode.bytes


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


# --- stage 1: counting ----------------------------------------------------------------------


def _expert_parameters(arch: Architecture) -> int:
    """Weights of one MLP expert (the whole MLP of a dense model), biases included."""
    h, f = arch.hidden_size, arch.ffn_hidden_size
    mlp_in = 2 if arch.gated_mlp else 1
    params = mlp_in * h * f + f * h
    if arch.bias:
        params += mlp_in * f + h
    return params


def expected_experts_touched(arch: Architecture, tokens: ArrayLike) -> Array:
    """Distinct experts per MoE layer that ``tokens`` tokens hit, routed uniformly at random."""
    t = np.asarray(tokens, dtype=np.float64)
    e, k = arch.num_experts, arch.experts_per_token
    if e == 1:
        return np.ones_like(t)
    return e * (1.0 - (1.0 - k / e) ** t)


def _check_tp(arch: Architecture, tp: int) -> None:
    if tp < 1 or arch.num_heads % tp:
        raise InputError(
            f"tensor-parallel size {tp} must divide num_heads {arch.num_heads} of {arch.name}"
        )
    if arch.kv_heads % tp and tp % arch.kv_heads:
        raise InputError(
            f"tensor-parallel size {tp} and num_kv_heads {arch.kv_heads} of {arch.name} must "
            "divide one another"
        )


def _unaligned(elements: float, dtype: Dtype) -> bool:
    return (elements * DTYPE_BYTES[dtype]) % GEMM_ALIGNMENT_BYTES != 0


def forward_costs(
    arch: Architecture,
    new_tokens: ArrayLike,
    context_tokens: ArrayLike = 0,
    *,
    batch: int = 1,
    dtype: Dtype = "bfloat16",
    tp: int = 1,
) -> PhaseCosts:
    """Work per GPU of one forward pass over ``batch`` sequences (see the module docstring)."""
    _check_tp(arch, tp)
    n = np.asarray(new_tokens, dtype=np.float64)
    c = np.asarray(context_tokens, dtype=np.float64)
    n, c = np.broadcast_arrays(n, c)
    size = DTYPE_BYTES[dtype]
    layers, h, d = arch.num_layers, arch.hidden_size, arch.dim_per_head
    q_dim, kv_dim = arch.num_heads * d, arch.kv_heads * d
    f, mlp_in = arch.ffn_hidden_size, (2 if arch.gated_mlp else 1)
    k_active = arch.experts_per_token
    tokens = batch * n  # new tokens in the pass, all sequences

    # Matmul weights one token multiplies through, per layer.
    attn_matmul = h * q_dim + 2 * h * kv_dim + q_dim * h
    expert_matmul = mlp_in * h * f + f * h
    router = h * arch.num_experts if arch.num_experts > 1 else 0
    layer_matmul = attn_matmul + k_active * expert_matmul + router
    head = arch.vocab_size * h
    # Causal attention: new token i (1..n) attends to c + i positions.
    attended = n * c + n * (n + 1) / 2
    attention_flops = 4.0 * arch.num_heads * d * attended * batch * layers
    matmul_flops = 2.0 * layer_matmul * tokens * layers
    head_flops = 2.0 * head * batch  # last position of each sequence only
    flops = (matmul_flops + attention_flops + head_flops) / tp

    # GEMMs whose per-GPU shapes break tensor-core alignment (e.g. ffn 27308 / tp 4 = 6827):
    # each GEMM with the (N, K) it has on one rank; the token dimension is M, the one dimension
    # that is no leading dimension of a row-major activation, so it does not count.
    per_token_gemms = (  # (weights a token multiplies through per layer, dims per rank)
        (h * (q_dim + 2 * kv_dim), (h, q_dim / tp, kv_dim / tp)),  # QKV projection
        (q_dim * h, (q_dim / tp, h)),  # attention output projection
        (k_active * mlp_in * h * f, (h, f / tp)),  # MLP in (and gate)
        (k_active * f * h, (f / tp, h)),  # MLP out
        (router, (h, arch.num_experts)),  # MoE router (replicated: not split by tp)
    )
    unaligned = 0.0 * n
    for weights, dims in per_token_gemms:
        if weights and any(_unaligned(x, dtype) for x in dims):
            unaligned = unaligned + 2.0 * weights * tokens * layers
    if _unaligned(d, dtype):  # QK^T and PV multiply through the head dimension
        unaligned = unaligned + attention_flops
    if _unaligned(h, dtype) or _unaligned(arch.vocab_size / tp, dtype):
        unaligned = unaligned + head_flops
    unaligned_flops = unaligned / tp

    # Weights: dense part of each layer + the experts this pass touches, + the LM head.
    expert = _expert_parameters(arch)
    dense_layer = arch.layer_parameters(active_only=False) - arch.num_experts * expert
    experts_read = expected_experts_touched(arch, tokens) if arch.num_experts > 1 else k_active
    final_norm = 2 * h if arch.norm == "layernorm" else h
    weight_params = layers * (dense_layer + experts_read * expert) + head + final_norm
    weight_bytes = weight_params * size / tp + 0.0 * n

    # KV cache: replicated heads when tp exceeds the KV heads (each GPU keeps one).
    kv_heads_per_gpu = max(arch.kv_heads / tp, 1.0)
    kv_token_layer = 2 * kv_heads_per_gpu * d * size
    kv_bytes = kv_token_layer * layers * batch * (c + 2 * n)  # read c + n, write n

    # Activations written once and read once per layer; hidden-size tensors are replicated on
    # every TP rank (norms, residuals), the wide ones are split.
    replicated = 6 * h
    split = 2 * q_dim + 2 * kv_dim + (mlp_in + 1) * f * k_active
    activation_bytes = 2 * size * tokens * layers * (replicated + split / tp)
    activation_bytes = activation_bytes + 2 * size * tokens * h  # embedding gather + write

    score_bytes = 2 * size * (arch.num_heads / tp) * attended * batch * layers

    per_layer = 1 if arch.parallel_attn_mlp else 2
    num_allreduces = (per_layer * layers if tp > 1 else 0) + 0.0 * n
    allreduce_bytes = tokens * h * size if tp > 1 else 0.0 * n
    return PhaseCosts(
        flops=np.asarray(flops, dtype=np.float64),
        unaligned_flops=np.asarray(unaligned_flops, dtype=np.float64),
        weight_bytes=np.asarray(weight_bytes, dtype=np.float64),
        kv_bytes=np.asarray(kv_bytes, dtype=np.float64),
        activation_bytes=np.asarray(activation_bytes, dtype=np.float64),
        score_bytes=np.asarray(score_bytes, dtype=np.float64),
        allreduce_bytes=np.asarray(allreduce_bytes, dtype=np.float64),
        num_allreduces=np.asarray(num_allreduces, dtype=np.float64),
        num_passes=np.ones_like(n),
    )


def request_costs(
    arch: Architecture,
    num_prompt_tokens: ArrayLike,
    num_output_tokens: ArrayLike,
    *,
    batch: int = 1,
    dtype: Dtype = "bfloat16",
    tp: int = 1,
) -> RequestCosts:
    """FLOPs and bytes per GPU of a whole request: prompt pass + sum of o - 1 decode steps.

    Decode step i (1-based) attends to the p + i - 1 cached tokens plus itself; every count is
    linear in the context, so the sum over steps is the count at the mean context times o - 1.
    (MoE decode steps each read the experts ``batch`` tokens touch.)
    """
    p = np.asarray(num_prompt_tokens, dtype=np.float64)
    o = np.asarray(num_output_tokens, dtype=np.float64)
    if np.any(p < 1) or np.any(o < 1):
        raise InputError("token counts must be >= 1")
    steps = o - 1.0
    prompt = forward_costs(arch, p, 0.0, batch=batch, dtype=dtype, tp=tp)
    mean_context = p + steps / 2.0 - 0.5  # mean of p + i - 1 over i = 1..steps
    step = forward_costs(arch, np.ones_like(p * o), mean_context, batch=batch, dtype=dtype, tp=tp)
    # Totals scale with the number of steps; allreduce_bytes is per all-reduce and stays.
    totals = {k: v * steps for k, v in vars(step).items() if k != "allreduce_bytes"}
    decode = PhaseCosts(**totals, allreduce_bytes=step.allreduce_bytes + 0.0 * steps)
    return RequestCosts(prompt=prompt, decode=decode)


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
    compute = aligned_flops / rate + costs.unaligned_flops / (rate * unaligned_factor(hardware))
    traffic = costs.bytes + eff.attention_score_passes * costs.score_bytes
    memory = traffic / (hardware.memory_bandwidth_gbps * 1e9 * eff.bandwidth)
    if tp > 1:
        ring = 2.0 * (tp - 1) / tp * costs.allreduce_bytes
        per_allreduce = ring / (hardware.interconnect_gbps * 1e9 * eff.interconnect)
        communication = costs.num_allreduces * (per_allreduce + eff.allreduce_latency_s)
    else:
        communication = np.zeros_like(compute)
    gpu = np.maximum(compute, memory) + communication
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


def predict_alpha(
    arch: Architecture,
    hardware: Hardware,
    num_prompt_tokens: ArrayLike,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    batch: int = 1,
    efficiency: Efficiency = IDEAL,
) -> Array:
    """alpha(p): the prompt pass, which also yields the first output token."""
    costs = forward_costs(arch, num_prompt_tokens, 0.0, batch=batch, dtype=dtype, tp=tp)
    return pass_time(
        costs, hardware, num_layers=arch.num_layers, tp=tp, efficiency=efficiency
    ).total_s


def decode_step_time(
    arch: Architecture,
    hardware: Hardware,
    context_tokens: ArrayLike,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    batch: int = 1,
    efficiency: Efficiency = IDEAL,
) -> PhaseTime:
    """One decode step of ``batch`` sequences, each with ``context_tokens`` cached tokens."""
    c = np.asarray(context_tokens, dtype=np.float64)
    costs = forward_costs(arch, np.ones_like(c), c, batch=batch, dtype=dtype, tp=tp)
    return pass_time(costs, hardware, num_layers=arch.num_layers, tp=tp, efficiency=efficiency)


def predict_beta(
    arch: Architecture,
    hardware: Hardware,
    context_tokens: ArrayLike,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    batch: int = 1,
    efficiency: Efficiency = IDEAL,
) -> Array:
    """beta(context): seconds of a decode step at a context length."""
    return decode_step_time(
        arch, hardware, context_tokens, tp=tp, dtype=dtype, batch=batch, efficiency=efficiency
    ).total_s


def predict_alpha_beta(
    arch: Architecture,
    hardware: Hardware,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    batch: int = 1,
    efficiency: Efficiency = IDEAL,
    prompt_sizes: ArrayLike = HELM_PROMPT_SIZES,
) -> tuple[Array, Array]:
    """(alpha at ``prompt_sizes``, beta at contexts ``prompt_sizes``): a quick table."""
    kwargs = {"tp": tp, "dtype": dtype, "batch": batch, "efficiency": efficiency}
    sizes = np.asarray(prompt_sizes, dtype=np.float64)
    return (
        predict_alpha(arch, hardware, sizes, **kwargs),
        predict_beta(arch, hardware, sizes, **kwargs),
    )


def predict_runtime(
    arch: Architecture,
    hardware: Hardware,
    num_prompt_tokens: ArrayLike,
    num_output_tokens: ArrayLike,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    batch: int = 1,
    efficiency: Efficiency = IDEAL,
) -> Array:
    """runtime(p, o) = alpha(p) + sum over decode steps i = 1..o-1 of beta(p + i - 1).

    Vectorized over broadcast arrays of p and o; the decode sum uses ``DECODE_CHUNKS`` chunks
    of steps, each at its mean context (exact wherever beta is linear in the context).
    """
    p = np.asarray(num_prompt_tokens, dtype=np.float64)
    o = np.asarray(num_output_tokens, dtype=np.float64)
    if np.any(p < 1) or np.any(o < 1):
        raise InputError("token counts must be >= 1")
    p, o = np.broadcast_arrays(p, o)
    kwargs = {"tp": tp, "dtype": dtype, "batch": batch, "efficiency": efficiency}
    alpha = predict_alpha(arch, hardware, p, **kwargs)
    steps = np.maximum(o - 1.0, 0.0)[..., None]  # o = 0: prompt only, no decode step
    edges = steps * np.linspace(0.0, 1.0, DECODE_CHUNKS + 1)
    counts = np.diff(edges, axis=-1)
    # Steps (s0, s1] have contexts p + i - 1 whose mean is p - 1 + (s0 + s1 + 1) / 2.
    contexts = p[..., None] - 1.0 + (edges[..., :-1] + edges[..., 1:] + 1.0) / 2.0
    beta = predict_beta(arch, hardware, contexts, **kwargs)
    return alpha + np.sum(counts * beta, axis=-1)


def to_fitted_cost_model(
    arch: Architecture,
    hardware: Hardware,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    batch: int = 1,
    efficiency: Efficiency = IDEAL,
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
    sizes = np.asarray(prompt_sizes, dtype=np.float64)
    kwargs = {"tp": tp, "dtype": dtype, "batch": batch, "efficiency": efficiency}
    alphas = predict_alpha(arch, hardware, sizes, **kwargs)
    limit = max_context or min(int(sizes.max()) + 2048, max(arch.max_context, 2))
    contexts = np.linspace(1.0, float(limit), 64)
    betas = predict_beta(arch, hardware, contexts, **kwargs)
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
        stack=Stack(
            runner=runner,
            hardware=hardware.name,
            num_devices=tp,
            tensor_parallel_size=tp,
            dtype=dtype,
            notes=f"{method} hardware model, batch {batch}",
        ),
    )
