"""Hugging Face ``config.json`` -> ``Architecture``, and HF weights -> our model.

Supported ``model_type``s: gpt2, gptj, gpt_neox, llama, mistral, mixtral, qwen2, opt, bloom.
Anything we cannot represent faithfully is refused with an ``InputError`` naming the file and the
key, rather than silently profiling a different architecture. Loading weights does not need
``transformers``: it takes a plain state dict (the ``*ForCausalLM`` layout).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture
from local_runner.model import Transformer

SUPPORTED_FAMILIES = (
    "gpt2",
    "gptj",
    "gpt_neox",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "opt",
    "bloom",
)
_LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2")
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_new",
    "gelu_pytorch_tanh": "gelu_new",
    "gelu_fast": "gelu_new",
    "relu": "relu",
}


class _Config:
    """Typed reads from a config dict; a missing or unusable key is an InputError."""

    def __init__(self, raw: dict[str, Any], path: str) -> None:
        self.raw, self.path = raw, path

    def get(self, *keys: str, default: Any = None, required: bool = True) -> Any:
        for key in keys:
            if self.raw.get(key) is not None:
                return self.raw[key]
        if default is None and required:
            raise InputError(f"missing key {keys[0]!r}", path=self.path)
        return default

    def rope(self, key: str, default: Any) -> Any:
        """transformers 5 nests RoPE settings in ``rope_parameters``; 4.x keeps them on top."""
        nested = self.raw.get("rope_parameters") or {}
        return nested.get(key, self.raw.get(key, default))

    def unsupported(self, key: str, why: str) -> InputError:
        return InputError(f"unsupported {key}={self.raw.get(key)!r}: {why}", path=self.path)

    def activation(self, *keys: str) -> str:
        name = self.get(*keys)
        if name not in _ACTIVATIONS:
            raise self.unsupported(keys[0], f"known: {', '.join(_ACTIVATIONS)}")
        return _ACTIVATIONS[name]


def architecture_from_hf_config(config: dict[str, Any], *, name: str, path: str = "config.json"):
    """Map an HF config dict to an Architecture (``path`` only labels errors)."""
    c = _Config(config, path)
    family = config.get("model_type")
    if family not in SUPPORTED_FAMILIES:
        raise InputError(
            f"unsupported model_type {family!r}; supported: {', '.join(SUPPORTED_FAMILIES)}",
            path=path,
            column="model_type",
        )
    common: dict[str, Any] = {"name": name, "family": family, "source": f"HF config {path}"}
    if family == "gpt2":
        hidden = c.get("n_embd", "hidden_size")
        fields = dict(
            num_layers=c.get("n_layer", "num_hidden_layers"),
            hidden_size=hidden,
            num_heads=c.get("n_head", "num_attention_heads"),
            ffn_hidden_size=c.get("n_inner", default=4 * hidden, required=False),
            vocab_size=c.get("vocab_size"),
            max_context=c.get("n_positions", "max_position_embeddings"),
            activation=c.activation("activation_function"),
            norm_eps=c.get("layer_norm_epsilon", default=1e-5),
            position="learned",
            tie_embeddings=c.get("tie_word_embeddings", default=True),
        )
    elif family == "gptj":
        hidden = c.get("n_embd", "hidden_size")
        fields = dict(
            num_layers=c.get("n_layer", "num_hidden_layers"),
            hidden_size=hidden,
            num_heads=c.get("n_head", "num_attention_heads"),
            ffn_hidden_size=c.get("n_inner", default=4 * hidden, required=False),
            vocab_size=c.get("vocab_size"),
            max_context=c.get("n_positions", "max_position_embeddings"),
            activation=c.activation("activation_function"),
            norm_eps=c.get("layer_norm_epsilon", default=1e-5),
            position="rotary",
            rotary_dim=c.get("rotary_dim"),
            parallel_attn_mlp=True,
            qkv_bias=False,  # GPT-J's attention has no biases (see load_hf_state_dict)
            tie_embeddings=c.get("tie_word_embeddings", default=False),
        )
    elif family == "gpt_neox":
        hidden, heads = c.get("hidden_size"), c.get("num_attention_heads")
        fraction = c.rope("partial_rotary_factor", c.get("rotary_pct", default=1.0))
        parallel = c.get("use_parallel_residual", default=True)
        fields = dict(
            num_layers=c.get("num_hidden_layers"),
            hidden_size=hidden,
            num_heads=heads,
            ffn_hidden_size=c.get("intermediate_size"),
            vocab_size=c.get("vocab_size"),
            max_context=c.get("max_position_embeddings"),
            activation=c.activation("hidden_act"),
            norm_eps=c.get("layer_norm_eps", default=1e-5),
            position="rotary",
            rotary_dim=int(hidden // heads * fraction),
            rope_theta=c.rope("rope_theta", c.get("rotary_emb_base", default=10000.0)),
            parallel_attn_mlp=parallel,
            parallel_mlp_norm=parallel,
            bias=c.get("attention_bias", default=True),
            tie_embeddings=c.get("tie_word_embeddings", default=False),
        )
    elif family in _LLAMA_LIKE:
        if c.get("hidden_act") != "silu":
            raise c.unsupported("hidden_act", "llama-like models are built with SwiGLU (silu)")
        bias = bool(c.get("mlp_bias", default=False) or c.get("attention_bias", default=False))
        fields = dict(
            num_layers=c.get("num_hidden_layers"),
            hidden_size=c.get("hidden_size"),
            num_heads=c.get("num_attention_heads"),
            num_kv_heads=c.get("num_key_value_heads", "num_attention_heads"),
            head_dim=c.get("head_dim", required=False),
            ffn_hidden_size=c.get("intermediate_size"),
            vocab_size=c.get("vocab_size"),
            max_context=c.get("max_position_embeddings"),
            activation="swiglu",
            norm="rmsnorm",
            norm_eps=c.get("rms_norm_eps", default=1e-6),
            position="rotary",
            rope_theta=c.rope("rope_theta", 10000.0),
            bias=bias,
            qkv_bias=True if family == "qwen2" else None,
            tie_embeddings=c.get("tie_word_embeddings", default=False),
        )
        if family == "mixtral":
            fields["num_experts"] = c.get("num_local_experts")
            fields["experts_per_token"] = c.get("num_experts_per_tok")
    elif family == "opt":
        hidden = c.get("hidden_size")
        if not c.get("do_layer_norm_before", default=True):
            raise c.unsupported("do_layer_norm_before", "post-LN OPT (opt-350m) is not built")
        if c.get("word_embed_proj_dim", default=hidden) != hidden:
            raise c.unsupported("word_embed_proj_dim", "must equal hidden_size")
        fields = dict(
            num_layers=c.get("num_hidden_layers"),
            hidden_size=hidden,
            num_heads=c.get("num_attention_heads"),
            ffn_hidden_size=c.get("ffn_dim"),
            vocab_size=c.get("vocab_size"),
            max_context=c.get("max_position_embeddings"),
            activation=c.activation("activation_function"),
            position="learned",
            bias=c.get("enable_bias", default=True),
            tie_embeddings=c.get("tie_word_embeddings", default=True),
        )
    else:  # bloom
        hidden = c.get("hidden_size", "n_embed")
        fields = dict(
            num_layers=c.get("n_layer", "num_hidden_layers"),
            hidden_size=hidden,
            num_heads=c.get("n_head", "num_attention_heads"),
            ffn_hidden_size=4 * hidden,
            vocab_size=c.get("vocab_size"),
            max_context=c.get("seq_length", default=2048),
            activation="gelu_new",  # BLOOM's bloom_gelu is the tanh approximation
            norm_eps=c.get("layer_norm_epsilon", default=1e-5),
            position="alibi",
            embedding_norm=True,
            tie_embeddings=c.get("tie_word_embeddings", default=True),
        )
        if c.get("apply_residual_connection_post_layernorm", default=False):
            raise c.unsupported("apply_residual_connection_post_layernorm", "not built")
    try:
        return Architecture(**common, **fields)
    except ValueError as error:
        raise InputError(f"cannot build an architecture: {error}", path=path) from None


def architecture_from_hf_file(path: str | Path, *, name: str | None = None) -> Architecture:
    """Read an HF ``config.json`` (or a folder holding one)."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("file not found", path=str(file)) from None
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"not a readable JSON config: {error}", path=str(file)) from None
    if not isinstance(raw, dict):
        raise InputError("not a JSON object", path=str(file))
    default_name = raw.get("_name_or_path") or file.parent.name or file.stem
    return architecture_from_hf_config(raw, name=name or str(default_name), path=str(file))


def resolve_architecture(spec: str) -> Architecture:
    """A catalog name, or a path to an HF config.json (or its folder)."""
    if spec.endswith(".json") or Path(spec).is_dir() or "/" in spec:
        return architecture_from_hf_file(spec)
    return get_architecture(spec)


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
        out[f"{dst}mlp.in_weight"], out[f"{dst}mlp.in_bias"] = (
            sd[f"{src}mlp.fc_in.weight"],
            sd[f"{src}mlp.fc_in.bias"],
        )
        out[f"{dst}mlp.out_weight"], out[f"{dst}mlp.out_bias"] = (
            sd[f"{src}mlp.fc_out.weight"],
            sd[f"{src}mlp.fc_out.bias"],
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
        out[f"{dst}attn.out_weight"] = sd[f"{attn}dense.weight"]
        out[f"{dst}attn.out_bias"] = sd[f"{attn}dense.bias"]
        for ours, theirs in (("in", "dense_h_to_4h"), ("out", "dense_4h_to_h")):
            out[f"{dst}mlp.{ours}_weight"] = sd[f"{src}mlp.{theirs}.weight"]
            out[f"{dst}mlp.{ours}_bias"] = sd[f"{src}mlp.{theirs}.bias"]
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


def _map_llama_like(sd, arch):
    out = {"embed": sd["model.embed_tokens.weight"], "final_norm.weight": sd["model.norm.weight"]}
    if "lm_head.weight" in sd and not arch.tie_embeddings:
        out["lm_head"] = sd["lm_head.weight"]
    for i in range(arch.num_layers):
        src, dst = f"model.layers.{i}.", f"layers.{i}."
        out[f"{dst}attn_norm.weight"] = sd[f"{src}input_layernorm.weight"]
        out[f"{dst}mlp_norm.weight"] = sd[f"{src}post_attention_layernorm.weight"]
        attn = f"{src}self_attn."
        out[f"{dst}attn.qkv_weight"] = torch.cat([sd[f"{attn}{x}_proj.weight"] for x in "qkv"])
        if f"{attn}q_proj.bias" in sd:
            out[f"{dst}attn.qkv_bias"] = torch.cat([sd[f"{attn}{x}_proj.bias"] for x in "qkv"])
        out[f"{dst}attn.out_weight"] = sd[f"{attn}o_proj.weight"]
        if arch.num_experts > 1:
            out.update(_map_mixtral_experts(sd, arch, src, dst))
            continue
        mlp = f"{src}mlp."
        out[f"{dst}mlp.in_weight"] = torch.cat(
            [sd[f"{mlp}gate_proj.weight"], sd[f"{mlp}up_proj.weight"]]
        )
        out[f"{dst}mlp.out_weight"] = sd[f"{mlp}down_proj.weight"]
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
        out[f"{dst}attn.out_weight"] = sd[f"{attn}out_proj.weight"]
        out[f"{dst}attn.out_bias"] = sd[f"{attn}out_proj.bias"]
        for ours, theirs in (("in", "fc1"), ("out", "fc2")):
            out[f"{dst}mlp.{ours}_weight"] = sd[f"{src}{theirs}.weight"]
            out[f"{dst}mlp.{ours}_bias"] = sd[f"{src}{theirs}.bias"]
    return out


_MAPPERS: dict[str, Callable[[dict[str, torch.Tensor], Architecture], dict[str, torch.Tensor]]] = {
    "gpt2": _map_gpt2,
    "gptj": _map_gptj,
    "gpt_neox": _map_gpt_neox,
    "bloom": _map_bloom,
    "opt": _map_opt,
    **dict.fromkeys(_LLAMA_LIKE, _map_llama_like),
}


@torch.no_grad()
def load_hf_state_dict(
    model: Transformer, hf_state_dict: dict[str, torch.Tensor], family: str
) -> None:
    """Copy the weights of an HF ``*ForCausalLM`` state dict into ``model`` (this rank's shard
    of each). Biases our layout has but the HF model lacks (GPT-J's attention output) are zero."""
    if family not in _MAPPERS:
        raise InputError(f"unsupported family {family!r}; supported: {', '.join(_MAPPERS)}")
    arch = model.arch.model_copy(update={"num_layers": model.num_layers})
    try:
        full = _MAPPERS[family](hf_state_dict, arch)
    except KeyError as error:
        raise InputError(f"{family} state dict lacks {error.args[0]!r}") from None
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
