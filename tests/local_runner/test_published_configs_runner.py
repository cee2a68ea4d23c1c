"""DeepSeek-V3's and gpt-oss-20b's published config.json files, as downloaded (hub style: 4.x
``rope_scaling``, quantization_config, fields the runner ignores such as DeepSeek's MTP layer),
load with their YaRN settings; shrunk to tiny widths with every other field kept, the runner's
logits equal transformers' own model built from the same dict, with and without KV cache."""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from idealized_runtime.core.architectures import architecture_from_hf_config  # noqa: E402
from idealized_runtime.core.types import RopeScaling  # noqa: E402
from tests.local_runner.hf_compare import assert_matches_transformers  # noqa: E402

# https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (auto_map left out)
DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "initializer_range": 0.02,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.33.1",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 129280,
}
# https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json
GPT_OSS_20B: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "attention_dropout": 0.0,
    "eos_token_id": 200002,
    "experts_per_token": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2880,
    "initial_context_length": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072,
    "model_type": "gpt_oss",
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "output_router_logits": False,
    "pad_token_id": 199999,
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "factor": 32.0,
        "original_max_position_embeddings": 4096,
        "rope_type": "yarn",
        "truncate": False,
    },
    "rope_theta": 150000,
    "router_aux_loss_coef": 0.9,
    "sliding_window": 128,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "transformers_version": "4.55.0.dev0",
    "use_cache": True,
    "vocab_size": 201088,
}

# Tiny widths; routing (groups, top-k, scaling), YaRN, biases and the layer schedule are kept.
SHRINK = {
    "deepseek_v3": (
        DEEPSEEK_V3,
        {
            "hidden_size": 64,
            "intermediate_size": 96,
            "moe_intermediate_size": 32,
            "num_hidden_layers": 3,
            "first_k_dense_replace": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "n_routed_experts": 16,
            "num_experts_per_tok": 4,
            "kv_lora_rank": 32,
            "q_lora_rank": 48,
            "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8,
            "v_head_dim": 16,
            "vocab_size": 128,
        },
    ),
    "gpt_oss": (
        GPT_OSS_20B,
        {
            "hidden_size": 64,
            "intermediate_size": 48,
            "head_dim": 16,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": 4,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "experts_per_token": 2,
            "sliding_window": 8,
            "vocab_size": 128,
            "pad_token_id": None,
            "eos_token_id": None,
        },
    ),
}


def test_published_configs_load_with_their_yarn_settings() -> None:
    deepseek = architecture_from_hf_config(DEEPSEEK_V3, name="deepseek-v3")
    assert deepseek.rope_scaling == RopeScaling(
        factor=40, original_max_context=4096, mscale=1.0, mscale_all_dim=1.0
    )
    # MLA caches the 512-wide latent and the 64-wide RoPE key per layer: 70,272 bytes in bf16.
    assert deepseek.kv_cache_bytes_per_token("bfloat16") == 61 * (512 + 64) * 2
    oss = architecture_from_hf_config(GPT_OSS_20B, name="gpt-oss-20b")
    assert oss.rope_scaling == RopeScaling(factor=32, original_max_context=4096, truncate=False)
    assert oss.layer_pattern == ("sliding", "full") and oss.sliding_window == 128


@pytest.mark.parametrize("family", sorted(SHRINK))
def test_shrunk_published_config_logits_match_transformers(family: str) -> None:
    published, widths = SHRINK[family]
    raw = {**published, **widths}
    # transformers would quantize (fp8, mxfp4) or cast (bf16): compare in fp32.
    hf_kwargs = {
        k: v
        for k, v in raw.items()
        if k not in ("quantization_config", "model_type", "torch_dtype")
    }
    config = transformers.AutoConfig.for_model(family, **hf_kwargs)
    assert config.rope_parameters["rope_type"] == "yarn"
    arch, _, _ = assert_matches_transformers(config, raw=raw, name=family)
    assert arch.rope_scaling is not None
