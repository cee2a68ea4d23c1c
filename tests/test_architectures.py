"""load_architecture: catalog names, HF config.json files and folders, for every family; bad
configs are one-line InputErrors (exit 2 in the CLI), and nothing here imports torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idealized_runtime.core.architectures import (
    SUPPORTED_FAMILIES,
    architecture_from_hf_config,
    load_architecture,
)
from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.errors import InputError
from tests.servers import run_cli

LLAMA_31_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072, "hidden_act": "silu",
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
}  # fmt: skip
_LLAMA_TINY = {
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
    "max_position_embeddings": 64, "hidden_act": "silu",
}  # fmt: skip

# Tiny configs in the shape of the public config.json files (transformers 4.x key names).
TINY: dict[str, dict[str, Any]] = {
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64,
             "vocab_size": 128, "activation_function": "gelu_new"},
    "gptj": {"model_type": "gptj", "n_embd": 64, "n_layer": 2, "n_head": 4, "rotary_dim": 8,
             "n_positions": 64, "vocab_size": 128, "activation_function": "gelu_new"},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 64, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 128,
                 "max_position_embeddings": 64, "hidden_act": "gelu", "rotary_pct": 0.25},
    "llama": {"model_type": "llama", **_LLAMA_TINY},
    "mistral": {"model_type": "mistral", **_LLAMA_TINY, "sliding_window": 16},
    "mixtral": {"model_type": "mixtral", **_LLAMA_TINY, "num_local_experts": 4,
                "num_experts_per_tok": 2},
    "qwen2": {"model_type": "qwen2", **_LLAMA_TINY},
    "opt": {"model_type": "opt", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "ffn_dim": 128, "vocab_size": 128,
            "max_position_embeddings": 64, "activation_function": "relu"},
    "bloom": {"model_type": "bloom", "hidden_size": 48, "n_layer": 2, "n_head": 6,
              "vocab_size": 128},
    "qwen3": {"model_type": "qwen3", **_LLAMA_TINY, "head_dim": 32},
    "qwen3_moe": {"model_type": "qwen3_moe", **_LLAMA_TINY, "num_experts": 8,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "norm_topk_prob": True},
    "phi3": {"model_type": "phi3", **_LLAMA_TINY, "partial_rotary_factor": 0.75,
             "sliding_window": 2047},
    "gemma2": {"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 96,
               "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 32, "vocab_size": 128, "max_position_embeddings": 64,
               "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 24,
               "sliding_window": 8, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0},
    "gemma3_text": {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96,
                    "num_hidden_layers": 7, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 128,
                    "sliding_window": 8, "sliding_window_pattern": 3,
                    "rope_theta": 1e6, "rope_local_base_freq": 1e4},
    "gemma3": {"model_type": "gemma3", "vision_config": {"hidden_size": 16},
               "text_config": {"model_type": "gemma3_text", "hidden_size": 64,
                               "intermediate_size": 96, "num_hidden_layers": 6,
                               "num_attention_heads": 4, "num_key_value_heads": 2,
                               "head_dim": 32, "sliding_window": 8}},
    "deepseek_v3": {"model_type": "deepseek_v3", "hidden_size": 64, "intermediate_size": 96,
                    "moe_intermediate_size": 32, "num_hidden_layers": 3,
                    "num_attention_heads": 4, "num_key_value_heads": 4, "n_shared_experts": 1,
                    "n_routed_experts": 8, "routed_scaling_factor": 2.5, "kv_lora_rank": 32,
                    "q_lora_rank": 48, "qk_rope_head_dim": 8, "v_head_dim": 16,
                    "qk_nope_head_dim": 16, "n_group": 4, "topk_group": 2,
                    "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                    "norm_topk_prob": True, "hidden_act": "silu", "vocab_size": 128,
                    "max_position_embeddings": 64, "scoring_func": "sigmoid",
                    "topk_method": "noaux_tc"},
    "gpt_oss": {"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 48,
                "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                "head_dim": 16, "vocab_size": 128, "max_position_embeddings": 64,
                "sliding_window": 8, "num_local_experts": 4, "num_experts_per_tok": 2,
                "layer_types": ["sliding_attention", "full_attention"] * 2,
                "swiglu_limit": 7.0},
}  # fmt: skip


def test_every_supported_family_has_a_tiny_config() -> None:
    assert sorted(TINY) == sorted(SUPPORTED_FAMILIES)


@pytest.mark.parametrize("family", sorted(TINY))
def test_tiny_config_maps(family: str, tmp_path: Path) -> None:
    path = tmp_path / family / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TINY[family]))
    by_file, by_folder = load_architecture(str(path)), load_architecture(str(path.parent))
    assert by_file == by_folder
    assert by_file.family == ("gemma3_text" if family == "gemma3" else family)
    assert by_file.num_parameters() > by_file.num_parameters(active_only=True) - 1


def test_new_family_details() -> None:
    gptj = architecture_from_hf_config(TINY["gptj"], name="j")  # partial rotary, one shared norm
    assert gptj.rotary_dim == 8 and gptj.parallel_attn_mlp and not gptj.parallel_mlp_norm
    qwen3 = architecture_from_hf_config(TINY["qwen3"], name="q")
    assert qwen3.qk_norm and qwen3.dim_per_head == 32 and not qwen3.bias
    moe = architecture_from_hf_config(TINY["qwen3_moe"], name="m")
    assert (moe.num_experts, moe.experts_per_token, moe.expert_ffn_hidden_size) == (8, 2, 32)
    phi = architecture_from_hf_config(TINY["phi3"], name="p")
    assert phi.rotary_dim == 12 and phi.layer_pattern == ("sliding",)
    gemma2 = architecture_from_hf_config(TINY["gemma2"], name="g2")
    assert gemma2.layer_pattern == ("sliding", "full") and gemma2.attn_logit_softcap == 50.0
    assert gemma2.sandwich_norm and gemma2.norm_unit_offset and gemma2.scale_embeddings
    gemma3 = architecture_from_hf_config(TINY["gemma3_text"], name="g3")
    assert gemma3.layer_pattern == ("sliding", "sliding", "full") and gemma3.qk_norm
    assert (gemma3.rope_theta, gemma3.sliding_rope_theta) == (1e6, 1e4)
    wrapped = architecture_from_hf_config(TINY["gemma3"], name="g")
    assert wrapped.vocab_size == 262208 and wrapped.layer_pattern == ("sliding",) * 5 + ("full",)
    deepseek = architecture_from_hf_config(TINY["deepseek_v3"], name="d")
    assert deepseek.mla and deepseek.first_k_dense_layers == 1 and deepseek.n_group == 4
    assert not deepseek.is_moe_layer(0) and deepseek.is_moe_layer(1)
    oss = architecture_from_hf_config(TINY["gpt_oss"], name="o")
    assert oss.attention_sinks and oss.router_bias and oss.layer_pattern == ("sliding", "full")


def test_transformers5_nested_rope_parameters() -> None:
    config = {**TINY["gemma3_text"], "layer_types": ["sliding_attention"] * 6 + ["full_attention"]}
    config["rope_parameters"] = {
        "full_attention": {"rope_type": "default", "rope_theta": 5e5},
        "sliding_attention": {"rope_type": "default", "rope_theta": 2e4},
    }
    arch = architecture_from_hf_config(config, name="g")
    assert (arch.rope_theta, arch.sliding_rope_theta) == (5e5, 2e4)
    assert arch.layer_pattern == ("sliding",) * 6 + ("full",)


def test_kv_cache_of_mla_and_sliding_layers() -> None:
    deepseek = architecture_from_hf_config(TINY["deepseek_v3"], name="d")
    assert deepseek.kv_cache_bytes_per_token("float32") == 3 * (32 + 8) * 4
    oss = architecture_from_hf_config(TINY["gpt_oss"], name="o")  # 2 sliding (window 8) + 2 full
    per_layer = 2 * 2 * 16 * 2
    assert oss.kv_cache_bytes(100) == (2 * 8 + 2 * 100) * per_layer
    assert oss.kv_cache_bytes(5) == 4 * 5 * per_layer
    assert oss.kv_cache_bytes_per_token(context_tokens=100) == (2 * 8 + 2 * 100) * per_layer / 100


def test_llama_config_matches_catalog_shape(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_31_8B))
    arch, catalog = load_architecture(str(path)), get_architecture("llama-3.1-8b")
    assert arch.num_parameters() == catalog.num_parameters()
    assert arch.kv_cache_bytes_per_token() == catalog.kv_cache_bytes_per_token()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({**LLAMA_31_8B, "model_type": "t5"}, "unsupported model_type 't5'; supported: gpt2"),
        ({"hidden_size": 8}, "unsupported model_type None"),
        ({**LLAMA_31_8B, "hidden_act": "gelu"}, "unsupported hidden_act='gelu'"),
        ({**LLAMA_31_8B, "num_attention_heads": 30}, "cannot build an architecture"),
        ({k: v for k, v in TINY["deepseek_v3"].items() if k != "kv_lora_rank"}, "'kv_lora_rank'"),
        ({**TINY["deepseek_v3"], "n_group": 3}, "group-limited routing"),
        ({**TINY["deepseek_v3"], "scoring_func": "softmax"}, "scoring_func"),
        ({**TINY["gpt_oss"], "layer_types": ["full_attention"]}, "must list 4 layer types"),
        ({**TINY["gpt_oss"], "layer_types": ["chunked_attention"] * 4}, "layer_types"),
        ({**TINY["qwen3_moe"], "mlp_only_layers": [0]}, "mlp_only_layers"),
        ({"model_type": "gemma3"}, "missing key 'text_config'"),
    ],
)
def test_unmappable_configs(config: dict, message: str) -> None:
    with pytest.raises(InputError, match=message) as error:
        architecture_from_hf_config(config, name="x", path="cfg.json")
    assert "\n" not in str(error.value) and str(error.value).startswith("cfg.json")


def test_unknown_name_lists_catalog_and_families() -> None:
    with pytest.raises(InputError, match=r"unknown architecture 'nope'.*llama-3.1-8b.*gpt_oss"):
        load_architecture("nope")


def test_unreadable_files(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="not a readable JSON config"):
        load_architecture(str(path))
    with pytest.raises(InputError, match="file not found"):
        load_architecture(str(tmp_path / "missing.json"))
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match="not a JSON object"):
        load_architecture(str(path))


def test_loading_does_not_import_torch(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY["deepseek_v3"]))
    code = (
        "import sys; from idealized_runtime.core.architectures import load_architecture; "
        f"load_architecture({str(path)!r}); print('torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_estimate_takes_a_config_json_like_a_catalog_name(tmp_path: Path) -> None:
    path = tmp_path / "llama" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(LLAMA_31_8B))
    common = ("--hardware", "h100-sxm", "-p", "512", "-o", "64", "--json")
    by_file = run_cli("estimate", "--arch", str(path), *common)
    by_name = run_cli("estimate", "--arch", "llama-3.1-8b", *common)
    assert by_file.returncode == 0, by_file.stderr
    assert json.loads(by_file.stdout)["runtime_s"] == json.loads(by_name.stdout)["runtime_s"]


def test_estimate_bad_config_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_31_8B, "model_type": "mamba"}))
    result = run_cli(
        "estimate", "--arch", str(path), "--hardware", "h100-sxm", "-p", "8", "-o", "8"
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unsupported model_type 'mamba'" in lines[0]
    assert "deepseek_v3" in lines[0]


def test_bench_yaml_takes_a_config_json(tmp_path: Path) -> None:
    from idealized_runtime.bench.config import load_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY["gpt_oss"]))
    bench = tmp_path / "bench.yaml"
    bench.write_text(f"models:\n  - architecture: {path}\n    layers: 2\n", encoding="utf-8")
    assert load_config(bench).models[0].architecture == str(path)
    bench.write_text(f"models:\n  - architecture: {path}\n    layers: 9\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"layers must be in \[1, 4\]"):
        load_config(bench)
    path.write_text(json.dumps({**TINY["gpt_oss"], "model_type": "rwkv"}))
    with pytest.raises(InputError, match="unsupported model_type 'rwkv'") as error:
        load_config(bench)
    assert "\n" not in str(error.value)


@settings(max_examples=60, deadline=None)
@given(
    num_layers=st.integers(1, 40),
    first_dense=st.integers(0, 45),
    pattern=st.lists(st.sampled_from(["full", "sliding"]), min_size=1, max_size=7),
    window=st.integers(1, 64),
    tokens=st.integers(1, 200),
    experts=st.sampled_from([1, 4, 8]),
)
def test_closed_form_counts_equal_per_layer_sums(
    num_layers: int, first_dense: int, pattern: list[str], window: int, tokens: int, experts: int
) -> None:
    """num_parameters and kv_cache_bytes are closed forms (a request may name any depth); they
    equal the layer-by-layer sums."""
    arch = architecture_from_hf_config(TINY["deepseek_v3"], name="d").model_copy(
        update={
            "num_layers": num_layers,
            "first_k_dense_layers": first_dense,
            "layer_pattern": tuple(pattern),
            "sliding_window": window,
            "num_experts": experts,
            "n_group": 1,
            "topk_group": 1,
        }
    )
    for active in (False, True):
        by_layer = sum(arch.layer_parameters(active, i) for i in range(num_layers))
        ends = arch.num_parameters(active) - by_layer
        assert ends == 2 * arch.vocab_size * arch.hidden_size + arch.hidden_size
    per_layer = [
        min(tokens, window) if arch.attention_kind(i) == "sliding" else tokens
        for i in range(num_layers)
    ]
    values = arch.kv_cache_values_per_token() * 2
    assert arch.kv_cache_bytes(tokens) == sum(per_layer) * values
