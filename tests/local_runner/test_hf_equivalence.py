"""Our model, loaded with the weights of an HF transformers model built from the same small
config, gives the same logits (fp32, max abs diff < 1e-4), for every supported family.

The HF model's weights, biases and norm scales are all randomised first, so that a mapping that
drops a bias or swaps q and k cannot pass by accident."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from idealized_runtime.core.architectures import architecture_from_hf_config  # noqa: E402
from idealized_runtime.local_runner.hf_config import load_hf_state_dict  # noqa: E402
from idealized_runtime.local_runner.model import build_model  # noqa: E402

TOLERANCE = 1e-4
SMALL = dict(vocab_size=128)
LLAMA_SHAPE = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
# DeepSeek's multi-head latent attention with a mixture of experts (V3's and V2-Lite's layouts).
MLA_SHAPE = dict(
    **{**LLAMA_SHAPE, "num_key_value_heads": 4},
    moe_intermediate_size=32,
    kv_lora_rank=32,
    qk_rope_head_dim=8,
    v_head_dim=16,
    qk_nope_head_dim=16,
    num_experts_per_tok=2,
)

CONFIGS = {
    "gpt2": lambda: transformers.GPT2Config(
        n_embd=64, n_layer=2, n_head=4, n_positions=64, **SMALL
    ),
    "gptj": lambda: transformers.GPTJConfig(
        n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64, **SMALL
    ),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        rotary_pct=0.25,
        **SMALL,
    ),
    "gpt_neox_sequential": lambda: transformers.GPTNeoXConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
        use_parallel_residual=False,
        **SMALL,
    ),
    "llama": lambda: transformers.LlamaConfig(**LLAMA_SHAPE, **SMALL),
    "mistral": lambda: transformers.MistralConfig(
        **{**LLAMA_SHAPE, "num_key_value_heads": 1}, **SMALL
    ),
    "qwen2": lambda: transformers.Qwen2Config(**LLAMA_SHAPE, tie_word_embeddings=True, **SMALL),
    "mixtral": lambda: transformers.MixtralConfig(
        **LLAMA_SHAPE, num_local_experts=4, num_experts_per_tok=2, **SMALL
    ),
    "opt": lambda: transformers.OPTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        ffn_dim=128,
        max_position_embeddings=64,
        word_embed_proj_dim=64,
        **SMALL,
    ),
    # 6 heads: exercises ALiBi slopes for a head count that is not a power of two.
    "bloom": lambda: transformers.BloomConfig(hidden_size=48, n_layer=2, n_head=6, **SMALL),
    # Sliding windows of 8 tokens (shorter than the 20-token test sequence): the runner's ring
    # caches, their masks, and prefill past the window are all exercised.
    "qwen3": lambda: transformers.Qwen3Config(**LLAMA_SHAPE, head_dim=32, **SMALL),
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(
        **LLAMA_SHAPE, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, **SMALL
    ),
    "qwen3_moe_renormalised": lambda: transformers.Qwen3MoeConfig(
        **LLAMA_SHAPE,
        moe_intermediate_size=32,
        num_experts=8,
        num_experts_per_tok=3,
        norm_topk_prob=True,
        **SMALL,
    ),
    "phi3": lambda: transformers.Phi3Config(
        **LLAMA_SHAPE,
        partial_rotary_factor=0.5,
        sliding_window=8,
        pad_token_id=None,
        **SMALL,
    ),
    "gemma2": lambda: transformers.Gemma2Config(
        **LLAMA_SHAPE,
        head_dim=32,
        query_pre_attn_scalar=24,
        sliding_window=8,
        attn_logit_softcapping=5.0,
        final_logit_softcapping=200.0,  # large enough not to saturate these logits
        **SMALL,
    ),
    "gemma3_text": lambda: transformers.Gemma3TextConfig(
        **{**LLAMA_SHAPE, "num_hidden_layers": 3},
        head_dim=32,
        query_pre_attn_scalar=24,
        sliding_window=8,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
        **SMALL,
    ),
    "deepseek_v3": lambda: transformers.DeepseekV3Config(
        **MLA_SHAPE,
        n_shared_experts=1,
        n_routed_experts=8,
        routed_scaling_factor=2.5,
        q_lora_rank=48,
        n_group=4,
        topk_group=2,
        first_k_dense_replace=1,
        **SMALL,
    ),
    "deepseek_v2_lite_like": lambda: transformers.DeepseekV3Config(
        **MLA_SHAPE,
        n_shared_experts=2,
        n_routed_experts=4,
        q_lora_rank=None,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=0,
        **SMALL,
    ),
    "gpt_oss": lambda: transformers.GptOssConfig(
        **{**LLAMA_SHAPE, "intermediate_size": 48},
        head_dim=16,
        sliding_window=8,
        num_local_experts=4,
        num_experts_per_tok=2,
        swiglu_limit=0.5,  # small enough that the clamps bite on these activations
        rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
        **SMALL,
    ),
}


def _hf_model(config):
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            # Large embeddings so that tied heads give logits of order 1, not 0.01.
            std = 1.0 if any(key in name for key in ("emb", "wte", "wpe")) else 0.05
            noise = torch.randn(param.shape, generator=generator) * std
            param.copy_(noise + 1.0 if "norm" in name and name.endswith("weight") else noise)
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek's routing bias
                buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.1)
        if config.model_type == "gptj":
            model.lm_head.bias.zero_()  # the runner's head has no bias (a vocab-sized vector)
    return model


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_logits_match_transformers(case: str) -> None:
    config = CONFIGS[case]()
    hf = _hf_model(config)
    arch = architecture_from_hf_config(config.to_dict(), name=case)
    model = build_model(arch)
    model.setup_cache(max_batch_size=2, max_seq_len=32)
    load_hf_state_dict(model, hf.state_dict(), arch.family)

    tokens = torch.randint(0, 128, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
        ours = model(tokens, torch.arange(20), 20)
        # Decode-style: the prompt's first 12 tokens, then the rest one at a time.
        model(tokens[:, :12], torch.arange(12), 12)
        stepped = [model(tokens[:, i : i + 1], torch.tensor([i]), i + 1) for i in range(12, 20)]
    assert (ours - expected).abs().max().item() < TOLERANCE
    assert (torch.cat(stepped, 1) - expected[:, 12:]).abs().max().item() < TOLERANCE
