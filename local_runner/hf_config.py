"""HF weights -> our model: a ``*ForCausalLM`` state dict copied into a ``Transformer``.

The config.json -> Architecture mapping lives in ``idealized_runtime.core.architectures`` (no
torch); this module maps each family's weight names and layouts onto the runner's. Loading does
not need ``transformers``: it takes a plain state dict.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from idealized_runtime.core.architectures import (
    SUPPORTED_FAMILIES,
    architecture_from_hf_config,
    architecture_from_hf_file,
    load_architecture,
)
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.model import Transformer

__all__ = [
    "SUPPORTED_FAMILIES",
    "architecture_from_hf_config",
    "architecture_from_hf_file",
    "load_hf_state_dict",
    "resolve_architecture",
]

# The one loader under its former name here (callers that need no torch import it from core).
resolve_architecture = load_architecture

_LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "phi3")
_GEMMA = ("gemma2", "gemma3_text")


# --- weights -------------------------------------------------------------------------------


def _split_heads_qkv(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """NeoX/BLOOM fuse QKV per head ([heads, 3, head_dim, ...]); ours is [q | k | v]."""
    per_head = weight.view(heads, 3, -1, *weight.shape[1:])
    return torch.cat([per_head[:, i].reshape(-1, *weight.shape[1:]) for i in range(3)])


def _interleaved_to_half_rotary(weight: torch.Tensor, heads: int, rotary_dim: int) -> torch.Tensor:
    """Permute q/k output rows so that GPT-J's interleaved rotary pairs (2i, 2i+1) become our
    half-split pairs (i, i + r/2). Applied to both q and k, attention scores are unchanged."""
    head_dim = weight.shape[0] // heads
    order = torch.cat(
        [
            torch.arange(0, rotary_dim, 2),
            torch.arange(1, rotary_dim, 2),
            torch.arange(rotary_dim, head_dim),
        ]
    )
    return weight.view(heads, head_dim, -1)[:, order].reshape(weight.shape)


def _copy_linears(out: dict, sd: dict, linears: dict[str, str]) -> None:
    """Our ``<name>_weight`` and ``<name>_bias`` for each of our names, from HF's
    ``<theirs>.weight`` and ``<theirs>.bias`` (same layout: no transpose)."""
    for ours, theirs in linears.items():
        out[f"{ours}_weight"] = sd[f"{theirs}.weight"]
        out[f"{ours}_bias"] = sd[f"{theirs}.bias"]


def _map_gpt2(sd, arch):
    out = {"embed": sd["transformer.wte.weight"], "pos_embed": sd["transformer.wpe.weight"]}
    for i in range(arch.num_layers):
        src, dst = f"transformer.h.{i}.", f"layers.{i}."
        for ours, theirs in (("attn_norm", "ln_1"), ("mlp_norm", "ln_2")):
            out[f"{dst}{ours}.weight"] = sd[f"{src}{theirs}.weight"]
            out[f"{dst}{ours}.bias"] = sd[f"{src}{theirs}.bias"]
        # GPT-2's Conv1D stores weights as [in, out].
        for ours, theirs in (
            ("attn.qkv", "attn.c_attn"),
            ("attn.out", "attn.c_proj"),
            ("mlp.in", "mlp.c_fc"),
            ("mlp.out", "mlp.c_proj"),
        ):
            out[f"{dst}{ours}_weight"] = sd[f"{src}{theirs}.weight"].t()
            out[f"{dst}{ours}_bias"] = sd[f"{src}{theirs}.bias"]
    out["final_norm.weight"], out["final_norm.bias"] = (
        sd["transformer.ln_f.weight"],
        sd["transformer.ln_f.bias"],
    )
    return out


def _map_gptj(sd, arch):
    heads, rotary = arch.num_heads, arch.rotary_dim or arch.dim_per_head
    out = {"embed": sd["transformer.wte.weight"], "lm_head": sd["lm_head.weight"]}
    head_bias = sd.get("lm_head.bias")
    if head_bias is not None and bool(head_bias.any()):
        raise InputError("GPT-J lm_head bias must be zero: the runner's head has no bias")
    for i in range(arch.num_layers):
        src, dst = f"transformer.h.{i}.", f"layers.{i}."
        out[f"{dst}attn_norm.weight"] = sd[f"{src}ln_1.weight"]
        out[f"{dst}attn_norm.bias"] = sd[f"{src}ln_1.bias"]
        q, k, v = (sd[f"{src}attn.{x}_proj.weight"] for x in "qkv")
        q, k = (_interleaved_to_half_rotary(w, heads, rotary) for w in (q, k))
        out[f"{dst}attn.qkv_weight"] = torch.cat([q, k, v])
        out[f"{dst}attn.out_weight"] = sd[f"{src}attn.out_proj.weight"]
        _copy_linears(
            out, sd, {f"{dst}mlp.in": f"{src}mlp.fc_in", f"{dst}mlp.out": f"{src}mlp.fc_out"}
        )
    out["final_norm.weight"], out["final_norm.bias"] = (
        sd["transformer.ln_f.weight"],
        sd["transformer.ln_f.bias"],
    )
    return out


def _map_fused_per_head(sd, arch, prefix, names):
    """GPT-NeoX and BLOOM: per-head fused QKV, LayerNorms with biases, dense MLP."""
    out = {}
    for i in range(arch.num_layers):
        src, dst = f"{prefix}{names['layers']}.{i}.", f"layers.{i}."
        for ours, theirs in (
            ("attn_norm", "input_layernorm"),
            ("mlp_norm", "post_attention_layernorm"),
        ):
            if f"{src}{theirs}.weight" in sd:
                out[f"{dst}{ours}.weight"] = sd[f"{src}{theirs}.weight"]
                out[f"{dst}{ours}.bias"] = sd[f"{src}{theirs}.bias"]
        attn = f"{src}{names['attn']}."
        out[f"{dst}attn.qkv_weight"] = _split_heads_qkv(
            sd[f"{attn}query_key_value.weight"], arch.num_heads
        )
        out[f"{dst}attn.qkv_bias"] = _split_heads_qkv(
            sd[f"{attn}query_key_value.bias"], arch.num_heads
        )
        _copy_linears(
            out,
            sd,
            {
                f"{dst}attn.out": f"{attn}dense",
                f"{dst}mlp.in": f"{src}mlp.dense_h_to_4h",
                f"{dst}mlp.out": f"{src}mlp.dense_4h_to_h",
            },
        )
    return out


def _map_gpt_neox(sd, arch):
    names = {"layers": "layers", "attn": "attention"}
    out = _map_fused_per_head(sd, arch, "gpt_neox.", names)
    out["embed"] = sd["gpt_neox.embed_in.weight"]
    out["lm_head"] = sd["lm_head.weight"] if "lm_head.weight" in sd else sd["embed_out.weight"]
    out["final_norm.weight"] = sd["gpt_neox.final_layer_norm.weight"]
    out["final_norm.bias"] = sd["gpt_neox.final_layer_norm.bias"]
    return out


def _map_bloom(sd, arch):
    out = _map_fused_per_head(sd, arch, "transformer.", {"layers": "h", "attn": "self_attention"})
    out["embed"] = sd["transformer.word_embeddings.weight"]
    for ours, theirs in (("embed_norm", "word_embeddings_layernorm"), ("final_norm", "ln_f")):
        out[f"{ours}.weight"] = sd[f"transformer.{theirs}.weight"]
        out[f"{ours}.bias"] = sd[f"transformer.{theirs}.bias"]
    return out


def _map_llama_like(sd, arch, with_mlp: bool = True):
    """Llama and its descendants: Mistral, Mixtral, Qwen2/3, Qwen3-MoE, Phi-3 (fused qkv and
    gate|up), Gemma 2/3 (sandwich norms); ``with_mlp`` False: the caller maps the MLPs."""
    out = {"embed": sd["model.embed_tokens.weight"], "final_norm.weight": sd["model.norm.weight"]}
    if "lm_head.weight" in sd and not arch.tie_embeddings:
        out["lm_head"] = sd["lm_head.weight"]
    gemma = arch.family in _GEMMA
    for i in range(arch.num_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        out[f"{dst}attn_norm.weight"] = sd[f"{src}input_layernorm.weight"]
        if gemma:
            for ours, theirs in (
                ("attn_post_norm", "post_attention_layernorm"),
                ("mlp_norm", "pre_feedforward_layernorm"),
                ("mlp_post_norm", "post_feedforward_layernorm"),
            ):
                out[f"{dst}{ours}.weight"] = sd[f"{src}{theirs}.weight"]
        else:
            out[f"{dst}mlp_norm.weight"] = sd[f"{src}post_attention_layernorm.weight"]
        attn = f"{src}self_attn."
        if f"{attn}qkv_proj.weight" in sd:  # Phi-3
            out[f"{dst}attn.qkv_weight"] = sd[f"{attn}qkv_proj.weight"]
        else:
            out[f"{dst}attn.qkv_weight"] = torch.cat([sd[f"{attn}{x}_proj.weight"] for x in "qkv"])
        if f"{attn}q_proj.bias" in sd:
            out[f"{dst}attn.qkv_bias"] = torch.cat([sd[f"{attn}{x}_proj.bias"] for x in "qkv"])
        if arch.qk_norm:
            out[f"{dst}attn.q_norm.weight"] = sd[f"{attn}q_norm.weight"]
            out[f"{dst}attn.k_norm.weight"] = sd[f"{attn}k_norm.weight"]
        out[f"{dst}attn.out_weight"] = sd[f"{attn}o_proj.weight"]
        if f"{attn}o_proj.bias" in sd:
            out[f"{dst}attn.out_bias"] = sd[f"{attn}o_proj.bias"]
        if not with_mlp:
            continue
        if arch.is_moe_layer(i):
            out.update(_map_mixtral_experts(sd, arch, src, dst))
            continue
        out.update(_map_dense_mlp(sd, f"{src}mlp.", f"{dst}mlp."))
    return out


def _map_dense_mlp(sd, src, dst):
    if f"{src}gate_up_proj.weight" in sd:  # Phi-3: already fused gate|up
        return {f"{dst}in_weight": sd[f"{src}gate_up_proj.weight"],
                f"{dst}out_weight": sd[f"{src}down_proj.weight"]}  # fmt: skip
    return {
        f"{dst}in_weight": torch.cat([sd[f"{src}gate_proj.weight"], sd[f"{src}up_proj.weight"]]),
        f"{dst}out_weight": sd[f"{src}down_proj.weight"],
    }


def _half_rotary_rows(weight: torch.Tensor, groups: int, rope: int) -> torch.Tensor:
    """Rows of each group's last ``rope`` outputs reordered from interleaved pairs to halves."""
    order = torch.cat([torch.arange(0, rope, 2), torch.arange(1, rope, 2)])
    view = weight.view(groups, -1, *weight.shape[1:])
    head = view.shape[1] - rope
    return torch.cat([view[:, :head], view[:, head:][:, order]], 1).reshape(weight.shape)


def _map_deepseek_v3(sd, arch, interleaved: bool = True):
    """MLA + DeepSeek MoE. DeepSeek's RoPE dims are interleaved pairs; permuting the q and key
    projection rows into our half-split layout leaves the attention scores unchanged (a
    checkpoint converted to half-split, ``rope_interleave: false``, is taken as it is)."""
    rows = _half_rotary_rows if interleaved else (lambda weight, groups, rope: weight)
    out = {"embed": sd["model.embed_tokens.weight"], "final_norm.weight": sd["model.norm.weight"]}
    if not arch.tie_embeddings:
        out["lm_head"] = sd["lm_head.weight"]
    rope, heads = arch.qk_rope_head_dim or 0, arch.num_heads
    for i in range(arch.num_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        out[f"{dst}attn_norm.weight"] = sd[f"{src}input_layernorm.weight"]
        out[f"{dst}mlp_norm.weight"] = sd[f"{src}post_attention_layernorm.weight"]
        attn, ours = f"{src}self_attn.", f"{dst}attn."
        if arch.q_lora_rank:
            out[f"{ours}q_down_weight"] = sd[f"{attn}q_a_proj.weight"]
            out[f"{ours}q_norm.weight"] = sd[f"{attn}q_a_layernorm.weight"]
            q_up = sd[f"{attn}q_b_proj.weight"]
        else:
            q_up = sd[f"{attn}q_proj.weight"]
        out[f"{ours}q_up_weight"] = rows(q_up, heads, rope)
        out[f"{ours}kv_down_weight"] = rows(sd[f"{attn}kv_a_proj_with_mqa.weight"], 1, rope)
        out[f"{ours}kv_norm.weight"] = sd[f"{attn}kv_a_layernorm.weight"]
        out[f"{ours}kv_up_weight"] = sd[f"{attn}kv_b_proj.weight"]
        out[f"{ours}out_weight"] = sd[f"{attn}o_proj.weight"]
        if not arch.is_moe_layer(i):
            out.update(_map_dense_mlp(sd, f"{src}mlp.", f"{dst}mlp."))
            continue
        out.update(_map_mixtral_experts(sd, arch, src, dst))
        out[f"{dst}mlp.selection_bias"] = sd[f"{src}mlp.gate.e_score_correction_bias"]
        out.update(_map_dense_mlp(sd, f"{src}mlp.shared_experts.", f"{dst}mlp.shared."))
    return out


def _map_gpt_oss(sd, arch):
    """gpt-oss: attention with biases and sinks; experts stored [in, out] with gate and up
    interleaved column by column."""
    out = _map_llama_like(sd, arch, with_mlp=False)
    for i in range(arch.num_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        out[f"{dst}attn.sinks"] = sd[f"{src}self_attn.sinks"]
        experts = f"{src}mlp.experts."
        gate_up = sd[f"{experts}gate_up_proj"].transpose(1, 2)  # [E, 2f, h], rows g0 u0 g1 ...
        gate_up_bias = sd[f"{experts}gate_up_proj_bias"]
        out[f"{dst}mlp.router"] = sd[f"{src}mlp.router.weight"]
        out[f"{dst}mlp.router_bias"] = sd[f"{src}mlp.router.bias"]
        out[f"{dst}mlp.in_weight"] = torch.cat([gate_up[:, 0::2], gate_up[:, 1::2]], 1)
        out[f"{dst}mlp.in_bias"] = torch.cat([gate_up_bias[:, 0::2], gate_up_bias[:, 1::2]], 1)
        out[f"{dst}mlp.out_weight"] = sd[f"{experts}down_proj"].transpose(1, 2)
        out[f"{dst}mlp.out_bias"] = sd[f"{experts}down_proj_bias"]
    return out


def _map_mixtral_experts(sd, arch, src, dst):
    if f"{src}mlp.experts.gate_up_proj" in sd:  # transformers 5: experts stored fused
        return {
            f"{dst}mlp.router": sd[f"{src}mlp.gate.weight"],
            f"{dst}mlp.in_weight": sd[f"{src}mlp.experts.gate_up_proj"],
            f"{dst}mlp.out_weight": sd[f"{src}mlp.experts.down_proj"],
        }
    moe = f"{src}block_sparse_moe."  # transformers 4: one module per expert (w1 gate, w3 up)
    experts = range(arch.num_experts)
    return {
        f"{dst}mlp.router": sd[f"{moe}gate.weight"],
        f"{dst}mlp.in_weight": torch.stack(
            [
                torch.cat([sd[f"{moe}experts.{e}.w1.weight"], sd[f"{moe}experts.{e}.w3.weight"]])
                for e in experts
            ]
        ),
        f"{dst}mlp.out_weight": torch.stack([sd[f"{moe}experts.{e}.w2.weight"] for e in experts]),
    }


def _map_opt(sd, arch):
    dec = "model.decoder."
    # OPT's learned positions are offset by 2 (rows 0 and 1 are never used).
    out = {
        "embed": sd[f"{dec}embed_tokens.weight"],
        "pos_embed": sd[f"{dec}embed_positions.weight"][2:],
    }
    out["final_norm.weight"] = sd[f"{dec}final_layer_norm.weight"]
    out["final_norm.bias"] = sd[f"{dec}final_layer_norm.bias"]
    if not arch.tie_embeddings:
        out["lm_head"] = sd["lm_head.weight"]
    for i in range(arch.num_layers):
        src, dst = f"{dec}layers.{i}.", f"layers.{i}."
        for ours, theirs in (
            ("attn_norm", "self_attn_layer_norm"),
            ("mlp_norm", "final_layer_norm"),
        ):
            out[f"{dst}{ours}.weight"] = sd[f"{src}{theirs}.weight"]
            out[f"{dst}{ours}.bias"] = sd[f"{src}{theirs}.bias"]
        attn = f"{src}self_attn."
        out[f"{dst}attn.qkv_weight"] = torch.cat([sd[f"{attn}{x}_proj.weight"] for x in "qkv"])
        out[f"{dst}attn.qkv_bias"] = torch.cat([sd[f"{attn}{x}_proj.bias"] for x in "qkv"])
        _copy_linears(
            out,
            sd,
            {
                f"{dst}attn.out": f"{attn}out_proj",
                f"{dst}mlp.in": f"{src}fc1",
                f"{dst}mlp.out": f"{src}fc2",
            },
        )
    return out


_MAPPERS: dict[str, Callable[[dict[str, torch.Tensor], Architecture], dict[str, torch.Tensor]]] = {
    "gpt2": _map_gpt2,
    "gptj": _map_gptj,
    "gpt_neox": _map_gpt_neox,
    "bloom": _map_bloom,
    "opt": _map_opt,
    **dict.fromkeys(_LLAMA_LIKE + _GEMMA, _map_llama_like),
    "deepseek_v3": _map_deepseek_v3,
    "gpt_oss": _map_gpt_oss,
}


@torch.no_grad()
def load_hf_state_dict(
    model: Transformer,
    hf_state_dict: dict[str, torch.Tensor],
    family: str,
    *,
    rope_interleave: bool = True,
) -> None:
    """Copy the weights of an HF ``*ForCausalLM`` state dict into ``model`` (this rank's shard
    of each). Biases our layout has but the HF model lacks (GPT-J's attention output) are zero.
    ``rope_interleave``: the HF config's flag of that name (DeepSeek-V3 only)."""
    if family not in _MAPPERS:
        raise InputError(f"unsupported family {family!r}; supported: {', '.join(_MAPPERS)}")
    arch = model.arch.model_copy(update={"num_layers": model.num_layers})
    try:
        extra = {"interleaved": rope_interleave} if family == "deepseek_v3" else {}
        full = _MAPPERS[family](hf_state_dict, arch, **extra)
    except KeyError as error:
        raise InputError(f"{family} state dict lacks {error.args[0]!r}") from None
    # DeepSeek's expert selection bias is a buffer (as in HF), but it is loaded like a weight.
    buffers = [(n, b) for n, b in model.named_buffers() if n.endswith("selection_bias")]
    for name, buffer in buffers:
        if name in full:
            buffer.copy_(full[name].to(buffer.device, buffer.dtype))
    for name, param in model.named_parameters():
        tensor = full.get(name)
        if tensor is None:
            if name.endswith("bias"):
                param.zero_()
                continue
            raise InputError(f"{family} state dict gives no weights for {name!r}")
        tensor = tensor.to(device=param.device, dtype=param.dtype)
        if name in ("embed", "lm_head") and tensor.shape[0] < param.full_shape[0]:
            padding = param.full_shape[0] - tensor.shape[0]  # vocab padded for TP and alignment
            tensor = torch.cat([tensor, tensor.new_zeros(padding, tensor.shape[1])])
        if tuple(tensor.shape) != tuple(param.full_shape):
            raise InputError(
                f"{name}: HF weight has shape {tuple(tensor.shape)}, expected {param.full_shape}"
            )
        spec = param.shard_spec
        param.copy_(spec.shard(tensor, model.tp) if spec is not None else tensor)
