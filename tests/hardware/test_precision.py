"""Precision: parsing user strings, canonical labels, bytes per weight with scales, and the
checkpoint precision a config.json's quantization_config implies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.architectures import architecture_from_hf_config, checkpoint_precision
from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import BF16, Precision, parse_precision

LLAMA_CONFIG = {
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
    "hidden_act": "silu",
}


@pytest.mark.parametrize(
    ("text", "label", "bytes_per_weight"),
    [
        ("bf16", "bf16", 2.0),
        ("FP16", "fp16", 2.0),
        ("fp32", "fp32", 4.0),
        ("fp8", "fp8", 1.0),
        ("int8", "int8", 1.0),  # per-channel scales: negligible
        ("int8-g128", "int8-g128", 1 + 2 / 128),  # 16-bit scale per group
        ("int4", "int4-g128", 0.5 + 2.5 / 128),  # 16-bit scale + 4-bit zero per 128
        ("int4-g32", "int4-g32", 0.5 + 2.5 / 32),
        ("mxfp4", "mxfp4", 4.25 / 8),  # 8-bit shared exponent per 32
    ],
)
def test_weight_formats_parse_to_canonical_labels_and_bytes(
    text: str, label: str, bytes_per_weight: float
) -> None:
    precision = parse_precision(text)
    assert precision.weights == label
    assert precision.bytes_per_weight == pytest.approx(bytes_per_weight)
    assert parse_precision(precision.weights) == precision  # round trip


def test_defaults_follow_the_weights() -> None:
    assert parse_precision() == BF16
    assert parse_precision("fp8").activations == "fp8"  # W8A8 on fp8 tensor cores
    assert parse_precision("int4").activations == "bf16"  # weight-only, dequantized
    assert parse_precision("fp16") == Precision.from_dtype("float16")
    assert parse_precision("fp8", activations="bf16").activations == "bf16"  # weight-only fp8
    assert parse_precision(kv_cache="fp8").kv_bytes_per_element == 1
    assert parse_precision("int4", "int8").kv_bytes_per_element == 1
    checkpoint = Precision(weights="mxfp4", scope="experts")
    assert parse_precision(default=checkpoint) == checkpoint
    assert parse_precision(kv_cache="fp8", default=checkpoint).scope == "experts"
    assert parse_precision("bf16", default=checkpoint) == BF16  # explicit weights win
    # The checkpoint's own format named: its own layers (gpt-oss: the experts only).
    assert parse_precision("mxfp4", default=checkpoint).scope == "experts"
    assert parse_precision("MXFP4-g32", default=checkpoint).scope == "experts"
    assert parse_precision("mxfp4").scope == "linear"


def test_mxfp4_experts_take_mxfp8_activations_as_w4a8_kernels() -> None:
    from idealized_runtime.cost_model.hardware.engines.step import kernel_format

    checkpoint = get_architecture("gpt-oss-120b").precision
    w4a8 = parse_precision("mxfp4", "fp8", "fp8", default=checkpoint)
    assert (w4a8.activations, w4a8.scope) == ("fp8", "experts")
    assert kernel_format(w4a8, experts=True) == "mxfp4_mxfp8"
    assert kernel_format(w4a8) == "bf16"  # attention and router stay in 16 bits
    assert kernel_format(parse_precision("mxfp4", default=checkpoint), experts=True) == "mxfp4"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("int3",), "unknown weight format 'int3'"),
        (("int4-g7",), "power of two"),
        (("fp8-g128",), "takes no group size"),
        (("mxfp4-g16",), "groups are 32"),
        (("bf16", None, "fp8"), "fp8 activations: --weights fp8"),
        (("int4", None, "fp8"), "fp8 activations need fp8 or mxfp4 weights"),
        (("int4", None, "fp32"), "not fp32"),
        ((None, "int4"), "unknown KV-cache format 'int4'"),
        ((None, None, "int8"), "unknown activation format 'int8'"),
    ],
)
def test_bad_precisions_are_one_line_input_errors(args: tuple, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        parse_precision(*args)
    assert "\n" not in str(caught.value)


@given(st.sampled_from([8, 16, 32, 64, 128, 256, 512]), st.sampled_from(["int4", "int8"]))
def test_bigger_groups_store_fewer_bytes_but_more_than_the_bare_bits(group: int, fmt: str) -> None:
    small = parse_precision(f"{fmt}-g{group}").bytes_per_weight
    big = parse_precision(f"{fmt}-g{group * 2}").bytes_per_weight
    bare = 0.5 if fmt == "int4" else 1.0
    assert bare < big < small


def test_quantization_config_sets_the_checkpoint_precision() -> None:
    deepseek = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3"}
    assert checkpoint_precision({"quantization_config": deepseek}) == parse_precision("fp8")
    gpt_oss = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}
    mx = checkpoint_precision({"quantization_config": gpt_oss})
    assert mx is not None and (mx.weights, mx.scope) == ("mxfp4", "experts")
    assert mx.bytes_per_weight * 8 == pytest.approx(4.25)
    awq = {"quant_method": "awq", "bits": 4, "group_size": 64}
    assert checkpoint_precision({"quantization_config": awq}) == parse_precision("int4-g64")
    assert checkpoint_precision({}) is None
    arch = architecture_from_hf_config(
        {**LLAMA_CONFIG, "quantization_config": deepseek}, name="tiny-fp8"
    )
    assert arch.precision == parse_precision("fp8")
    assert architecture_from_hf_config(LLAMA_CONFIG, name="tiny").precision is None


def test_unknown_quantization_methods_are_refused_in_one_line() -> None:
    with pytest.raises(InputError, match=r"quant_method='bitsandbytes'.*supported: fp8, mxfp4"):
        checkpoint_precision({"quantization_config": {"quant_method": "bitsandbytes"}}, "c.json")
    with pytest.raises(InputError, match="bits=3"):
        checkpoint_precision({"quantization_config": {"quant_method": "gptq", "bits": 3}})


def test_a_part_left_out_follows_the_one_given() -> None:
    # A request body naming one part only: fp16 weights compute in fp16, fp16/fp8 activations
    # imply weights of that format; an explicit conflict is still refused.
    assert Precision(weights="fp16") == Precision(
        weights="fp16", activations="fp16", kv_cache="fp16"
    )
    assert Precision(activations="fp16").weights == "fp16"
    assert Precision(activations="fp8").weights == "fp8"
    assert Precision(weights="fp8").activations == "bf16"  # weight-only fp8 stays valid
    with pytest.raises(ValueError, match="bf16 weights compute in bf16"):
        Precision(weights="bf16", activations="fp16")
