"""Architecture.num_parameters() (used by the hardware model and reports) counts exactly the
weights the runner builds, for every structural variant."""

from __future__ import annotations

from typing import Any

import pytest

from idealized_runtime.core.types import Architecture
from local_runner.model import build_model

BASE: dict[str, Any] = dict(
    num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=128, vocab_size=256, max_context=128
)
VARIANTS: dict[str, dict[str, Any]] = {
    "gpt2": dict(activation="gelu_new", position="learned", tie_embeddings=True),
    "llama-gqa": dict(
        activation="swiglu", norm="rmsnorm", position="rotary", bias=False, num_kv_heads=2
    ),
    "neox-parallel-two-norms": dict(
        position="rotary", rotary_dim=8, parallel_attn_mlp=True, parallel_mlp_norm=True
    ),
    "gptj-parallel-shared-norm": dict(
        activation="gelu_new",
        position="rotary",
        rotary_dim=8,
        parallel_attn_mlp=True,
        qkv_bias=False,
    ),
    "bloom-alibi-embedding-norm": dict(position="alibi", embedding_norm=True, tie_embeddings=True),
    "mixtral-moe": dict(
        activation="swiglu",
        norm="rmsnorm",
        position="rotary",
        bias=False,
        num_kv_heads=2,
        num_experts=4,
        experts_per_token=2,
    ),
    "qwen-qkv-bias": dict(
        activation="swiglu",
        norm="rmsnorm",
        position="rotary",
        bias=False,
        qkv_bias=True,
        num_kv_heads=2,
    ),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_num_parameters_equals_the_built_model(variant: str) -> None:
    arch = Architecture(name=variant, **BASE, **VARIANTS[variant])
    model = build_model(arch)
    assert arch.num_parameters() == sum(p.numel() for p in model.parameters())
