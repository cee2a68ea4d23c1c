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

from local_runner.hf_config import architecture_from_hf_config, load_hf_state_dict  # noqa: E402
from local_runner.model import build_model  # noqa: E402

TOLERANCE = 1e-4
SMALL = dict(vocab_size=128)

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
    "llama": lambda: transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        **SMALL,
    ),
    "mistral": lambda: transformers.MistralConfig(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=64,
        **SMALL,
    ),
    "qwen2": lambda: transformers.Qwen2Config(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        **SMALL,
    ),
    "mixtral": lambda: transformers.MixtralConfig(
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        **SMALL,
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
