"""Architecture.num_parameters() and kv_cache_bytes() (used by the hardware model and reports)
count exactly the weights and cache tensors the runner builds, for every structural variant and
every supported family."""

from __future__ import annotations

from typing import Any

import pytest

from idealized_runtime.core.architectures import architecture_from_hf_config
from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.model import build_model
from tests.test_architectures import TINY

BASE: dict[str, Any] = dict(
    num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=128, vocab_size=256, max_context=128
)
# Llama's block: SwiGLU, RMSNorm, rotary positions, no biases, grouped-query attention.
LLAMA_GQA: dict[str, Any] = dict(
    activation="swiglu", norm="rmsnorm", position="rotary", bias=False, num_kv_heads=2
)
VARIANTS: dict[str, dict[str, Any]] = {
    "gpt2": dict(activation="gelu_new", position="learned", tie_embeddings=True),
    "llama-gqa": LLAMA_GQA,
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
    "mixtral-moe": dict(**LLAMA_GQA, num_experts=4, experts_per_token=2),
    "qwen-qkv-bias": dict(**LLAMA_GQA, qkv_bias=True),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_num_parameters_equals_the_built_model(variant: str) -> None:
    arch = Architecture(name=variant, **BASE, **VARIANTS[variant])
    model = build_model(arch)
    assert arch.num_parameters() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("family", sorted(TINY))
def test_every_family_counts_its_weights_exactly(family: str) -> None:
    arch = architecture_from_hf_config(TINY[family], name=family)
    model = build_model(arch)
    assert arch.num_parameters() == sum(p.numel() for p in model.parameters())
    active = arch.num_parameters(active_only=True)
    assert active <= arch.num_parameters() and (active < arch.num_parameters()) == (
        arch.num_experts > 1
    )


# 6 tokens fit in every tiny window (8); 40 do not, so sliding layers keep just the window.
@pytest.mark.parametrize("max_seq_len", [6, 40])
@pytest.mark.parametrize("family", sorted(TINY))
def test_kv_cache_bytes_equal_the_runners_cache_tensors(family: str, max_seq_len: int) -> None:
    arch = architecture_from_hf_config(TINY[family], name=family)
    if arch.position == "learned":
        arch = arch.model_copy(update={"max_context": 64})
    for dtype in ("float32", "bfloat16"):
        model = build_model(arch, dtype=dtype)
        model.setup_cache(max_batch_size=3, max_seq_len=max_seq_len)
        assert model.kv_cache_bytes() == 3 * arch.kv_cache_bytes(max_seq_len, dtype)
    if max_seq_len <= (arch.sliding_window or max_seq_len):
        per_token = arch.kv_cache_bytes_per_token("bfloat16")
        assert model.kv_cache_bytes() == 3 * max_seq_len * per_token
