"""Routing and attention variants of DeepSeek-V3 and gpt-oss beyond the base tiny configs: the
runner's logits equal transformers' with and without KV cache."""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")

from tests.local_runner.hf_compare import assert_matches_transformers
from tests.local_runner.test_hf_equivalence import CONFIGS

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # Four experts per group: a group's score is the sum of its best two, not of all.
    "deepseek_groups_of_4": (
        "deepseek_v3",
        dict(n_routed_experts=16, n_group=4, topk_group=2, num_experts_per_tok=3),
    ),
    "deepseek_one_group_no_renormalisation": (
        "deepseek_v3",
        dict(
            n_routed_experts=16,
            n_group=4,
            topk_group=1,
            num_experts_per_tok=4,
            norm_topk_prob=False,
        ),
    ),
    "deepseek_8_groups_2_shared": (
        "deepseek_v3",
        dict(
            n_routed_experts=32, n_group=8, topk_group=3, num_experts_per_tok=5, n_shared_experts=2
        ),
    ),
    # A checkpoint converted to half-split RoPE dims: loaded without the permutation.
    "deepseek_rope_not_interleaved": ("deepseek_v3", dict(rope_interleave=False)),
    "gpt_oss_top4_of_8_window_3": (
        "gpt_oss",
        dict(num_local_experts=8, num_experts_per_tok=4, sliding_window=3),
    ),
    "gpt_oss_full_first_published_limit": (
        "gpt_oss",
        dict(layer_types=["full_attention", "sliding_attention"], swiglu_limit=7.0),
    ),
    "gpt_oss_top1_mqa": (
        "gpt_oss",
        dict(num_local_experts=4, num_experts_per_tok=1, num_key_value_heads=1),
    ),
}


@pytest.mark.parametrize("case", sorted(VARIANTS))
def test_variant_logits_match_transformers(case: str) -> None:
    base, changes = VARIANTS[case]
    config = CONFIGS[base]()
    for key, value in changes.items():
        setattr(config, key, value)
    arch, _, _ = assert_matches_transformers(config, name=case)
    assert arch.family == base
