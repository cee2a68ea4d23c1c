"""Quantized weights and KV caches: close to the dense model, fewer bytes, exact byte counts."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from idealized_runtime.core.architectures import architecture_from_hf_config
from idealized_runtime.core.catalog import get_architecture
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Precision, parse_precision
from idealized_runtime.cost_model.hardware.counts import kv_cache_bytes
from idealized_runtime.local_runner.generate import Generator
from idealized_runtime.local_runner.quantize import (
    INT4_GROUPS,
    Int4Weight,
    Int8Weight,
    QuantizedWeight,
    kv_cache_bytes_per_token,
    parse_kv_format,
    parse_weight_format,
    weight_bytes,
)
from tests.servers import run_cli
from tests.test_architectures import TINY

# Relative L2 error of the logits against the bf16 model, random weights (N(0, 0.02)): int8 keeps
# ~1%, fp8 (3 mantissa bits) ~3.5%, int4 in groups of 32 ~10%. The bounds leave 2x headroom.
LOGIT_TOLERANCE = {"int8": 0.02, "fp8": 0.07, "int4-g32": 0.2}
KV_TOLERANCE = {"fp8": 0.05, "int8": 0.03}

DENSE = get_architecture("tiny-llama").model_copy(
    update={"name": "q-dense", "ffn_hidden_size": 192}
)
MOE = DENSE.model_copy(update={"name": "q-moe", "num_experts": 4, "experts_per_token": 2})


def _logits(arch, **precision) -> tuple[Generator, torch.Tensor]:
    generator = Generator(arch, dtype="bfloat16", max_batch_size=2, max_seq_len=32, **precision)
    tokens = torch.randint(0, arch.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    return generator, generator.logits(tokens).float()


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("arch", [DENSE, MOE], ids=["dense", "moe"])
@pytest.mark.parametrize("weights", sorted(LOGIT_TOLERANCE))
def test_quantized_logits_close_to_bf16_with_fewer_weight_bytes(arch, weights):
    dense, reference = _logits(arch)
    quantized, logits = _logits(arch, weights=weights)
    assert _relative_error(logits, reference) < LOGIT_TOLERANCE[weights]
    assert weight_bytes(quantized.model) < weight_bytes(dense.model)


@pytest.mark.parametrize("kv_cache", sorted(KV_TOLERANCE))
def test_quantized_kv_cache_close_and_smaller(kv_cache):
    dense, reference = _logits(DENSE)
    quantized, logits = _logits(DENSE, kv_cache=kv_cache)
    assert _relative_error(logits, reference) < KV_TOLERANCE[kv_cache]
    elements = DENSE.kv_cache_bytes_per_token("bfloat16") // 2  # keys + values, all layers
    assert kv_cache_bytes_per_token(dense.model) == DENSE.kv_cache_bytes_per_token("bfloat16")
    if kv_cache == "fp8":
        assert kv_cache_bytes_per_token(quantized.model) == elements
    else:  # one byte per element plus a bf16 scale per token, head, keys and values
        scales = 2 * DENSE.num_layers * DENSE.kv_heads * 2
        assert kv_cache_bytes_per_token(quantized.model) == elements + scales


def test_weight_bytes_are_the_packed_data_plus_scales():
    dense_gen, _ = _logits(DENSE)
    int8_gen, _ = _logits(DENSE, weights="int8")
    int4_gen, _ = _logits(DENSE, weights="int4-g32")
    matrices = [p for n, p in dense_gen.model.named_parameters() if n.endswith("_weight")]
    elements = sum(p.numel() for p in matrices)
    rows = sum(p.shape[0] for p in matrices)
    other = weight_bytes(dense_gen.model) - 2 * elements  # embeddings, head, norms stay bf16
    assert weight_bytes(int8_gen.model) == other + elements + 2 * rows  # + a bf16 scale per row
    groups = elements // 32
    assert weight_bytes(int4_gen.model) == other + elements // 2 + groups * 2 * 2  # scale, zero


def test_decode_with_quantized_weights_matches_recomputation():
    generator = Generator(DENSE, dtype="bfloat16", max_seq_len=32, weights="int8", kv_cache="fp8")
    prompt = torch.randint(0, DENSE.vocab_size, (1, 6), generator=torch.Generator().manual_seed(2))
    out = generator.generate(prompt, 4)
    assert out.shape == (1, 4)
    assert all(0 <= int(t) < DENSE.vocab_size for t in out[0])


def test_expert_weights_index_like_dense_tensors():
    weight = torch.randn(4, 64, 96, dtype=torch.bfloat16) * 0.02
    for quantized in (Int8Weight.quantize(weight), Int4Weight.quantize(weight, 32)):
        chosen = torch.tensor([3, 1])
        subset = quantized[chosen]
        assert isinstance(subset, QuantizedWeight) and tuple(subset.shape) == (2, 64, 96)
        x = torch.randn(2, 96, 1, dtype=torch.bfloat16)
        expected = torch.bmm(weight[chosen].float(), x.float())
        got = torch.bmm(subset, x).float()
        assert _relative_error(got, expected) < 0.15
        single = quantized[2]
        assert tuple(single.shape) == (64, 96)
        assert _relative_error(single.dequantize().float(), weight[2].float()) < 0.15


@given(st.sampled_from(["int8", "fp8", "int4", *(f"int4-g{g}" for g in INT4_GROUPS)]))
def test_weight_format_labels_round_trip(text):
    fmt = parse_weight_format(text)
    assert parse_weight_format(fmt.label) == fmt


@pytest.mark.parametrize("text", ["int3", "int4-g48", "q4_k_m", ""])
def test_unknown_weight_formats_are_refused(text):
    with pytest.raises(InputError):
        parse_weight_format(text)


@given(
    st.sampled_from(["bf16", "fp16", "fp32", "int8", "fp8", "int4", "mxfp4", "int8-g64"]),
    st.sampled_from(["", "-g8", "-g32", "-g128", "-g256", "-g48"]),
    st.booleans(),
)
def test_runner_reads_weight_labels_as_core_does(name, suffix, upper):
    """One parser: a label core refuses, the runner refuses with core's message; a label the
    runner takes, it stores under core's canonical name."""
    text = name + suffix if name in ("int4", "int8") else name
    text = text.upper() if upper else text
    try:
        canonical = parse_precision(weights=text)
    except InputError as core_error:
        with pytest.raises(InputError) as runner_error:
            parse_weight_format(text)
        assert str(runner_error.value) == str(core_error)
        return
    try:
        fmt = parse_weight_format(text)
    except InputError as error:  # a format the runner has no kernel for
        grouped_int8 = canonical.weights.startswith("int8-g")
        assert canonical.weights == "mxfp4" or grouped_int8 or "int4 group size" in str(error)
        return
    assert fmt.label == ("dense" if not canonical.quantized else canonical.weights)


def test_formats_without_a_runner_kernel_are_refused_by_name():
    for text in ("mxfp4", "int8-g64"):
        with pytest.raises(InputError, match="the local runner has no kernel for"):
            parse_weight_format(text)


def test_dense_names_are_no_quantization():
    assert not parse_weight_format("bf16").quantized
    assert not parse_weight_format("bfloat16").quantized
    assert parse_kv_format("bfloat16") is None
    with pytest.raises(InputError):
        parse_kv_format("int4")


def test_profile_quantized_records_precision(tmp_path):
    result = run_cli(
        "profile", "--arch", "small-llama-100m", "--weights", "int8", "--kv-cache", "fp8",
        "--grid", "quick", "--max-prompt-tokens", "1", "--repeats", "1", "--no-progress",
        "--layers", "1", "-o", "m.csv",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = (tmp_path / "m.csv").read_text().splitlines()[1:]
    assert rows and all(row.startswith("small-llama-100m@int8+kv-fp8,") for row in rows)
    meta = json.loads((tmp_path / "m.csv.meta.json").read_text())
    assert meta["precision"] == {"compute": "bfloat16", "weights": "int8", "kv_cache": "fp8"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--weights", "int3"], "unknown weight format 'int3'"),
        (["--weights", "int4"], "int4 with groups of 128 needs input features divisible by 128"),
        (["--kv-cache", "int4"], "unknown KV-cache format 'int4'"),
    ],
)
def test_profile_refuses_bad_precisions_writing_nothing(tmp_path, args, message):
    result = run_cli("profile", "--arch", "tiny-llama", *args, "-o", "m.csv", cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["gemma2", "gpt_oss", "deepseek_v3"])
def test_new_families_quantize_weights_and_caches(name):
    """Sliding-window rings, sinks with a routed MoE, and MLA's latent cache."""
    arch = architecture_from_hf_config(TINY[name], name=name)
    dense, reference = _logits(arch)
    quantized, logits = _logits(arch, weights="int8", kv_cache="fp8")
    assert _relative_error(logits, reference) < LOGIT_TOLERANCE["int8"] + KV_TOLERANCE["fp8"]
    assert weight_bytes(quantized.model) < weight_bytes(dense.model)
    assert 2 * kv_cache_bytes_per_token(quantized.model) == kv_cache_bytes_per_token(dense.model)
    prompt = torch.randint(0, arch.vocab_size, (1, 12), generator=torch.Generator().manual_seed(3))
    assert quantized.generate(prompt, 6).shape == (1, 6)  # past the 8-token sliding window


@pytest.mark.parametrize("kv_cache", ["bf16", "fp8", "int8"])
@pytest.mark.parametrize(
    "name", sorted(__import__("tests.test_architectures").test_architectures.TINY)
)
def test_runner_cache_bytes_equal_the_hardware_model(name, kv_cache):
    """Every family and cache format: the bytes the runner's caches hold per token equal the
    hardware model's count (a context inside every sliding window)."""
    arch = architecture_from_hf_config(TINY[name], name=name)
    generator = Generator(
        arch,
        dtype="bfloat16",
        max_seq_len=16,
        kv_cache=None if kv_cache == "bf16" else kv_cache,
    )
    context = 4
    expected = kv_cache_bytes(arch, context, Precision(kv_cache=kv_cache)) / context
    assert kv_cache_bytes_per_token(generator.model) == expected
