"""Domain types and shipped data."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from idealized_runtime.core import catalog
from idealized_runtime.core.files import truncate_partial_line
from idealized_runtime.core.types import Architecture, Measurement


def test_shipped_architectures_validate_and_have_published_sizes() -> None:
    archs = catalog.architectures()
    # Parameter counts of the published models, within 0.5%.
    expected_billions = {
        "llama-3.1-8b": 8.03,
        "llama-3.1-70b": 70.55,
        "llama-3.1-405b": 405.85,
        "mixtral-8x7b": 46.70,
        "qwen2.5-7b": 7.62,
        "megatron-gptj-6b": 5.853,
    }
    for name, billions in expected_billions.items():
        assert archs[name].num_parameters() / 1e9 == pytest.approx(billions, rel=5e-3)
    active = archs["mixtral-8x7b"].num_parameters(active_only=True)
    assert active / 1e9 == pytest.approx(12.88, rel=5e-3)


def test_megatron_params_per_rank_match_reference() -> None:
    # params_per_rank in the reference CSV times TP equals our count for single-GPU shapes.
    assert catalog.get_architecture("megatron-gptj-6b").num_parameters() == 5853077504


def test_unknown_architecture_lists_known_names() -> None:
    with pytest.raises(catalog.UnknownNameError, match=r"known: .*llama-3\.1-8b"):
        catalog.get_architecture("nope")


def test_reference_profiles_load_with_mt_nlg_scaled() -> None:
    rows = catalog.megatron_a100_measurements()
    assert len(rows) == 3510
    mt = [
        r
        for r in rows
        if r.model == "megatron-mt-nlg" and r.num_prompt_tokens == 1 and r.num_output_tokens == 1
    ]
    assert mt[0].runtime_s == pytest.approx(0.043 * 3)


def test_bad_shapes_and_measurements_are_rejected() -> None:
    with pytest.raises(ValidationError, match="not a multiple"):
        Architecture(
            name="x",
            num_layers=1,
            hidden_size=64,
            num_heads=4,
            num_kv_heads=3,
            ffn_hidden_size=128,
            vocab_size=10,
        )
    with pytest.raises(ValidationError):
        Measurement(model="m", num_prompt_tokens=1, num_output_tokens=1, runtime_s=float("nan"))
    with pytest.raises(ValidationError):
        Measurement(model="m", num_prompt_tokens=0, num_output_tokens=1, runtime_s=1.0)


@pytest.mark.parametrize("runtime", [1e-300, 1e-8, 2e6, 1e300])
def test_implausible_runtimes_are_rejected(runtime: float) -> None:
    # Out-of-range durations are unit mistakes, and would overflow the fits' relative weights.
    with pytest.raises(ValidationError, match="between"):
        Measurement(model="m", num_prompt_tokens=1, num_output_tokens=1, runtime_s=runtime)


def test_truncate_partial_line_keeps_complete_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    assert truncate_partial_line(path) == b""
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a"')
    assert truncate_partial_line(path) == b'{"a": 1}\n{"a": 2}\n'
    assert path.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    path.write_bytes(b"no newline yet")
    assert truncate_partial_line(path) == b"" and path.read_bytes() == b""
