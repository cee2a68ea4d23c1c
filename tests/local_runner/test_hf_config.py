"""HF config.json mapping: catalog shapes are reproduced, unmappable configs are InputErrors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.errors import InputError
from local_runner.hf_config import architecture_from_hf_config, architecture_from_hf_file

LLAMA_31_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072, "hidden_act": "silu",
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
}  # fmt: skip


def test_llama_config_matches_catalog_shape() -> None:
    arch = architecture_from_hf_config(LLAMA_31_8B, name="x")
    catalog = get_architecture("llama-3.1-8b")
    assert arch.num_parameters() == catalog.num_parameters()
    assert arch.kv_cache_bytes_per_token() == catalog.kv_cache_bytes_per_token()


def test_gptj_config_maps_partial_rotary_and_shared_norm() -> None:
    arch = architecture_from_hf_config(
        {"model_type": "gptj", "n_embd": 4096, "n_layer": 28, "n_head": 16, "rotary_dim": 64,
         "vocab_size": 50400, "n_positions": 2048, "activation_function": "gelu_new"},
        name="gptj",
    )  # fmt: skip
    assert arch.rotary_dim == 64 and arch.parallel_attn_mlp and not arch.parallel_mlp_norm


def test_missing_key_names_file_and_key(tmp_path: Path) -> None:
    config = dict(LLAMA_31_8B)
    del config["num_hidden_layers"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config\.json: missing key 'num_hidden_layers'"):
        architecture_from_hf_file(path)


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"model_type": "t5"}, "unsupported model_type 't5'"),
        ({"hidden_act": "gelu"}, "unsupported hidden_act='gelu'"),
        ({"num_attention_heads": 30}, "cannot build an architecture"),
    ],
)
def test_unmappable_configs(update: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        architecture_from_hf_config({**LLAMA_31_8B, **update}, name="x", path="cfg.json")


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="not a readable JSON config"):
        architecture_from_hf_file(path)
    with pytest.raises(InputError, match="file not found"):
        architecture_from_hf_file(tmp_path / "missing.json")
