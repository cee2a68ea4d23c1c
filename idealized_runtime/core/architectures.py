"""One way to name an architecture: a catalog name, a Hugging Face ``config.json``, or its folder.

``load_architecture(spec)`` is what every entry point (profile, estimate, bench, report) calls.
The config mapping covers the families the runner builds; anything it cannot represent
faithfully is refused with an ``InputError`` naming the file and the key, rather than silently
describing a different model. RoPE scaling (YaRN, Llama-3, linear) changes the rotary angles,
not the cost of a forward pass, so it is not represented. Pure Python: no torch import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from idealized_runtime.core.catalog import UnknownNameError, get_architecture
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture, Precision

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
    "qwen3",
    "qwen3_moe",
    "phi3",
    "gemma2",
    "gemma3_text",
    "gemma3",
    "deepseek_v3",
    "gpt_oss",
)
_LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "phi3")
_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_new",
    "gelu_pytorch_tanh": "gelu_new",
    "gelu_fast": "gelu_new",
    "relu": "relu",
}
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding"}
# Gemma 3 text defaults: the multimodal configs' text_config lists only what differs from them.
_GEMMA3_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262208,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-6,
    "hidden_activation": "gelu_pytorch_tanh",
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "rope_theta": 1_000_000.0,
    "rope_local_base_freq": 10_000.0,
    "tie_word_embeddings": True,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
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

    def rope(self, key: str, default: Any, layer_type: str = "full_attention") -> Any:
        """transformers 5 nests RoPE settings in ``rope_parameters`` (per layer type for
        Gemma 3); 4.x keeps them on top."""
        nested = self.raw.get("rope_parameters") or {}
        if isinstance(nested.get(layer_type), dict):
            nested = nested[layer_type]
        return nested.get(key, self.raw.get(key, default))

    def sizes(self, ffn_key: str = "intermediate_size") -> dict[str, Any]:
        """The model's sizes under transformers' usual keys, which most families share (OPT
        names its MLP width ``ffn_dim``)."""
        return dict(
            num_layers=self.get("num_hidden_layers"),
            hidden_size=self.get("hidden_size"),
            num_heads=self.get("num_attention_heads"),
            ffn_hidden_size=self.get(ffn_key),
            vocab_size=self.get("vocab_size"),
            max_context=self.get("max_position_embeddings"),
        )

    def unsupported(self, key: str, why: str) -> InputError:
        return InputError(f"unsupported {key}={self.raw.get(key)!r}: {why}", path=self.path)

    def activation(self, *keys: str) -> str:
        name = self.get(*keys)
        if name not in _ACTIVATIONS:
            raise self.unsupported(keys[0], f"known: {', '.join(_ACTIVATIONS)}")
        return _ACTIVATIONS[name]

    def layer_pattern(self, num_layers: int, fallback: tuple[str, ...]) -> tuple[str, ...]:
        """The shortest repeating cycle of ``layer_types`` (or ``fallback`` without them)."""
        types = self.raw.get("layer_types")
        if types is None:
            return fallback
        if not isinstance(types, list) or len(types) != num_layers:
            raise self.unsupported("layer_types", f"must list {num_layers} layer types")
        unknown = sorted({t for t in types if t not in _LAYER_TYPES})
        if unknown:
            raise self.unsupported("layer_types", f"known: {', '.join(_LAYER_TYPES)}")
        kinds = [_LAYER_TYPES[t] for t in types]
        for period in range(1, num_layers + 1):
            if all(kinds[i] == kinds[i % period] for i in range(num_layers)):
                return tuple(kinds[:period])
        return tuple(kinds)  # unreachable: period num_layers always matches


def _unsupported_family(family: Any, path: str) -> InputError:
    return InputError(
        f"unsupported model_type {family!r}; supported: {', '.join(SUPPORTED_FAMILIES)}",
        path=path,
        column="model_type",
    )


def _gpt2_keys(c: _Config) -> dict[str, Any]:
    """What GPT-2 and GPT-J configs name alike (``n_embd``, ``n_layer``, ``n_head``, ...)."""
    hidden = c.get("n_embd", "hidden_size")
    return dict(
        num_layers=c.get("n_layer", "num_hidden_layers"),
        hidden_size=hidden,
        num_heads=c.get("n_head", "num_attention_heads"),
        ffn_hidden_size=c.get("n_inner", default=4 * hidden, required=False),
        vocab_size=c.get("vocab_size"),
        max_context=c.get("n_positions", "max_position_embeddings"),
        activation=c.activation("activation_function"),
        norm_eps=c.get("layer_norm_epsilon", default=1e-5),
    )


def _gpt2(c: _Config) -> dict[str, Any]:
    return dict(
        **_gpt2_keys(c),
        position="learned",
        tie_embeddings=c.get("tie_word_embeddings", default=True),
    )


def _gptj(c: _Config) -> dict[str, Any]:
    return dict(
        **_gpt2_keys(c),
        position="rotary",
        rotary_dim=c.get("rotary_dim"),
        parallel_attn_mlp=True,
        qkv_bias=False,  # GPT-J's attention has no biases
        tie_embeddings=c.get("tie_word_embeddings", default=False),
    )


def _gpt_neox(c: _Config) -> dict[str, Any]:
    sizes = c.sizes()
    hidden, heads = sizes["hidden_size"], sizes["num_heads"]
    fraction = c.rope("partial_rotary_factor", c.get("rotary_pct", default=1.0))
    parallel = c.get("use_parallel_residual", default=True)
    return dict(
        **sizes,
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


def _swiglu_rmsnorm_rotary(c: _Config, *, norm_eps: float, rope_theta: float) -> dict[str, Any]:
    """The block llama's descendants share: a SwiGLU MLP, RMSNorm and rotary positions; the
    defaults of ``rms_norm_eps`` and ``rope_theta`` differ by family."""
    return dict(
        activation="swiglu",
        norm="rmsnorm",
        norm_eps=c.get("rms_norm_eps", default=norm_eps),
        position="rotary",
        rope_theta=c.rope("rope_theta", rope_theta),
    )


def _llama_like(c: _Config, family: str) -> dict[str, Any]:
    if c.get("hidden_act") != "silu":
        raise c.unsupported("hidden_act", "llama-like models are built with SwiGLU (silu)")
    bias = bool(c.get("mlp_bias", default=False) or c.get("attention_bias", default=False))
    sizes = c.sizes()
    hidden, heads = sizes["hidden_size"], sizes["num_heads"]
    head_dim = c.get("head_dim", required=False)
    fields: dict[str, Any] = dict(
        **sizes,
        num_kv_heads=c.get("num_key_value_heads", "num_attention_heads"),
        head_dim=head_dim,
        **_swiglu_rmsnorm_rotary(c, norm_eps=1e-6, rope_theta=10000.0),
        bias=bias,
        qkv_bias=True if family == "qwen2" else None,
        tie_embeddings=c.get("tie_word_embeddings", default=False),
    )
    fraction = c.rope("partial_rotary_factor", 1.0)
    if fraction != 1.0:  # Phi-4-mini rotates 3/4 of each head
        fields["rotary_dim"] = int((head_dim or hidden // heads) * fraction)
    if family in ("qwen3", "qwen3_moe"):
        fields["qk_norm"] = True
        if c.get("use_sliding_window", default=False):
            raise c.unsupported("use_sliding_window", "Qwen3 sliding-window layers are not built")
    elif family in ("mistral", "phi3") and c.get("sliding_window", required=False):
        # Mistral-7B-v0.1, Phi-3-mini: every layer attends within the window.
        fields["sliding_window"] = c.get("sliding_window")
        fields["layer_pattern"] = ("sliding",)
    if family == "mixtral":
        fields["num_experts"] = c.get("num_local_experts")
        fields["experts_per_token"] = c.get("num_experts_per_tok")
    elif family == "qwen3_moe":
        if c.get("mlp_only_layers", default=[]) or c.get("decoder_sparse_step", default=1) != 1:
            raise c.unsupported("mlp_only_layers", "every layer must be an MoE layer")
        fields["num_experts"] = c.get("num_experts", "num_local_experts")
        fields["experts_per_token"] = c.get("num_experts_per_tok")
        fields["moe_ffn_hidden_size"] = c.get("moe_intermediate_size")
        fields["norm_topk_prob"] = c.get("norm_topk_prob", default=False)
    return fields


def _gemma(c: _Config, family: str) -> dict[str, Any]:
    activation = c.get("hidden_activation", "hidden_act")
    if activation not in ("gelu_pytorch_tanh", "gelu"):
        raise c.unsupported("hidden_activation", "Gemma is built with gated GELU")
    sizes = c.sizes()
    num_layers = sizes["num_layers"]
    if family == "gemma2":  # older configs: even layers slide, odd layers are global
        fallback: tuple[str, ...] = ("sliding", "full")
        rope_theta = c.rope("rope_theta", 10000.0)
        sliding_theta = None
    else:
        period = c.get("sliding_window_pattern")
        fallback = ("sliding",) * (period - 1) + ("full",)
        rope_theta = c.rope("rope_theta", c.get("rope_theta"))
        nested = c.raw.get("rope_parameters") or {}
        if isinstance(nested.get("sliding_attention"), dict):  # transformers 5
            sliding_theta = nested["sliding_attention"].get("rope_theta")
        else:
            sliding_theta = c.get("rope_local_base_freq")
    return dict(
        **sizes,
        num_kv_heads=c.get("num_key_value_heads", "num_attention_heads"),
        head_dim=c.get("head_dim"),
        activation="geglu_tanh" if activation == "gelu_pytorch_tanh" else "geglu",
        norm="rmsnorm",
        norm_eps=c.get("rms_norm_eps", default=1e-6),
        position="rotary",
        rope_theta=rope_theta,
        sliding_rope_theta=sliding_theta,
        bias=bool(c.get("attention_bias", default=False)),
        tie_embeddings=c.get("tie_word_embeddings", default=True),
        qk_norm=family != "gemma2",
        sliding_window=c.get("sliding_window"),
        layer_pattern=c.layer_pattern(num_layers, fallback),
        query_pre_attn_scalar=c.get("query_pre_attn_scalar"),
        sandwich_norm=True,
        norm_unit_offset=True,
        scale_embeddings=True,
        attn_logit_softcap=c.get("attn_logit_softcapping", required=False),
        final_logit_softcap=c.get("final_logit_softcapping", required=False),
    )


def _yarn(c: _Config) -> dict[str, Any] | None:
    """The YaRN RoPE extension of DeepSeek-V3 and gpt-oss (transformers 5 ``rope_parameters``,
    4.x ``rope_scaling``); plain RoPE gives None, any other scaling is refused."""
    raw = c.raw.get("rope_scaling") or c.raw.get("rope_parameters") or {}
    if not isinstance(raw, dict):
        raise c.unsupported("rope_scaling", "expected an object")
    kind = raw.get("rope_type", raw.get("type", "default"))
    if kind == "default":
        return None
    if kind != "yarn":
        raise InputError(
            f"unsupported rope_scaling type {kind!r}: known: default, yarn", path=c.path
        )
    original = raw.get("original_max_position_embeddings")
    if not isinstance(original, int) or isinstance(original, bool) or original <= 0:
        raise InputError(
            "rope_scaling needs original_max_position_embeddings, a positive integer", path=c.path
        )
    factor = raw.get("factor") or c.get("max_position_embeddings") / original
    # Validated as Architecture.rope_scaling (a RopeScaling) when the architecture is built.
    return dict(
        factor=factor,
        original_max_context=original,
        beta_fast=raw.get("beta_fast") or 32.0,
        beta_slow=raw.get("beta_slow") or 1.0,
        mscale=raw.get("mscale"),
        mscale_all_dim=raw.get("mscale_all_dim"),
        attention_factor=raw.get("attention_factor"),
        truncate=raw.get("truncate", True),
    )


def _deepseek_v3(c: _Config) -> dict[str, Any]:
    if c.get("hidden_act", default="silu") != "silu":
        raise c.unsupported("hidden_act", "DeepSeek-V3 is built with SwiGLU (silu)")
    if c.get("attention_bias", default=False):
        raise c.unsupported("attention_bias", "MLA is built without biases")
    scoring = c.get("scoring_func", default="sigmoid")
    if scoring != "sigmoid":
        raise c.unsupported("scoring_func", "DeepSeek-V3 routing uses sigmoid scores")
    if c.get("topk_method", default="noaux_tc") != "noaux_tc":
        raise c.unsupported("topk_method", "only noaux_tc (group-limited) routing is built")
    return dict(
        **c.sizes(),
        **_swiglu_rmsnorm_rotary(c, norm_eps=1e-6, rope_theta=10000.0),
        rope_scaling=_yarn(c),
        bias=False,
        tie_embeddings=c.get("tie_word_embeddings", default=False),
        q_lora_rank=c.get("q_lora_rank", required=False),
        kv_lora_rank=c.get("kv_lora_rank"),
        qk_nope_head_dim=c.get("qk_nope_head_dim"),
        qk_rope_head_dim=c.get("qk_rope_head_dim"),
        v_head_dim=c.get("v_head_dim"),
        num_experts=c.get("n_routed_experts"),
        experts_per_token=c.get("num_experts_per_tok"),
        moe_ffn_hidden_size=c.get("moe_intermediate_size"),
        num_shared_experts=c.get("n_shared_experts", default=0),
        first_k_dense_layers=c.get("first_k_dense_replace", default=0),
        router_scoring="sigmoid",
        norm_topk_prob=c.get("norm_topk_prob", default=True),
        n_group=c.get("n_group", default=1),
        topk_group=c.get("topk_group", default=1),
        routed_scaling_factor=c.get("routed_scaling_factor", default=1.0),
    )


def _gpt_oss(c: _Config) -> dict[str, Any]:
    sizes = c.sizes()
    num_layers = sizes["num_layers"]
    return dict(
        **sizes,
        num_kv_heads=c.get("num_key_value_heads"),
        head_dim=c.get("head_dim"),
        **_swiglu_rmsnorm_rotary(c, norm_eps=1e-5, rope_theta=150000.0),
        rope_scaling=_yarn(c),
        bias=c.get("attention_bias", default=True),
        tie_embeddings=c.get("tie_word_embeddings", default=False),
        sliding_window=c.get("sliding_window"),
        layer_pattern=c.layer_pattern(num_layers, ("sliding", "full")),
        attention_sinks=True,
        num_experts=c.get("num_local_experts", "num_experts"),
        experts_per_token=c.get("num_experts_per_tok", "experts_per_token"),
        router_bias=True,
        swiglu_limit=c.get("swiglu_limit", default=7.0),
        swiglu_alpha=c.get("swiglu_alpha", default=1.702),
    )


def _opt(c: _Config) -> dict[str, Any]:
    sizes = c.sizes(ffn_key="ffn_dim")
    hidden = sizes["hidden_size"]
    if not c.get("do_layer_norm_before", default=True):
        raise c.unsupported("do_layer_norm_before", "post-LN OPT (opt-350m) is not built")
    if c.get("word_embed_proj_dim", default=hidden) != hidden:
        raise c.unsupported("word_embed_proj_dim", "must equal hidden_size")
    return dict(
        **sizes,
        activation=c.activation("activation_function"),
        position="learned",
        bias=c.get("enable_bias", default=True),
        tie_embeddings=c.get("tie_word_embeddings", default=True),
    )


def _bloom(c: _Config) -> dict[str, Any]:
    hidden = c.get("hidden_size", "n_embed")
    if c.get("apply_residual_connection_post_layernorm", default=False):
        raise c.unsupported("apply_residual_connection_post_layernorm", "not built")
    return dict(
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


def architecture_from_hf_config(
    config: dict[str, Any], *, name: str, path: str = "config.json"
) -> Architecture:
    """Map an HF config dict to an Architecture (``path`` only labels errors)."""
    family = config.get("model_type")
    if family == "gemma3":  # multimodal wrapper: the language model is its text_config
        text = config.get("text_config")
        if not isinstance(text, dict):
            raise InputError("missing key 'text_config'", path=path)
        config, family = {**text, "model_type": "gemma3_text"}, "gemma3_text"
    if family not in SUPPORTED_FAMILIES:
        raise _unsupported_family(family, path)
    if family == "gemma3_text":
        config = {**_GEMMA3_DEFAULTS, **config}
    c = _Config(config, path)
    if family in _LLAMA_LIKE:
        fields = _llama_like(c, family)
    elif family in ("gemma2", "gemma3_text"):
        fields = _gemma(c, family)
    else:
        mappers = {
            "gpt2": _gpt2,
            "gptj": _gptj,
            "gpt_neox": _gpt_neox,
            "opt": _opt,
            "bloom": _bloom,
            "deepseek_v3": _deepseek_v3,
            "gpt_oss": _gpt_oss,
        }
        fields = mappers[family](c)
    fields["precision"] = checkpoint_precision(config, path)
    try:
        return Architecture(name=name, family=family, source=f"HF config {path}", **fields)
    except ValidationError as error:
        detail = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in error.errors()
        )
        raise InputError(f"cannot build an architecture: {detail}", path=path) from None


QUANTIZATION_METHODS = ("fp8", "mxfp4", "awq", "gptq")


def checkpoint_precision(config: dict[str, Any], path: str = "config.json") -> Precision | None:
    """The precision a checkpoint ships in, from its ``quantization_config`` (None: none).

    fp8 (DeepSeek-V3's block-scaled e4m3) computes in fp8 when activations are quantized too
    (``activation_scheme``); mxfp4 (gpt-oss) covers the MoE experts only; AWQ and GPTQ are
    weight-only int4/int8 in groups of ``group_size``."""
    quant = config.get("quantization_config")
    if quant is None:
        return None
    if not isinstance(quant, dict):
        raise InputError("quantization_config is not a JSON object", path=path)
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8":
        scheme = quant.get("activation_scheme")
        return Precision(weights="fp8", activations="fp8" if scheme else "bf16")
    if method == "mxfp4":
        return Precision(weights="mxfp4", scope="experts")
    if method in ("awq", "gptq"):
        bits, group = quant.get("bits", quant.get("w_bit")), quant.get("group_size")
        group = group or quant.get("q_group_size")
        if bits not in (4, 8):
            raise InputError(
                f"unsupported quantization_config bits={bits!r}: use 4 or 8", path=path
            )
        label = f"int{bits}" + (f"-g{group}" if isinstance(group, int) and group > 0 else "")
        try:
            return Precision(weights=label)
        except ValidationError as error:
            detail = error.errors()[0]["msg"].removeprefix("Value error, ")
            raise InputError(f"quantization_config: {detail}", path=path) from None
    raise InputError(
        f"unsupported quantization_config quant_method={method or None!r}; supported: "
        f"{', '.join(QUANTIZATION_METHODS)}",
        path=path,
    )


def architecture_from_hf_file(path: str | Path, *, name: str | None = None) -> Architecture:
    """Read an HF ``config.json`` (or a folder holding one)."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("file not found", path=str(file)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"not a readable JSON config: {error}", path=str(file)) from None
    if not isinstance(raw, dict):
        raise InputError("not a JSON object", path=str(file))
    folder_name = file.parent.resolve().name if file.name == "config.json" else ""
    default_name = raw.get("_name_or_path") or folder_name or file.stem
    return architecture_from_hf_config(raw, name=name or str(default_name), path=str(file))


def looks_like_path(spec: str) -> bool:
    return spec.endswith(".json") or "/" in spec or "\\" in spec or Path(spec).is_dir()


def load_architecture(spec: str) -> Architecture:
    """The architecture ``spec`` names: a catalog name, a path to an HF config.json, or a
    folder holding one. Unknown names and unusable configs are InputErrors."""
    if looks_like_path(spec):
        return architecture_from_hf_file(spec)
    try:
        return get_architecture(spec)
    except UnknownNameError as error:
        raise InputError(
            f"{error} (or give a path to an HF config.json of a supported family: "
            f"{', '.join(SUPPORTED_FAMILIES)})"
        ) from None
