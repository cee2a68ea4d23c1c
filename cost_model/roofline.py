"""Analytic (roofline) runtime of one request, from the architecture and the accelerator.

Stage 1 counts work, per GPU, of one forward pass that processes ``new_tokens`` per sequence
on top of ``context_tokens`` already in the KV cache (prompt: new = p, context = 0; decode step:
new = 1, context = tokens so far): matmul FLOPs, weight/KV/activation bytes, all-reduce traffic.
Stage 2 turns that into seconds on a ``Hardware`` with ``Efficiency`` factors:

    gpu  = max(compute, memory) + all-reduces          (the roofline, plus communication;
                                                        stacks may blend max toward sum)
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
- precision (``Precision``): quantized linear weights (attention, MLPs, experts) count their
  bytes per weight with group scales and zero points; embeddings, norms, routers and the LM
  head stay in the 16-bit compute dtype; the KV cache counts its own element size (int8: + a
  16-bit scale per head vector). Weight-only formats compute at the 16-bit peak; fp8
  activations (W8A8) at the fp8 peak (``compute_hardware``), refused where there is none.
- families: counts walk the layers, so mixed stacks are exact: sliding-window layers attend to
  and keep at most the window; DeepSeek's first-k layers are dense, the others MoE with shared
  experts always read; MLA caches the kv_lora_rank latent plus the RoPE key per layer (shared by
  all heads: replicated over TP ranks) and attends either by decompressing K/V or in latent
  space with the up-projections absorbed, whichever costs fewer FLOPs (prefill: decompress;
  decode: absorb).
- tensor parallelism over ``tp`` GPUs (Megatron style): matmuls, heads and the vocabulary are
  split; KV heads are split too, or replicated when tp > num_kv_heads; each layer ends its
  attention and its MLP with an all-reduce of the hidden states (one per layer for parallel
  attention+MLP blocks), a ring all-reduce costing 2 (tp - 1) / tp * bytes / bandwidth + latency.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    BF16,
    Architecture,
    Dtype,
    FittedCostModel,
    Hardware,
    Precision,
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
# Deepest architecture the counting accepts (the deepest published models have ~130 layers).
MAX_LAYERS = 4096


@dataclass(frozen=True)
class Efficiency:
    """How far a software stack is from the hardware's peaks. Defaults: the ideal roofline."""

    compute: float = 1.0  # fraction of peak dense tensor FLOP/s the matmuls reach
    bandwidth: float = 1.0  # fraction of peak memory bandwidth reached
    interconnect: float = 1.0  # fraction of the per-GPU interconnect bandwidth reached
    layer_overhead_s: float = 0.0  # host time per layer per forward pass (launches, dispatch)
    # Latency of one all-reduce (tp > 1 only); with ``ring_allreduce``, of each of its tp - 1
    # ring steps instead.
    allreduce_latency_s: float = 0.0
    fixed_overhead_s: float = 0.0  # per forward pass (embedding, sampling, synchronisation)
    attention_score_passes: float = 0.0  # times an unfused stack moves the score matrix
    host_overlap: float = 1.0  # k in (gpu^k + host^k)^(1/k): 1 adds, large k overlaps
    # s in (compute^(1/s) + memory^(1/s))^s: 0 is the roofline's max (loads hide behind math),
    # 1 their sum. Real kernels near the ridge point (prefill of a few hundred tokens, batched
    # decode) overlap them only partly.
    compute_memory_serialization: float = 0.0
    gemm_half_tokens: float = 0.0
    # Engines of the FasterTransformer line (TurboMind up to v0.1.0a1) prefill a prompt without
    # its last token and feed that token to the first decode step, so the first output token
    # costs a pass over p - 1 tokens plus one decode step, not one pass over p tokens.
    last_prompt_token_in_decode: bool = False
    # Stacks that all-reduce through NCCL's ring (gpt-fast, TurboMind v0.1) pay the latency once
    # per step around the ring, tp - 1 times: reduce-scatter and all-gather each pass every
    # GPU's chunk on to its neighbour. False: one latency whatever tp, as for one-shot kernels
    # that read every peer's buffer directly over NVLink (TensorRT-LLM's custom all-reduce).
    ring_allreduce: bool = False

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
        if not (0 <= self.compute_memory_serialization <= 1):
            raise InputError(
                "efficiency compute_memory_serialization must be in [0, 1], got "
                f"{self.compute_memory_serialization}"
            )

    def to_dict(self) -> dict[str, float | bool]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, float | bool]) -> Efficiency:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise InputError(f"unknown efficiency factors: {', '.join(sorted(unknown))}")
        flags = {f.name for f in fields(cls) if f.type in (bool, "bool")}
        for name in flags & set(values):
            if not isinstance(values[name], bool):
                raise InputError(f"efficiency {name} must be true or false")
        return cls(**{k: v if k in flags else float(v) for k, v in values.items()})


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
    tokens: Array | None = None

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


@dataclass(frozen=True)
class LayerWeights:
    """Weights of one layer by how they are stored and used (parameter counts).

    ``*_matrices`` are the linear layers a quantized checkpoint quantizes; ``*_other`` are the
    norms, biases, sinks and latent norms that stay in the 16-bit compute dtype."""

    attention_matrices: int
    attention_other: int
    mlp_matrices: int  # a dense layer's MLP; 0 in MoE layers
    mlp_other: int
    expert_matrices: int  # ONE routed expert (MoE layers), 0 otherwise
    expert_other: int
    shared_matrices: int  # all shared experts together (DeepSeek)
    shared_other: int
    router: int  # router weight and bias (kept in the compute dtype)
    norms: int
    num_experts: int  # routed experts stored in this layer (0: dense layer)


def _mlp_counts(arch: Architecture, width: int) -> tuple[int, int]:
    """(matrix weights, biases) of one MLP (or expert) of ``width``."""
    h, mlp_in = arch.hidden_size, (2 if arch.gated_mlp else 1)
    matrices = mlp_in * h * width + width * h
    return matrices, (mlp_in * width + h if arch.bias else 0)


def _attention_matrices(arch: Architecture) -> int:
    h = arch.hidden_size
    if arch.mla:
        heads, rank = arch.num_heads, arch.kv_lora_rank or 0
        nope, rope, v = arch.qk_nope_head_dim or 0, arch.qk_rope_head_dim or 0, arch.v_head_dim or 0
        q_out = heads * (nope + rope)
        q = h * arch.q_lora_rank + arch.q_lora_rank * q_out if arch.q_lora_rank else h * q_out
        return q + h * (rank + rope) + rank * heads * (nope + v) + heads * v * h
    q_out, kv_out = arch.num_heads * arch.dim_per_head, arch.kv_heads * arch.dim_per_head
    return 2 * h * q_out + 2 * h * kv_out


def layer_weights(arch: Architecture, layer: int) -> LayerWeights:
    """Layer ``layer``'s weights split as a quantized checkpoint stores them; the parts add up
    to ``arch.layer_parameters(layer=layer)``."""
    attention = arch.attention_parameters()
    attention_matrices = _attention_matrices(arch)
    mlp = mlp_other = expert = expert_other = shared = shared_other = router = experts = 0
    if arch.is_moe_layer(layer):
        expert, expert_other = _mlp_counts(arch, arch.expert_ffn_hidden_size)
        shared = arch.num_shared_experts * expert
        shared_other = arch.num_shared_experts * expert_other
        experts = arch.num_experts
        router = arch.hidden_size * experts + (experts if arch.router_bias else 0)
    else:
        mlp, mlp_other = _mlp_counts(arch, arch.ffn_hidden_size)
    total_mlp = mlp + mlp_other + experts * (expert + expert_other) + shared + shared_other
    norms = arch.layer_parameters(layer=layer) - attention - total_mlp - router
    return LayerWeights(
        attention_matrices=attention_matrices,
        attention_other=attention - attention_matrices,
        mlp_matrices=mlp,
        mlp_other=mlp_other,
        expert_matrices=expert,
        expert_other=expert_other,
        shared_matrices=shared,
        shared_other=shared_other,
        router=router,
        norms=norms,
        num_experts=experts,
    )


def _weight_bytes(precision: Precision) -> tuple[float, float, float]:
    """Bytes per weight of (non-expert linear layers, routed experts, everything else)."""
    dense = float(precision.dense_weight_bytes)
    quantized = precision.bytes_per_weight
    linear = quantized if precision.scope == "linear" else dense
    return linear, quantized, dense


def layer_weight_bytes(
    arch: Architecture, layer: int, precision: Precision, experts_read: ArrayLike | None = None
) -> Array:
    """Bytes of layer ``layer``'s weights; ``experts_read``: routed experts counted (default:
    all, the stored size; a pass reads the experts its tokens hit)."""
    w = layer_weights(arch, layer)
    linear, expert_bytes, dense = _weight_bytes(precision)
    experts = np.asarray(w.num_experts if experts_read is None else experts_read, np.float64)
    return (
        (w.attention_matrices + w.mlp_matrices + w.shared_matrices) * linear
        + (w.attention_other + w.mlp_other + w.shared_other + w.router + w.norms) * dense
        + experts * (w.expert_matrices * expert_bytes + w.expert_other * dense)
    )


def end_weight_parameters(arch: Architecture) -> tuple[int, int]:
    """(embedding side: token + learned position embeddings + embedding norm, LM head side:
    head matrix + final norm); both stay in the compute dtype."""
    h = arch.hidden_size
    norm = 2 * h if arch.norm == "layernorm" else h
    embedding = arch.vocab_size * h + (arch.max_context * h if arch.position == "learned" else 0)
    embedding += norm if arch.embedding_norm else 0
    head = (0 if arch.tie_embeddings else arch.vocab_size * h) + norm
    return embedding, head


@lru_cache(maxsize=64)
def stored_layer_bytes(arch: Architecture, precision: Precision) -> Array:
    """Stored bytes of each layer's weights (all experts), in layer order."""
    return np.array([layer_weight_bytes(arch, i, precision) for i in range(arch.num_layers)])


def weight_bytes(arch: Architecture, precision: Precision | None = None) -> float:
    """Bytes of all stored weights at ``precision`` (default bf16), scales included."""
    precision = precision or BF16
    layers = float(stored_layer_bytes(arch, precision).sum())
    return layers + sum(end_weight_parameters(arch)) * precision.dense_weight_bytes


def kv_bytes_per_token_layer(arch: Architecture, precision: Precision, tp: int = 1) -> float:
    """KV-cache bytes one token adds to one layer on one GPU: K and V of each KV head (split
    over tp, replicated when tp exceeds the KV heads), or MLA's latent and RoPE key (shared by
    all heads, so replicated on every rank). int8 caches add a 16-bit scale per vector."""
    element = precision.kv_bytes_per_element
    scale = 2 if precision.kv_cache == "int8" else 0
    if arch.mla:
        return float((arch.kv_lora_rank or 0) * element + (arch.qk_rope_head_dim or 0) * element)
    vectors = 2 * max(arch.kv_heads / tp, 1.0)
    return vectors * (arch.dim_per_head * element + scale)


def _kv_bytes_per_token_layer_mla_scales(arch: Architecture, precision: Precision) -> float:
    """An int8 MLA cache keeps one 16-bit scale per token (latent and RoPE key together)."""
    return 2.0 if arch.mla and precision.kv_cache == "int8" else 0.0


def kv_cache_bytes(
    arch: Architecture, context_tokens: ArrayLike, precision: Precision | None = None, tp: int = 1
) -> Array:
    """Bytes one sequence's KV cache holds with ``context_tokens`` tokens, per GPU: sliding-
    window layers keep at most the window."""
    precision = precision or BF16
    c = np.asarray(context_tokens, dtype=np.float64)
    per_layer = kv_bytes_per_token_layer(arch, precision, tp)
    per_layer += _kv_bytes_per_token_layer_mla_scales(arch, precision)
    total = 0.0 * c
    for layer in range(arch.num_layers):
        kept = _kept_tokens(arch, layer, c)
        total = total + kept * per_layer
    return total


def _kept_tokens(arch: Architecture, layer: int, tokens: Array) -> Array:
    if arch.attention_kind(layer) == "sliding" and arch.sliding_window:
        return np.minimum(tokens, float(arch.sliding_window))
    return tokens


def expected_experts_touched(arch: Architecture, tokens: ArrayLike) -> Array:
    """Distinct routed experts per MoE layer that ``tokens`` tokens hit, routed uniformly at
    random (shared experts are always read and not counted here)."""
    t = np.asarray(tokens, dtype=np.float64)
    e, k = arch.num_experts, arch.experts_per_token
    if e == 1:
        return np.ones_like(t)
    return e * (1.0 - (1.0 - k / e) ** t)


def check_size(arch: Architecture) -> None:
    """Counting walks the layers: refuse depths no model has (a typo, or a hostile config)."""
    if arch.num_layers > MAX_LAYERS:
        raise InputError(
            f"{arch.name} has {arch.num_layers} layers; the hardware model takes at most "
            f"{MAX_LAYERS}"
        )


def _check_tp(arch: Architecture, tp: int) -> None:
    if tp < 1 or arch.num_heads % tp:
        raise InputError(
            f"tensor-parallel size {tp} must divide num_heads {arch.num_heads} of {arch.name}"
        )
    if not arch.mla and arch.kv_heads % tp and tp % arch.kv_heads:
        raise InputError(
            f"tensor-parallel size {tp} and num_kv_heads {arch.kv_heads} of {arch.name} must "
            "divide one another"
        )


def _unaligned(elements: float, element_bytes: float) -> bool:
    return (elements * element_bytes) % GEMM_ALIGNMENT_BYTES != 0


def _attended(n: Array, c: Array, window: float | None) -> Array:
    """Sum over new tokens i = 1..n of the positions token c + i attends to: c + i, or at most
    ``window`` (sliding-window layers)."""
    full = n * c + n * (n + 1) / 2
    if window is None:
        return full
    # Positions x = c + 1 .. c + n attend to min(x, W): the sum of x up to W, then W each.
    low_end = np.minimum(c + n, window)
    low = np.where(low_end >= c + 1, (c + 1 + low_end) * (low_end - c) / 2, 0.0)
    high = np.maximum(c + n - np.maximum(c, window), 0.0) * window
    return low + high


def check_precision(hardware: Hardware, precision: Precision) -> None:
    """Refuse, in one line, a precision the GPU cannot compute in (fp8 without fp8 tensor
    cores). Weight-only fp8 still runs there: the weights are dequantized to bf16 per GEMM."""
    if precision.fp8_compute and hardware.peak_fp8_tflops is None:
        raise InputError(
            f"{hardware.name} has no fp8 tensor cores: fp8 activations are not supported there; "
            "use --activations bf16 for weight-only fp8 (dequantized to bf16), or a GPU with fp8"
        )


def compute_hardware(hardware: Hardware, precision: Precision | None) -> Hardware:
    """``hardware`` as the time model sees it at ``precision``: fp8 matmuls (W8A8) run at the
    fp8 tensor-core peak; weight-only formats dequantize and run at the 16-bit peak."""
    if precision is None or not precision.fp8_compute:
        return hardware
    check_precision(hardware, precision)
    return hardware.model_copy(update={"peak_dense_tflops": hardware.peak_fp8_tflops})


def forward_costs(
    arch: Architecture,
    new_tokens: ArrayLike,
    context_tokens: ArrayLike = 0,
    *,
    batch: int = 1,
    dtype: Dtype = "bfloat16",
    tp: int = 1,
    precision: Precision | None = None,
) -> PhaseCosts:
    """Work per GPU of one forward pass over ``batch`` sequences (see the module docstring).

    ``precision`` (default: ``dtype`` everywhere) sets the bytes of weights (quantized linear
    layers with their scales), of the KV cache, and the GEMM element size for alignment."""
    check_size(arch)
    _check_tp(arch, tp)
    precision = precision or Precision.from_dtype(dtype)
    n = np.asarray(new_tokens, dtype=np.float64)
    c = np.asarray(context_tokens, dtype=np.float64)
    n, c = np.broadcast_arrays(n, c)
    size = precision.dense_weight_bytes  # activations stay in the 16-bit compute dtype
    gemm_element = precision.activation_bytes
    layers, h, d = arch.num_layers, arch.hidden_size, arch.dim_per_head
    heads = arch.num_heads
    tokens = batch * n  # new tokens in the pass, all sequences
    head = arch.vocab_size * h
    k_active = arch.experts_per_token
    mlp_in = 2 if arch.gated_mlp else 1

    matmul_flops = 0.0 * n
    attention_flops = 0.0 * n
    weight_bytes = 0.0 * n
    kv_bytes = 0.0 * n
    score_bytes = 0.0 * n
    activation_bytes = 0.0 * n
    unaligned = 0.0 * n
    kv_token = kv_bytes_per_token_layer(arch, precision, tp)
    kv_token += _kv_bytes_per_token_layer_mla_scales(arch, precision)
    experts_read = expected_experts_touched(arch, tokens)
    if arch.mla:
        rank, rope = arch.kv_lora_rank or 0, arch.qk_rope_head_dim or 0
        nope, v_dim = arch.qk_nope_head_dim or 0, arch.v_head_dim or 0
        kv_up = rank * heads * (nope + v_dim)
        q_dim, kv_dim = heads * (nope + rope), rank + rope
    else:
        q_dim, kv_dim = heads * d, arch.kv_heads * d
    for layer in range(layers):
        w = layer_weights(arch, layer)
        window = arch.sliding_window if arch.attention_kind(layer) == "sliding" else None
        attended = _attended(n, c, window)
        # Matmuls a token multiplies through: attention projections, MLP or router + active
        # routed experts + shared experts.
        moe = w.num_experts > 0
        mlp_per_token = (
            w.router + k_active * w.expert_matrices + w.shared_matrices if moe else w.mlp_matrices
        )
        if arch.mla:
            # Two ways to attend: decompress every attended latent into per-head K and V (the
            # cheaper at prefill), or absorb the up-projections into the query and output and
            # attend in latent space (the cheaper at decode); the ideal stack takes the cheaper.
            base = 2.0 * (w.attention_matrices - kv_up) * tokens
            naive = (
                base
                + 2.0 * kv_up * batch * (c + n)
                + 2.0 * heads * (nope + rope + v_dim) * attended * batch
            )
            absorbed = (
                base + 2.0 * kv_up * tokens + 2.0 * heads * (2 * rank + rope) * attended * batch
            )
            attn_total = np.minimum(naive, absorbed)
            attn_core = attn_total - 2.0 * w.attention_matrices * tokens
            matmul_flops = matmul_flops + 2.0 * (w.attention_matrices + mlp_per_token) * tokens
            attention_flops = attention_flops + attn_core
        else:
            matmul_flops = matmul_flops + 2.0 * (w.attention_matrices + mlp_per_token) * tokens
            attention_flops = attention_flops + 4.0 * heads * d * attended * batch
        # Weights: everything but the routed experts, plus the routed experts this pass hits.
        read = experts_read if moe else None
        weight_bytes = weight_bytes + layer_weight_bytes(arch, layer, precision, read)
        # KV cache: read every position some new token attends to, write the new ones.
        span = c + n if window is None else np.minimum(c + n, window + n - 1)
        kv_bytes = kv_bytes + kv_token * batch * (span + n)
        score_bytes = score_bytes + 2 * size * (heads / tp) * attended * batch
        # Activations written once and read once; hidden-size tensors replicated on every TP
        # rank (norms, residuals), the wide ones split.
        width = (
            k_active * arch.expert_ffn_hidden_size
            + arch.num_shared_experts * arch.expert_ffn_hidden_size
            if moe
            else arch.ffn_hidden_size
        )
        split = 2 * q_dim + 2 * kv_dim + (mlp_in + 1) * width
        expert_width = arch.expert_ffn_hidden_size if moe else arch.ffn_hidden_size
        activation_bytes = activation_bytes + 2 * size * tokens * (6 * h + split / tp)
        # GEMMs whose per-GPU shapes break tensor-core alignment (e.g. ffn 27308 / tp 4 =
        # 6827): each GEMM with the (N, K) it has on one rank; the token dimension is M, no
        # leading dimension of a row-major activation, so it does not count.
        gemms = (
            (w.attention_matrices, (h, q_dim / tp, kv_dim / tp)),
            (mlp_per_token - w.router, (h, expert_width / tp)),
            (w.router, (h, arch.num_experts)),  # replicated: not split by tp
        )
        for weights, dims in gemms:
            if weights and any(_unaligned(x, gemm_element) for x in dims):
                unaligned = unaligned + 2.0 * weights * tokens
    flops = matmul_flops + attention_flops + 2.0 * head * batch  # logits: last position only
    if _unaligned(d, gemm_element):  # QK^T and PV multiply through the head dimension
        unaligned = unaligned + attention_flops
    if _unaligned(h, gemm_element) or _unaligned(arch.vocab_size / tp, gemm_element):
        unaligned = unaligned + 2.0 * head * batch
    _, head_params = end_weight_parameters(arch)
    weight_bytes = (weight_bytes + head_params * size) / tp
    activation_bytes = activation_bytes + 2 * size * tokens * h  # embedding gather + write

    per_layer = 1 if arch.parallel_attn_mlp else 2
    num_allreduces = (per_layer * layers if tp > 1 else 0) + 0.0 * n
    allreduce_bytes = tokens * h * size if tp > 1 else 0.0 * n
    return PhaseCosts(
        flops=np.asarray(flops / tp, dtype=np.float64),
        unaligned_flops=np.asarray(unaligned / tp, dtype=np.float64),
        weight_bytes=np.asarray(weight_bytes, dtype=np.float64),
        kv_bytes=np.asarray(kv_bytes, dtype=np.float64),
        activation_bytes=np.asarray(activation_bytes, dtype=np.float64),
        score_bytes=np.asarray(score_bytes, dtype=np.float64),
        allreduce_bytes=np.asarray(allreduce_bytes, dtype=np.float64),
        num_allreduces=np.asarray(num_allreduces, dtype=np.float64),
        num_passes=np.ones_like(n),
        tokens=np.asarray(tokens, dtype=np.float64),
    )


def request_costs(
    arch: Architecture,
    num_prompt_tokens: ArrayLike,
    num_output_tokens: ArrayLike,
    *,
    batch: int = 1,
    dtype: Dtype = "bfloat16",
    tp: int = 1,
    precision: Precision | None = None,
) -> RequestCosts:
    """FLOPs and bytes per GPU of a whole request: prompt pass + sum of o - 1 decode steps.

    Decode step i (1-based) attends to the p + i - 1 cached tokens plus itself; every count is
    linear in the context (up to a sliding window), so the sum over steps is the count at the
    mean context times o - 1. (MoE decode steps each read the experts ``batch`` tokens touch.)
    """
    p = np.asarray(num_prompt_tokens, dtype=np.float64)
    o = np.asarray(num_output_tokens, dtype=np.float64)
    if np.any(p < 1) or np.any(o < 0):
        raise InputError("prompt token counts must be >= 1 and output token counts >= 0")
    steps = np.maximum(o - 1.0, 0.0)  # o = 0: the prompt pass only, as in HELM
    kwargs = {"batch": batch, "dtype": dtype, "tp": tp, "precision": precision}
    prompt = forward_costs(arch, p, 0.0, **kwargs)  # type: ignore[arg-type]
    mean_context = p + steps / 2.0 - 0.5  # mean of p + i - 1 over i = 1..steps
    step = forward_costs(arch, np.ones_like(p * o), mean_context, **kwargs)  # type: ignore[arg-type]
    # Totals scale with the number of steps; allreduce_bytes is per all-reduce and stays.
    totals = {k: v * steps for k, v in vars(step).items() if k not in ("allreduce_bytes", "tokens")}
    decode = PhaseCosts(
        **totals, allreduce_bytes=step.allreduce_bytes + 0.0 * steps, tokens=step.tokens
    )
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


@dataclass(frozen=True)
class PromptCosts:
    """The work that yields a request's first output token, counted the way an engine runs
    the prompt: one pass over it (``first``), or, for engines that hold the last prompt token
    back (``Efficiency.last_prompt_token_in_decode``), a pass over the others (``first``, run
    only where ``runs_first``: not for a one-token prompt) and a decode step at context p - 1
    (``tail``)."""

    first: PhaseCosts
    runs_first: NDArray[np.bool_]
    tail: PhaseCosts | None = None


def prompt_costs(
    arch: Architecture,
    num_prompt_tokens: ArrayLike,
    *,
    batch: int = 1,
    dtype: Dtype = "bfloat16",
    tp: int = 1,
    precision: Precision | None = None,
    last_token_in_decode: bool = False,
) -> PromptCosts:
    """Per-GPU work of the first output token of prompts of ``num_prompt_tokens`` tokens."""
    p = np.asarray(num_prompt_tokens, dtype=np.float64)
    kwargs = {"batch": batch, "dtype": dtype, "tp": tp, "precision": precision}
    if not last_token_in_decode:
        return PromptCosts(forward_costs(arch, p, 0.0, **kwargs), np.ones(p.shape, dtype=bool))
    head = forward_costs(arch, np.maximum(p - 1.0, 1.0), 0.0, **kwargs)
    tail = forward_costs(arch, np.ones_like(p), p - 1.0, **kwargs)
    return PromptCosts(head, p > 1.0, tail)


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


def predict_alpha(
    arch: Architecture,
    hardware: Hardware,
    num_prompt_tokens: ArrayLike,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    batch: int = 1,
    efficiency: Efficiency = IDEAL,
    precision: Precision | None = None,
) -> Array:
    """alpha(p): the prompt's processing up to and including the first output token."""
    costs = prompt_costs(
        arch,
        num_prompt_tokens,
        batch=batch,
        dtype=dtype,
        tp=tp,
        precision=precision,
        last_token_in_decode=efficiency.last_prompt_token_in_decode,
    )
    hardware = compute_hardware(hardware, precision)
    return prompt_time(costs, hardware, num_layers=arch.num_layers, tp=tp, efficiency=efficiency)


def decode_step_time(
    arch: Architecture,
    hardware: Hardware,
    context_tokens: ArrayLike,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    batch: int = 1,
    efficiency: Efficiency = IDEAL,
    precision: Precision | None = None,
) -> PhaseTime:
    """One decode step of ``batch`` sequences, each with ``context_tokens`` cached tokens."""
    c = np.asarray(context_tokens, dtype=np.float64)
    costs = forward_costs(
        arch, np.ones_like(c), c, batch=batch, dtype=dtype, tp=tp, precision=precision
    )
    hardware = compute_hardware(hardware, precision)
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
    precision: Precision | None = None,
) -> Array:
    """beta(context): seconds of a decode step at a context length."""
    return decode_step_time(
        arch,
        hardware,
        context_tokens,
        tp=tp,
        dtype=dtype,
        batch=batch,
        efficiency=efficiency,
        precision=precision,
    ).total_s


def predict_alpha_beta(
    arch: Architecture,
    hardware: Hardware,
    *,
    tp: int = 1,
    dtype: Dtype = "bfloat16",
    batch: int = 1,
    efficiency: Efficiency = IDEAL,
    precision: Precision | None = None,
    prompt_sizes: ArrayLike = HELM_PROMPT_SIZES,
) -> tuple[Array, Array]:
    """(alpha at ``prompt_sizes``, beta at contexts ``prompt_sizes``): a quick table."""
    kwargs = {
        "tp": tp,
        "dtype": dtype,
        "batch": batch,
        "efficiency": efficiency,
        "precision": precision,
    }
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
    precision: Precision | None = None,
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
    kwargs = {
        "tp": tp,
        "dtype": dtype,
        "batch": batch,
        "efficiency": efficiency,
        "precision": precision,
    }
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
    precision: Precision | None = None,
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
    kwargs = {
        "tp": tp,
        "dtype": dtype,
        "batch": batch,
        "efficiency": efficiency,
        "precision": precision,
    }
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
            notes=f"{method} hardware model, batch {batch}"
            + (f", precision {precision.label}" if precision else ""),
        ),
    )
