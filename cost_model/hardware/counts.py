"""Counting: the work of one forward pass per GPU, from the architecture alone (no hardware).

One forward pass processes ``new_tokens`` per sequence on top of ``context_tokens`` already in
the KV cache (prompt: new = p, context = 0; decode step: new = 1, context = tokens so far): matmul
FLOPs, weight/KV/activation bytes, all-reduce traffic (``forward_costs``, ``request_costs``,
``prompt_costs``); and the bytes a deployment holds per GPU (``memory_per_gpu``, the memory
planner's and the runner's pre-flight count). ``roofline`` turns counts into seconds.

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
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import (
    BF16,
    Architecture,
    Precision,
)

Array = NDArray[np.float64]
# Tensor cores need the GEMM dimensions cuBLAS sees (M/N/K, leading dimensions) in multiples of
# 16 bytes (8 fp16/bf16 elements) for their fast kernels; cuBLAS falls back to slower ones
# otherwise (NVIDIA, "Matrix Multiplication Background User's Guide", section "Tensor Core
# Requirements", and the cuBLAS documentation, "Tensor Core Usage"). How much slower is a property
# of the GPU, not of the stack: ``Hardware.unaligned_matmul_tflops`` (see ``unaligned_factor``).
GEMM_ALIGNMENT_BYTES = 16
# Deepest architecture the counting accepts (the deepest published models have ~130 layers).
MAX_LAYERS = 4096


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


def forward_costs(
    arch: Architecture,
    new_tokens: ArrayLike,
    context_tokens: ArrayLike = 0,
    *,
    batch: int = 1,
    tp: int = 1,
    precision: Precision = BF16,
) -> PhaseCosts:
    """Work per GPU of one forward pass over ``batch`` sequences (see the module docstring).

    ``precision`` (default: bf16 everywhere) sets the bytes of weights (quantized linear
    layers with their scales), of the KV cache, and the GEMM element size for alignment."""
    check_size(arch)
    _check_tp(arch, tp)
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
    tp: int = 1,
    precision: Precision = BF16,
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
    kwargs = {"batch": batch, "tp": tp, "precision": precision}
    prompt = forward_costs(arch, p, 0.0, **kwargs)  # type: ignore[arg-type]
    mean_context = p + steps / 2.0 - 0.5  # mean of p + i - 1 over i = 1..steps
    step = forward_costs(arch, np.ones_like(p * o), mean_context, **kwargs)  # type: ignore[arg-type]
    # Totals scale with the number of steps; allreduce_bytes is per all-reduce and stays.
    totals = {k: v * steps for k, v in vars(step).items() if k not in ("allreduce_bytes", "tokens")}
    decode = PhaseCosts(
        **totals, allreduce_bytes=step.allreduce_bytes + 0.0 * steps, tokens=step.tokens
    )
    return RequestCosts(prompt=prompt, decode=decode)


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
    tp: int = 1,
    precision: Precision = BF16,
    last_token_in_decode: bool = False,
) -> PromptCosts:
    """Per-GPU work of the first output token of prompts of ``num_prompt_tokens`` tokens."""
    p = np.asarray(num_prompt_tokens, dtype=np.float64)
    kwargs = {"batch": batch, "tp": tp, "precision": precision}
    if not last_token_in_decode:
        return PromptCosts(forward_costs(arch, p, 0.0, **kwargs), np.ones(p.shape, dtype=bool))
    head = forward_costs(arch, np.maximum(p - 1.0, 1.0), 0.0, **kwargs)
    tail = forward_costs(arch, np.ones_like(p), p - 1.0, **kwargs)
    return PromptCosts(head, p > 1.0, tail)


def memory_per_gpu(
    arch: Architecture,
    precision: Precision = BF16,
    *,
    tp: int = 1,
    pp: int = 1,
    context_tokens: int,
    batch_size: int = 1,
) -> tuple[float, float]:
    """(weight bytes, KV bytes) on the fullest GPU of a tp x pp layout.

    Weights at ``precision``, quantized ones with their scales; the KV cache holds
    ``context_tokens`` per sequence, at most the window in sliding-window layers. Stages hold
    consecutive blocks of ceil(layers / pp) layers, the embedding on the first and the LM head
    on the last; the fullest stage is the one that counts."""
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
