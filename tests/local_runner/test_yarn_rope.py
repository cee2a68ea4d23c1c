"""YaRN RoPE (DeepSeek-V3's and gpt-oss's published configs use it): the runner's logits equal
transformers' with and without the KV cache, its frequencies equal transformers' own for any
setting, and the config loader reads both config styles and refuses what it cannot build."""

from __future__ import annotations

import math
import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from idealized_runtime.core.architectures import architecture_from_hf_config  # noqa: E402
from idealized_runtime.core.errors import InputError  # noqa: E402
from idealized_runtime.core.types import Architecture, RopeScaling  # noqa: E402
from idealized_runtime.local_runner.hf_config import load_hf_state_dict  # noqa: E402
from idealized_runtime.local_runner.model import build_model  # noqa: E402
from idealized_runtime.local_runner.rope import (  # noqa: E402
    yarn_attention_factor,
    yarn_inv_freq,
    yarn_softmax_scale,
)
from tests.local_runner.hf_compare import assert_matches_transformers  # noqa: E402
from tests.local_runner.test_hf_equivalence import CONFIGS, TOLERANCE  # noqa: E402
from tests.test_architectures import TINY  # noqa: E402

# The published configs' YaRN settings, with the tiny models' RoPE bases; an original context of
# 4096 puts the ramp inside the tiny rotary dimensions (8 for DeepSeek, 16 for gpt-oss).
DEEPSEEK_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 40.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
GPT_OSS_YARN = {
    "rope_type": "yarn",
    "rope_theta": 150000.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
}
CASES = {
    "deepseek_v3": ("deepseek_v3", DEEPSEEK_YARN),
    # mscale != mscale_all_dim: cos and sin scaled too, besides DeepSeek's softmax scale.
    "deepseek_v3_mscales": ("deepseek_v3", {**DEEPSEEK_YARN, "mscale": 0.707}),
    "deepseek_v2_lite_like": ("deepseek_v2_lite_like", DEEPSEEK_YARN),
    "gpt_oss": ("gpt_oss", GPT_OSS_YARN),
    "gpt_oss_truncated": ("gpt_oss", {**GPT_OSS_YARN, "truncate": True}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_yarn_logits_match_transformers_with_and_without_cache(case: str) -> None:
    base, rope = CASES[case]
    config = CONFIGS[base]()
    config.rope_parameters = dict(rope)
    arch, expected, hf = assert_matches_transformers(config, name=case)
    assert arch.rope_scaling is not None
    # The same weights without YaRN give other logits: the comparison would notice it missing.
    plain = build_model(arch.model_copy(update={"rope_scaling": None}))
    plain.setup_cache(max_batch_size=2, max_seq_len=32)
    load_hf_state_dict(plain, hf.state_dict(), arch.family)
    tokens = torch.randint(0, 128, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        unscaled = plain(tokens, torch.arange(20), 20)
    assert (unscaled - expected).abs().max().item() > 10 * TOLERANCE


@settings(max_examples=60, deadline=None)
@given(
    half_dim=st.integers(1, 64),
    theta=st.sampled_from([1e4, 5e5, 1.5e5, 1e6]),
    factor=st.floats(1.0, 64.0),
    original=st.sampled_from([256, 2048, 4096, 8192]),
    beta_fast=st.floats(4.0, 64.0),
    beta_slow=st.floats(0.5, 2.0),
    truncate=st.booleans(),
    mscale=st.sampled_from([None, 0.707, 1.0]),
    mscale_all_dim=st.sampled_from([None, 0.707, 1.0]),
)
def test_yarn_frequencies_equal_transformers(
    half_dim: int,
    theta: float,
    factor: float,
    original: int,
    beta_fast: float,
    beta_slow: float,
    truncate: bool,
    mscale: float | None,
    mscale_all_dim: float | None,
) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    dim = 2 * half_dim
    rope = {
        "rope_type": "yarn",
        "rope_theta": theta,
        "factor": factor,
        "original_max_position_embeddings": original,
        "beta_fast": beta_fast,
        "beta_slow": beta_slow,
        "truncate": truncate,
    }
    rope.update({k: v for k, v in (("mscale", mscale), ("mscale_all_dim", mscale_all_dim)) if v})
    config = transformers.LlamaConfig(
        hidden_size=dim, num_attention_heads=1, head_dim=dim, max_position_embeddings=original
    )
    config.rope_parameters = rope
    expected, expected_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    scaling = RopeScaling(
        factor=factor,
        original_max_context=original,
        beta_fast=beta_fast,
        beta_slow=beta_slow,
        truncate=truncate,
        mscale=mscale,
        mscale_all_dim=mscale_all_dim,
    )
    assert torch.allclose(yarn_inv_freq(dim, theta, scaling, "cpu"), expected, rtol=1e-6)
    assert math.isclose(yarn_attention_factor(scaling), expected_factor, rel_tol=1e-12)


def test_deepseek_v3_published_scales() -> None:
    """DeepSeek-V3's config (factor 40, mscale = mscale_all_dim = 1): cos and sin unscaled, the
    softmax scale times (1 + 0.1 ln 40) ** 2."""
    scaling = RopeScaling(factor=40, original_max_context=4096, mscale=1.0, mscale_all_dim=1.0)
    assert yarn_attention_factor(scaling) == 1.0
    assert math.isclose(yarn_softmax_scale(scaling), (1 + 0.1 * math.log(40)) ** 2)
    assert yarn_softmax_scale(None) == 1.0
    gpt_oss = RopeScaling(factor=32, original_max_context=4096, truncate=False)
    assert math.isclose(yarn_attention_factor(gpt_oss), 1 + 0.1 * math.log(32))


def test_loader_reads_hub_style_rope_scaling_and_transformers5_rope_parameters() -> None:
    """Hub config.json files carry ``rope_scaling`` ("type" in DeepSeek's); transformers 5
    writes ``rope_parameters`` ("rope_type"): both give the same Architecture."""
    hub = {k: v for k, v in DEEPSEEK_YARN.items() if k not in ("rope_type", "rope_theta")}
    old_style = architecture_from_hf_config(
        {**TINY["deepseek_v3"], "rope_scaling": {**hub, "type": "yarn"}}, name="d"
    )
    new_style = architecture_from_hf_config(
        {**TINY["deepseek_v3"], "rope_parameters": DEEPSEEK_YARN}, name="d"
    )
    assert old_style == new_style
    # Stored as JSON (catalog, database) and read back unchanged.
    assert Architecture(**old_style.model_dump(mode="json")) == old_style
    assert old_style.rope_scaling == RopeScaling(
        factor=40, original_max_context=4096, mscale=1.0, mscale_all_dim=1.0
    )
    oss = architecture_from_hf_config(
        {**TINY["gpt_oss"], "rope_scaling": {**GPT_OSS_YARN, "rope_theta": None}}, name="o"
    )
    assert oss.rope_scaling is not None and oss.rope_scaling.truncate is False
    plain = architecture_from_hf_config(
        {**TINY["gpt_oss"], "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},
        name="o",
    )
    assert plain.rope_scaling is None and plain.rope_theta == 1e4
    # Without a factor, YaRN extends the original context to max_position_embeddings.
    derived = architecture_from_hf_config(
        {
            **TINY["gpt_oss"],
            "max_position_embeddings": 8192,
            "rope_scaling": {**hub, "type": "yarn", "factor": None},
        },
        name="o",
    )
    assert derived.rope_scaling is not None and derived.rope_scaling.factor == 2.0


@pytest.mark.parametrize(
    ("rope_scaling", "message"),
    [
        ({"rope_type": "longrope", "factor": 4.0}, "unsupported rope_scaling type 'longrope'"),
        ({"rope_type": "yarn", "factor": 4.0}, "needs original_max_position_embeddings"),
        (
            {"rope_type": "yarn", "factor": -1.0, "original_max_position_embeddings": 64},
            "rope_scaling.factor: Input should be greater than 0",
        ),
        ("yarn", "unsupported rope_scaling='yarn'"),
    ],
)
def test_loader_refuses_rope_scaling_it_cannot_build(rope_scaling: object, message: str) -> None:
    for family in ("deepseek_v3", "gpt_oss"):
        with pytest.raises(InputError, match=message) as error:
            architecture_from_hf_config({**TINY[family], "rope_scaling": rope_scaling}, name="x")
        assert "\n" not in str(error.value)
