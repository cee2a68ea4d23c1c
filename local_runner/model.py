"""A decoder-only transformer built from an ``Architecture``, with random weights, for timing.

One concern, one file on purpose (as gpt-fast's model.py and nanoGPT's), read top to bottom:
norms, rotary/ALiBi positions, the static KV caches, attention (and DeepSeek's multi-head latent
attention), the (dense or mixture-of-experts) MLP, the block, and the model. It covers GPT-2,
GPT-J, GPT-NeoX, OPT, BLOOM, Llama, Mistral, Mixtral, Qwen2/3, Qwen3-MoE, Phi-3, Gemma 2/3,
DeepSeek-V3 and gpt-oss shapes: MHA/GQA/MLA, full or partial
rotary, learned and ALiBi positions, LayerNorm/RMSNorm (Gemma's 1 + weight, q/k norms, sandwich
norms), GELU/ReLU/SwiGLU/GeGLU, parallel attention+MLP, sliding-window layers, attention sinks,
soft-capping, top-k MoE with shared experts and group-limited sigmoid routing.

Choices made for speed, since the point is timing the architecture on a well-optimised stack:
  * q, k, v are one fused matmul, gate and up another (fewer, larger GEMMs; Megatron layout);
  * the KV cache is preallocated [batch, kv_heads, max_seq, head_dim] per layer and attention is
    torch's fused ``scaled_dot_product_attention`` over a prefix of it; a sliding-window layer
    keeps only its window (a ring buffer), MLA caches only the latent and the RoPE key;
  * MLA decodes in the absorbed form (queries projected into the latent space, as serving
    engines do) and prefills with expanded keys and values;
  * prefill computes logits for the last position only;
  * every shape in a decode step is static when ``kv_len`` is a bucket, so a step can be captured
    in a CUDA graph (see generate.py).
Tensor parallelism is built in, Megatron style (see parallel.py): layers hold their local shard.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from idealized_runtime.core.types import Architecture, RopeScaling
from idealized_runtime.local_runner.parallel import (
    SINGLE,
    ShardSpec,
    TensorParallel,
    all_gather_last_dim,
    all_reduce,
    padded_vocab_size,
    vocab_parallel_embedding,
)
from idealized_runtime.local_runner.rope import (
    yarn_attention_factor,
    yarn_inv_freq,
    yarn_softmax_scale,
)

INIT_STD = 0.02

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def _param(
    full_shape: tuple[int, ...],
    tp: TensorParallel,
    shard: ShardSpec | None,
    init: str,
    device: torch.device | str,
    dtype: torch.dtype,
) -> nn.Parameter:
    """An uninitialised parameter holding this rank's shard; ``reset_parameters`` fills it."""
    local_shape = list(full_shape)
    if shard is not None and tp.enabled:
        local_shape[shard.dim] //= tp.size
    param = nn.Parameter(torch.empty(local_shape, device=device, dtype=dtype), requires_grad=False)
    param.full_shape = tuple(full_shape)
    param.shard_spec = shard
    param.init_kind = init  # "normal", "normal_out" (residual projections), "ones", "zeros"
    return param


def _activation(name: str):
    if name in ("gelu", "geglu"):
        return F.gelu
    if name in ("gelu_new", "geglu_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    return F.silu  # silu, swiglu


class Norm(nn.Module):
    """LayerNorm or RMSNorm over ``size`` channels (default: hidden); Gemma scales by 1 + w."""

    def __init__(
        self, arch: Architecture, tp: TensorParallel, device, dtype, size: int | None = None
    ) -> None:
        super().__init__()
        h = size or arch.hidden_size
        self.eps, self.layernorm = arch.norm_eps, arch.norm == "layernorm" and size is None
        self.unit_offset = arch.norm_unit_offset
        init = "zeros" if self.unit_offset else "ones"
        self.weight = _param((h,), tp, None, init, device, dtype)
        self.bias = _param((h,), tp, None, "zeros", device, dtype) if self.layernorm else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = 1.0 + self.weight if self.unit_offset else self.weight
        if self.layernorm:
            return F.layer_norm(x, self.weight.shape, weight, self.bias, self.eps)
        return F.rms_norm(x, self.weight.shape, weight, self.eps)


def rotary_tables(
    rotary_dim: int, max_seq_len: int, theta: float, device, scaling: RopeScaling | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape [max_seq_len, rotary_dim / 2] (fp32); YaRN-scaled when ``scaling``."""
    if scaling is None:
        inv_freq = 1.0 / theta ** (
            torch.arange(0, rotary_dim, 2, device=device, dtype=torch.float32) / rotary_dim
        )
        factor = 1.0
    else:
        inv_freq = yarn_inv_freq(rotary_dim, theta, scaling, device)
        factor = yarn_attention_factor(scaling)
    angles = torch.outer(torch.arange(max_seq_len, device=device, dtype=torch.float32), inv_freq)
    return angles.cos() * factor, angles.sin() * factor


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``2 * cos.shape[-1]`` channels of each head, NeoX/Llama half-split style
    (GPT-J's interleaved pairs are permuted into this layout when its weights are loaded).
    x: [batch, T, heads, head_dim]; cos, sin: [T, 1, rotary_dim / 2]."""
    half = cos.shape[-1]
    rot, rest = x[..., : 2 * half], x[..., 2 * half :]
    x1, x2 = rot[..., :half], rot[..., half:]
    rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    return torch.cat((rotated, rest), dim=-1) if rest.shape[-1] else rotated


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """ALiBi head slopes (Press et al.; BLOOM's rule for head counts that are not powers of 2)."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-(2.0 ** -(math.log2(closest) - 3)))
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest != num_heads:
        extra = 2.0 ** (-(2.0 ** -(math.log2(2 * closest) - 3)))
        slopes += [extra ** (2 * i + 1) for i in range(num_heads - closest)]
    return torch.tensor(slopes, dtype=torch.float32)


@dataclass
class StepContext:
    """What every layer of one forward shares: positions, the attention mask, rotary angles."""

    input_pos: torch.Tensor  # [T] int64
    kv_len: int  # attend to cache positions [0, kv_len)
    is_causal: bool
    mask: torch.Tensor | None  # bool [T, kv_len] or float [heads, T, kv_len] (ALiBi)
    cos: torch.Tensor | None
    sin: torch.Tensor | None
    sliding_cos: torch.Tensor | None = None  # Gemma 3: sliding layers' own RoPE base
    sliding_sin: torch.Tensor | None = None


class KVCache(nn.Module):
    """Preallocated keys and values of one layer: [max_batch, kv_heads, slots, head_dim].

    A full-attention layer has a slot per position. A sliding-window layer whose window is
    shorter than the sequence keeps a ring of ``window`` slots (position p in slot p % window)
    and remembers each slot's position, so that its attention can mask by position."""

    def __init__(
        self, batch: int, kv_heads: int, slots: int, head_dim: int, device, dtype, ring: bool
    ):
        super().__init__()
        shape = (batch, kv_heads, slots, head_dim)
        self.register_buffer("k", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.ring = ring
        positions = torch.full((slots,), -1, device=device, dtype=torch.long)
        self.register_buffer("positions", positions, persistent=False)

    def update(
        self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_len: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch = k.shape[0]
        k_all, v_all = self.k[:batch], self.v[:batch]
        k_all.index_copy_(2, input_pos, k)
        v_all.index_copy_(2, input_pos, v)
        return k_all[:, :, :kv_len], v_all[:, :, :kv_len]

    def update_ring(
        self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Keys, values and their positions that the new tokens may attend to (masked by the
        caller); the ring then keeps the last ``slots`` of them."""
        batch, slots, seq = k.shape[0], self.positions.shape[0], k.shape[2]
        k_ring, v_ring = self.k[:batch], self.v[:batch]
        if seq == 1:  # decode: write first, then the ring holds everything in the window
            slot = input_pos % slots
            k_ring.index_copy_(2, slot, k)
            v_ring.index_copy_(2, slot, v)
            self.positions.index_copy_(0, slot, input_pos)
            return k_ring, v_ring, self.positions
        # Several tokens: attend over the ring (older tokens only) and the new ones, then keep
        # the newest. Ring entries at or after the first new position are from an earlier
        # sequence; they get position -1, which no query sees.
        older = self.positions.masked_fill(self.positions >= input_pos[0], -1)
        keys, values = torch.cat([k_ring, k], 2), torch.cat([v_ring, v], 2)
        key_pos = torch.cat([older, input_pos])
        keep = input_pos[-slots:]
        k_ring.index_copy_(2, keep % slots, k[:, :, -slots:])
        v_ring.index_copy_(2, keep % slots, v[:, :, -slots:])
        self.positions.index_copy_(0, keep % slots, keep)
        return keys, values, key_pos


class LatentCache(nn.Module):
    """MLA's cache: per token the normalised kv latent and the RoPE key, [batch, seq, r + rope]."""

    def __init__(self, batch: int, max_seq_len: int, width: int, device, dtype) -> None:
        super().__init__()
        shape = (batch, max_seq_len, width)
        self.register_buffer(
            "latent", torch.zeros(shape, device=device, dtype=dtype), persistent=False
        )

    def update(self, input_pos: torch.Tensor, latent: torch.Tensor, kv_len: int) -> torch.Tensor:
        cache = self.latent[: latent.shape[0]]
        cache.index_copy_(1, input_pos, latent)
        return cache[:, :kv_len]


def _grouped_decode_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """GQA for one new token without repeating the cache: the query heads that share a key/value
    head become that head's query rows, so any SDPA kernel (with or without a mask) reads each
    cached key once. q: [batch, heads, 1, d]; k, v: [batch, kv_heads, S, d]."""
    batch, heads, _, d = q.shape
    kv_heads = k.shape[1]
    q = q.reshape(batch, kv_heads, heads // kv_heads, d)
    if mask is not None and mask.dim() == 3:  # ALiBi bias [heads, 1, S]
        mask = mask.reshape(kv_heads, heads // kv_heads, mask.shape[-1])
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return y.reshape(batch, heads, 1, d)


def _eager_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    softcap: float | None,
    sinks: torch.Tensor | None,
) -> torch.Tensor:
    """Attention spelled out, for what fused SDPA cannot do: Gemma 2's soft-capped scores and
    gpt-oss's sinks (a per-head logit that joins the softmax and is then dropped).
    q: [batch, heads, T, d]; k, v: [batch, kv_heads, S, d]; mask: bool [T, S]."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-1, -2)).float() * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    scores = scores.masked_fill(~mask, float("-inf"))
    if sinks is not None:
        sink = sinks.float().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        scores = torch.cat([scores, sink], dim=-1)
    probs = scores.softmax(dim=-1)
    if sinks is not None:
        probs = probs[..., :-1]
    return probs.to(v.dtype) @ v


def _window_mask(
    query_pos: torch.Tensor, key_pos: torch.Tensor, window: int | None
) -> torch.Tensor:
    """bool [T, S]: keys at or before each query (and within its window), never empty slots."""
    q, k = query_pos.unsqueeze(1), key_pos.unsqueeze(0)
    allowed = (k <= q) & (k >= 0)
    return allowed & (k > q - window) if window is not None else allowed


class Attention(nn.Module):
    """Column-parallel fused QKV, SDPA over the cache, row-parallel output projection."""

    def __init__(
        self, arch: Architecture, tp: TensorParallel, device, dtype, layer: int = 0
    ) -> None:
        super().__init__()
        h, d = arch.hidden_size, arch.dim_per_head
        q_out, kv_out = arch.num_heads * d, arch.kv_heads * d
        self.tp, self.head_dim = tp, d
        self.local_heads, self.local_kv_heads = arch.num_heads // tp.size, arch.kv_heads // tp.size
        qkv_bias = arch.bias if arch.qkv_bias is None else arch.qkv_bias
        qkv_shard = ShardSpec(0, (q_out, kv_out, kv_out))
        self.qkv_weight = _param((q_out + 2 * kv_out, h), tp, qkv_shard, "normal", device, dtype)
        self.qkv_bias = (
            _param((q_out + 2 * kv_out,), tp, qkv_shard, "zeros", device, dtype)
            if qkv_bias
            else None
        )
        self.out_weight = _param(
            (h, q_out), tp, ShardSpec(1, (q_out,)), "normal_out", device, dtype
        )
        self.out_bias = _param((h,), tp, None, "zeros", device, dtype) if arch.bias else None
        self.q_norm = Norm(arch, tp, device, dtype, size=d) if arch.qk_norm else None
        self.k_norm = Norm(arch, tp, device, dtype, size=d) if arch.qk_norm else None
        heads = arch.num_heads
        self.sinks = (
            _param((heads,), tp, ShardSpec(0, (heads,)), "normal", device, dtype)
            if arch.attention_sinks
            else None
        )
        self.window = arch.sliding_window if arch.attention_kind(layer) == "sliding" else None
        self.own_rope = self.window is not None and arch.sliding_rope_theta is not None
        self.scale = (arch.query_pre_attn_scalar or d) ** -0.5
        self.softcap = arch.attn_logit_softcap
        self.kv_cache: KVCache | None = None

    def cache_slots(self, max_seq_len: int) -> int:
        """Positions this layer caches: a sliding layer needs at most its window."""
        return min(max_seq_len, self.window or max_seq_len)

    def forward(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        batch, seq, _ = x.shape
        heads, kv_heads, d = self.local_heads, self.local_kv_heads, self.head_dim
        qkv = F.linear(x, self.qkv_weight, self.qkv_bias)
        qk, v = qkv.split([(heads + kv_heads) * d, kv_heads * d], dim=-1)
        qk = qk.view(batch, seq, heads + kv_heads, d)
        if self.q_norm is not None:  # Qwen3, Gemma 3: per-head RMSNorm of q and k before RoPE
            q, k = qk.split([heads, kv_heads], dim=2)
            qk = torch.cat([self.q_norm(q), self.k_norm(k)], dim=2)
        cos, sin = (ctx.sliding_cos, ctx.sliding_sin) if self.own_rope else (ctx.cos, ctx.sin)
        if cos is not None:
            # Rotate q and k in one pass, in the [batch, T, heads, d] layout: elementwise ops
            # on the transposed [batch, heads, T, d] views are many times slower on CPU.
            qk = apply_rotary(qk, cos, sin)
        q, k = qk.split([heads, kv_heads], dim=2)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(batch, seq, kv_heads, d).transpose(1, 2)
        assert self.kv_cache is not None, "call setup_cache() first"
        if self.kv_cache.ring:
            k, v, key_pos = self.kv_cache.update_ring(ctx.input_pos, k, v)
            y = self._masked(q, k, v, _window_mask(ctx.input_pos, key_pos, self.window))
        else:
            k, v = self.kv_cache.update(ctx.input_pos, k, v, ctx.kv_len)
            if self.sinks is not None or self.softcap is not None:
                key_pos = torch.arange(ctx.kv_len, device=x.device)
                y = self._masked(q, k, v, _window_mask(ctx.input_pos, key_pos, None))
            elif seq == 1 and heads != kv_heads:
                y = _grouped_decode_attention(q, k, v, ctx.mask, self.scale)
            else:
                y = F.scaled_dot_product_attention(
                    q,
                    k,
                    v,
                    attn_mask=ctx.mask,
                    is_causal=ctx.is_causal,
                    enable_gqa=heads != kv_heads,
                    scale=self.scale,
                )
        y = y.transpose(1, 2).reshape(batch, seq, heads * d)
        # Row-parallel: the bias is added once, after the partial sums are reduced.
        if not self.tp.enabled:
            return F.linear(y, self.out_weight, self.out_bias)
        y = all_reduce(F.linear(y, self.out_weight), self.tp)
        return y + self.out_bias if self.out_bias is not None else y

    def _masked(self, q, k, v, mask: torch.Tensor) -> torch.Tensor:
        if self.sinks is not None or self.softcap is not None:
            return _eager_attention(q, k, v, mask, self.scale, self.softcap, self.sinks)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1], scale=self.scale
        )


class LatentAttention(nn.Module):
    """DeepSeek's multi-head latent attention. Queries go through a low-rank bottleneck; keys
    and values are up-projected from a cached kv_lora_rank latent, plus one RoPE key shared by
    all heads. Decode uses the absorbed form: each head's query is mapped into the latent space,
    attention runs over the cache as it is (one 'head' of latent + RoPE key), and the result is
    mapped to values afterwards. Heads are split across TP ranks; the latent is replicated."""

    def __init__(self, arch: Architecture, tp: TensorParallel, device, dtype) -> None:
        super().__init__()
        h, heads = arch.hidden_size, arch.num_heads
        nope, rope = arch.qk_nope_head_dim or 0, arch.qk_rope_head_dim or 0
        rank, v_dim = arch.kv_lora_rank or 0, arch.v_head_dim or 0
        self.tp, self.local_heads = tp, heads // tp.size
        self.nope, self.rope, self.rank, self.v_dim = nope, rope, rank, v_dim
        q_out, kv_up = heads * (nope + rope), heads * (nope + v_dim)
        if arch.q_lora_rank:
            self.q_down_weight = _param((arch.q_lora_rank, h), tp, None, "normal", device, dtype)
            self.q_norm = Norm(arch, tp, device, dtype, size=arch.q_lora_rank)
            q_in = arch.q_lora_rank
        else:
            self.q_down_weight, self.q_norm, q_in = None, None, h
        self.q_up_weight = _param(
            (q_out, q_in), tp, ShardSpec(0, (q_out,)), "normal", device, dtype
        )
        self.kv_down_weight = _param((rank + rope, h), tp, None, "normal", device, dtype)
        self.kv_norm = Norm(arch, tp, device, dtype, size=rank)
        self.kv_up_weight = _param(
            (kv_up, rank), tp, ShardSpec(0, (kv_up,)), "normal", device, dtype
        )
        self.out_weight = _param(
            (h, heads * v_dim), tp, ShardSpec(1, (heads * v_dim,)), "normal_out", device, dtype
        )
        self.scale = (nope + rope) ** -0.5 * yarn_softmax_scale(arch.rope_scaling)
        self.kv_cache: LatentCache | None = None

    def forward(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        batch, seq, _ = x.shape
        heads, nope, rope, rank = self.local_heads, self.nope, self.rope, self.rank
        q = x if self.q_down_weight is None else self.q_norm(F.linear(x, self.q_down_weight))
        q = F.linear(q, self.q_up_weight).view(batch, seq, heads, nope + rope)
        q_nope, q_rope = q.split([nope, rope], dim=-1)
        latent, k_rope = F.linear(x, self.kv_down_weight).split([rank, rope], dim=-1)
        q_rope = apply_rotary(q_rope, ctx.cos, ctx.sin)
        k_rope = apply_rotary(k_rope.unsqueeze(2), ctx.cos, ctx.sin).squeeze(2)
        assert self.kv_cache is not None, "call setup_cache() first"
        cached = self.kv_cache.update(
            ctx.input_pos, torch.cat([self.kv_norm(latent), k_rope], dim=-1), ctx.kv_len
        )
        w_uk, w_uv = torch.reshape(self.kv_up_weight, (heads, nope + self.v_dim, rank)).split(
            [nope, self.v_dim], 1
        )
        if seq == 1:
            q_latent = torch.einsum("bthn,hnr->bhtr", q_nope, w_uk)
            q_all = torch.cat([q_latent, q_rope.transpose(1, 2)], dim=-1)
            y = F.scaled_dot_product_attention(
                q_all,
                cached.unsqueeze(1),
                cached[..., :rank].unsqueeze(1),
                attn_mask=ctx.mask,
                enable_gqa=True,
                scale=self.scale,
            )
            y = torch.einsum("bhtr,hvr->bthv", y, w_uv)
        else:
            kv_len = cached.shape[1]
            kv = F.linear(cached[..., :rank], self.kv_up_weight).view(batch, kv_len, heads, -1)
            k_nope, v = kv.split([nope, self.v_dim], dim=-1)
            k_shared = cached[..., rank:].unsqueeze(2).expand(-1, -1, heads, -1)
            k = torch.cat([k_nope, k_shared], dim=-1).transpose(1, 2)
            y = F.scaled_dot_product_attention(
                torch.cat([q_nope, q_rope], dim=-1).transpose(1, 2),
                k,
                v.transpose(1, 2),
                attn_mask=ctx.mask,
                is_causal=ctx.is_causal,
                scale=self.scale,
            ).transpose(1, 2)
        y = all_reduce(F.linear(y.reshape(batch, seq, -1), self.out_weight), self.tp)
        return y


def _gated(y: torch.Tensor, act, limit: float | None, alpha: float) -> torch.Tensor:
    """act(gate) * up; gpt-oss clamps both and uses (up + 1) * gate * sigmoid(alpha * gate)."""
    gate, up = y.chunk(2, dim=-1)
    if limit is None:
        return act(gate) * up
    gate, up = gate.clamp(max=limit), up.clamp(-limit, limit)
    return (up + 1) * gate * torch.sigmoid(alpha * gate)


class MLP(nn.Module):
    """Column-parallel up (fused gate|up when gated), row-parallel down."""

    def __init__(
        self, arch: Architecture, tp: TensorParallel, device, dtype, width: int | None = None
    ) -> None:
        super().__init__()
        h, f = arch.hidden_size, width or arch.ffn_hidden_size
        self.tp, self.gated, self.act = tp, arch.gated_mlp, _activation(arch.activation)
        self.limit, self.alpha = arch.swiglu_limit, arch.swiglu_alpha
        parts = (f, f) if self.gated else (f,)
        shard_in = ShardSpec(0, parts)
        self.in_weight = _param((sum(parts), h), tp, shard_in, "normal", device, dtype)
        self.in_bias = (
            _param((sum(parts),), tp, shard_in, "zeros", device, dtype) if arch.bias else None
        )
        self.out_weight = _param((h, f), tp, ShardSpec(1, (f,)), "normal_out", device, dtype)
        self.out_bias = _param((h,), tp, None, "zeros", device, dtype) if arch.bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.in_weight, self.in_bias)
        y = _gated(y, self.act, self.limit, self.alpha) if self.gated else self.act(y)
        if not self.tp.enabled:
            return F.linear(y, self.out_weight, self.out_bias)
        y = all_reduce(F.linear(y, self.out_weight), self.tp)
        return y + self.out_bias if self.out_bias is not None else y


class MoE(nn.Module):
    """Top-k routed experts (+ DeepSeek's shared experts).

    Routing: softmax over the k chosen router logits (Mixtral, gpt-oss, Qwen3-MoE with
    norm_topk_prob), softmax over all experts without renormalising (Qwen3-MoE), or DeepSeek-V3's
    sigmoid scores, chosen with a per-expert selection bias within the best expert groups.
    Each expert's columns are split across TP ranks like a dense MLP. Two execution paths:
    few tokens (decode) gather the chosen experts' weights and batch-multiply, with static shapes
    so the step can be graph-captured; many tokens (prefill) group tokens by expert, which needs
    the host to know the group sizes.
    """

    def __init__(self, arch: Architecture, tp: TensorParallel, device, dtype) -> None:
        super().__init__()
        h, f, e = arch.hidden_size, arch.expert_ffn_hidden_size, arch.num_experts
        self.tp, self.gated, self.act = tp, arch.gated_mlp, _activation(arch.activation)
        self.limit, self.alpha = arch.swiglu_limit, arch.swiglu_alpha
        self.num_experts, self.top_k = e, arch.experts_per_token
        self.sigmoid, self.renormalize = arch.router_scoring == "sigmoid", arch.norm_topk_prob
        self.n_group, self.topk_group = arch.n_group, arch.topk_group
        self.scaling = arch.routed_scaling_factor
        parts = (f, f) if self.gated else (f,)
        self.router = _param((e, h), tp, None, "normal", device, dtype)
        self.router_bias = (
            _param((e,), tp, None, "zeros", device, dtype) if arch.router_bias else None
        )
        if self.sigmoid:  # load balancing bias: steers the choice, not the weights
            self.register_buffer("selection_bias", torch.zeros(e, device=device))
        self.in_weight = _param(
            (e, sum(parts), h), tp, ShardSpec(1, parts), "normal", device, dtype
        )
        self.out_weight = _param((e, h, f), tp, ShardSpec(2, (f,)), "normal_out", device, dtype)
        self.in_bias = (
            _param((e, sum(parts)), tp, ShardSpec(1, parts), "zeros", device, dtype)
            if arch.bias
            else None
        )
        self.out_bias = _param((e, h), tp, None, "zeros", device, dtype) if arch.bias else None
        shared = arch.num_shared_experts * f
        self.shared = MLP(arch, tp, device, dtype, width=shared) if shared else None

    def _hidden(self, y: torch.Tensor) -> torch.Tensor:
        return _gated(y, self.act, self.limit, self.alpha) if self.gated else self.act(y)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each token's chosen experts [tokens, k] and their weights [tokens, k] (fp32)."""
        logits = F.linear(x, self.router, self.router_bias).float()
        if not self.sigmoid:
            if self.renormalize:
                top_logits, top_experts = logits.topk(self.top_k, dim=-1)
                return top_experts, top_logits.softmax(dim=-1)
            top_weights, top_experts = logits.softmax(dim=-1).topk(self.top_k, dim=-1)
            return top_experts, top_weights * self.scaling
        scores = logits.sigmoid()
        choice = scores + self.selection_bias
        if self.n_group > 1:  # keep the topk_group groups with the best two-expert sums
            grouped = choice.view(-1, self.n_group, self.num_experts // self.n_group)
            group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
            best = group_scores.topk(self.topk_group, dim=-1).indices
            keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
            choice = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).flatten(1)
        top_experts = choice.topk(self.top_k, dim=-1).indices
        top_weights = scores.gather(1, top_experts)
        if self.renormalize:
            top_weights = top_weights / (top_weights.sum(dim=-1, keepdim=True) + 1e-20)
        return top_experts, top_weights * self.scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        tokens = x.shape[0]
        top_experts, top_weights = self.route(x)
        top_weights = top_weights.to(x.dtype)
        if tokens * self.top_k <= self.num_experts:
            out = self._gathered(x, top_experts, top_weights)
        else:
            out = self._grouped(x, top_experts, top_weights)
        out = all_reduce(out, self.tp)
        if self.out_bias is not None:
            out = out + (top_weights.unsqueeze(-1) * self.out_bias[top_experts]).sum(dim=1)
        if self.shared is not None:
            out = out + self.shared(x)
        return out.view(shape)

    def _gathered(self, x, top_experts, top_weights) -> torch.Tensor:
        chosen = top_experts.reshape(-1)  # [tokens * k]
        x_rep = x.repeat_interleave(self.top_k, dim=0).unsqueeze(-1)
        y = torch.bmm(self.in_weight[chosen], x_rep).squeeze(-1)
        if self.in_bias is not None:
            y = y + self.in_bias[chosen]
        y = torch.bmm(self.out_weight[chosen], self._hidden(y).unsqueeze(-1)).squeeze(-1)
        return (y.view(*top_weights.shape, -1) * top_weights.unsqueeze(-1)).sum(dim=1)

    def _grouped(self, x, top_experts, top_weights) -> torch.Tensor:
        out = torch.zeros_like(x)
        flat_experts = top_experts.reshape(-1)
        order = torch.argsort(flat_experts, stable=True)
        counts = torch.bincount(flat_experts, minlength=self.num_experts).tolist()
        flat_weights = top_weights.reshape(-1)
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            slots = order[start : start + count]
            start += count
            token_ids = slots // self.top_k
            bias = None if self.in_bias is None else self.in_bias[expert]
            y = self._hidden(F.linear(x[token_ids], self.in_weight[expert], bias))
            y = F.linear(y, self.out_weight[expert]) * flat_weights[slots].unsqueeze(-1)
            out.index_add_(0, token_ids, y)
        return out


class Block(nn.Module):
    def __init__(self, arch: Architecture, tp: TensorParallel, device, dtype, layer: int) -> None:
        super().__init__()
        self.parallel = arch.parallel_attn_mlp
        self.attn_norm = Norm(arch, tp, device, dtype)
        self.attn = (
            LatentAttention(arch, tp, device, dtype)
            if arch.mla
            else Attention(arch, tp, device, dtype, layer)
        )
        shared_norm = arch.parallel_attn_mlp and not arch.parallel_mlp_norm
        self.mlp_norm = None if shared_norm else Norm(arch, tp, device, dtype)
        # Gemma's sandwich: each sub-layer's output is normalised before the residual add.
        self.attn_post_norm = Norm(arch, tp, device, dtype) if arch.sandwich_norm else None
        self.mlp_post_norm = Norm(arch, tp, device, dtype) if arch.sandwich_norm else None
        self.mlp = (MoE if arch.is_moe_layer(layer) else MLP)(arch, tp, device, dtype)

    def forward(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        if self.parallel:  # GPT-J (one shared norm), GPT-NeoX (two norms)
            h = self.attn_norm(x)
            mlp_in = h if self.mlp_norm is None else self.mlp_norm(x)
            return x + self.attn(h, ctx) + self.mlp(mlp_in)
        if self.attn_post_norm is not None:
            x = x + self.attn_post_norm(self.attn(self.attn_norm(x), ctx))
            return x + self.mlp_post_norm(self.mlp(self.mlp_norm(x)))
        x = x + self.attn(self.attn_norm(x), ctx)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """The whole decoder. ``num_layers`` < arch.num_layers builds a layer-sampled model (same
    per-layer shapes, fewer layers) for models that do not fit."""

    def __init__(
        self,
        arch: Architecture,
        *,
        num_layers: int | None = None,
        tp: TensorParallel = SINGLE,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.arch, self.tp, self.dtype = arch, tp, dtype
        self.num_layers = num_layers or arch.num_layers
        h, vocab = arch.hidden_size, arch.vocab_size
        self.padded_vocab = padded_vocab_size(vocab, tp.size)
        vocab_shard = ShardSpec(0, (self.padded_vocab,))
        self.embed = _param((self.padded_vocab, h), tp, vocab_shard, "normal", device, dtype)
        self.pos_embed = (
            _param((arch.max_context, h), tp, None, "normal", device, dtype)
            if arch.position == "learned"
            else None
        )
        self.embed_norm = Norm(arch, tp, device, dtype) if arch.embedding_norm else None
        self.layers = nn.ModuleList(
            Block(arch, tp, device, dtype, layer) for layer in range(self.num_layers)
        )
        self.final_norm = Norm(arch, tp, device, dtype)
        self.lm_head = (
            None
            if arch.tie_embeddings
            else _param((self.padded_vocab, h), tp, vocab_shard, "normal", device, dtype)
        )
        self.rotary_dim = arch.rotary_dim or (
            arch.qk_rope_head_dim if arch.mla else arch.dim_per_head
        )
        self.embed_scale = arch.hidden_size**0.5 if arch.scale_embeddings else None
        if arch.position == "alibi":
            local = arch.num_heads // tp.size
            slopes = alibi_slopes(arch.num_heads)[tp.rank * local : (tp.rank + 1) * local]
            self.register_buffer("alibi", slopes.to(device).view(-1, 1, 1), persistent=False)
        else:
            self.alibi = None
        self.max_batch_size = self.max_seq_len = 0
        # Layer sampling times the first k layers of a built model (see profile.py).
        self.active_layers = self.num_layers

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        """Seeded scaled-normal init (GPT-2 style: residual projections scaled by 1/sqrt(2L)).
        Each tensor is drawn whole from a generator seeded by (seed, name) and then sharded, so
        every TP size and every layer count gets the same weights for the same name."""
        out_std = INIT_STD / math.sqrt(2 * self.arch.num_layers)
        for name, param in self.named_parameters():
            kind = param.init_kind
            if kind in ("ones", "zeros"):
                param.fill_(1.0 if kind == "ones" else 0.0)
                continue
            generator = torch.Generator(device=param.device)
            generator.manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            full = torch.empty(param.full_shape, device=param.device, dtype=torch.float32)
            full.normal_(0.0, out_std if kind == "normal_out" else INIT_STD, generator=generator)
            spec = param.shard_spec
            param.copy_(spec.shard(full, self.tp) if spec is not None else full)

    def setup_cache(self, max_batch_size: int, max_seq_len: int) -> None:
        """Allocate the static KV cache (and rotary tables) for up to this batch and length."""
        arch = self.arch
        if arch.position == "learned" and max_seq_len > arch.max_context:
            raise ValueError(
                f"max_seq_len {max_seq_len} exceeds the {arch.max_context} learned positions"
            )
        self.max_batch_size, self.max_seq_len = max_batch_size, max_seq_len
        kv_heads = arch.kv_heads // self.tp.size
        device, dtype = self.device, self.dtype
        for layer in self.layers:
            attn = layer.attn
            if isinstance(attn, LatentAttention):
                width = (arch.kv_lora_rank or 0) + (arch.qk_rope_head_dim or 0)
                attn.kv_cache = LatentCache(max_batch_size, max_seq_len, width, device, dtype)
                continue
            slots = attn.cache_slots(max_seq_len)
            attn.kv_cache = KVCache(
                max_batch_size,
                kv_heads,
                slots,
                arch.dim_per_head,
                device,
                dtype,
                ring=slots < max_seq_len,
            )
        if arch.position == "rotary":
            cos, sin = rotary_tables(
                self.rotary_dim, max_seq_len, arch.rope_theta, device, arch.rope_scaling
            )
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
            if arch.sliding_rope_theta is not None:
                theta = arch.sliding_rope_theta
                cos, sin = rotary_tables(self.rotary_dim, max_seq_len, theta, device)
                self.register_buffer("sliding_rope_cos", cos, persistent=False)
                self.register_buffer("sliding_rope_sin", sin, persistent=False)

    def kv_cache_bytes(self) -> int:
        """Bytes of the KV-cache tensors this model allocated (all layers, whole batch)."""
        total = 0
        for layer in self.layers:
            cache = layer.attn.kv_cache
            tensors = [cache.latent] if isinstance(cache, LatentCache) else [cache.k, cache.v]
            total += sum(t.numel() * t.element_size() for t in tensors)
        return total

    def _context(self, input_pos: torch.Tensor, seq: int, kv_len: int, exact: bool) -> StepContext:
        cos = sin = sliding_cos = sliding_sin = None
        if self.arch.position == "rotary":
            cos = self.rope_cos[input_pos].to(self.dtype).unsqueeze(1)
            sin = self.rope_sin[input_pos].to(self.dtype).unsqueeze(1)
            if self.arch.sliding_rope_theta is not None:
                sliding_cos = self.sliding_rope_cos[input_pos].to(self.dtype).unsqueeze(1)
                sliding_sin = self.sliding_rope_sin[input_pos].to(self.dtype).unsqueeze(1)
        # exact: the positions are the last `seq` of [0, kv_len), so a full prefill is plain
        # causal attention and a single decode token sees everything: no mask to build.
        is_causal = exact and seq == kv_len and seq > 1
        mask = None
        if self.alibi is not None or not (exact and (seq == 1 or is_causal)):
            key_pos = torch.arange(kv_len, device=input_pos.device)
            allowed = key_pos.unsqueeze(0) <= input_pos.unsqueeze(1)  # [seq, kv_len]
            mask = allowed
            if self.alibi is not None:
                distance = (key_pos.unsqueeze(0) - input_pos.unsqueeze(1)).to(torch.float32)
                bias = (self.alibi * distance).masked_fill(~allowed, float("-inf"))
                mask, is_causal = bias.to(self.dtype), False
        return StepContext(input_pos, kv_len, is_causal, mask, cos, sin, sliding_cos, sliding_sin)

    def forward(
        self,
        tokens: torch.Tensor,
        input_pos: torch.Tensor,
        kv_len: int,
        *,
        exact: bool = True,
        last_only: bool = False,
    ) -> torch.Tensor:
        """tokens [batch, T] at positions ``input_pos`` [T]; attend to cache positions
        [0, kv_len). ``exact``: kv_len == input_pos[-1] + 1 (else a mask hides the padding, as in
        graph-captured decode buckets). Returns logits [batch, T or 1, vocab]."""
        ctx = self._context(input_pos, tokens.shape[1], kv_len, exact)
        x = vocab_parallel_embedding(tokens, self.embed, self.tp)
        if self.embed_scale is not None:  # Gemma: the scale is rounded to the model's dtype
            x = x * torch.tensor(self.embed_scale, dtype=x.dtype)
        if self.pos_embed is not None:
            x = x + self.pos_embed[input_pos]
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        for layer in self.layers[: self.active_layers]:
            x = layer(x, ctx)
        if last_only:
            x = x[:, -1:]
        x = self.final_norm(x)
        head = self.embed if self.lm_head is None else self.lm_head
        logits = all_gather_last_dim(F.linear(x, head), self.tp)[..., : self.arch.vocab_size]
        cap = self.arch.final_logit_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap


def build_model(
    arch: Architecture,
    *,
    device: str = "cpu",
    dtype: str | torch.dtype = "float32",
    num_layers: int | None = None,
    tp: TensorParallel = SINGLE,
    seed: int = 0,
) -> Transformer:
    """A randomly initialised model in inference mode (no gradients)."""
    torch_dtype = TORCH_DTYPES[dtype] if isinstance(dtype, str) else dtype
    model = Transformer(arch, num_layers=num_layers, tp=tp, device=device, dtype=torch_dtype)
    model.reset_parameters(seed)
    return model.eval()
