"""The serving benchmark's held-out fit (``benchmarks/serving_vs_published.py``): each point's
residual request overhead comes from other models' points of other sources of its engine, never
its own model's or source's, on synthetic residuals where the held-out model's own would move
the fit."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BENCHMARK: dict[str, Any] = runpy.run_path(
    str(Path(__file__).parents[2] / "benchmarks" / "serving_vs_published.py")
)
Point, Residual = BENCHMARK["Point"], BENCHMARK["Residual"]
held_out_residuals = BENCHMARK["held_out_residuals"]


def _point(model: str, source: str, engine: str = "tensorrt-llm", clients: int = 16) -> Any:
    return Point(engine, "h200", model, "fp8", 8, 1, False, "", 1024, 1024, clients, source)


LAYERS = {"llama-3.1-70b": 80, "gpt-oss-120b": 36, "deepseek-r1": 61}


def _residuals(own: float) -> list[Any]:
    """Residuals of 10-layer stand-ins (per layer: a tenth of the seconds)."""
    return [
        Residual("tensorrt-llm", "llama-3.1-70b", "inferencex", own, 10),
        Residual("tensorrt-llm", "llama-3.1-70b", "vendor-a", own, 10),
        Residual("tensorrt-llm", "gpt-oss-120b", "inferencex", 0.030, 10),
        Residual("tensorrt-llm", "gpt-oss-120b", "vendor-b", 0.010, 10),
        Residual("tensorrt-llm", "deepseek-r1", "vendor-c", 0.020, 10),
        Residual("sglang", "qwen3-32b", "vendor-d", 5.0, 10),  # another engine: never used
    ]


@settings(max_examples=30, deadline=None)
@given(own=st.floats(-5.0, 5.0, allow_nan=False))
def test_the_held_out_models_own_residual_never_moves_its_fit(own: float) -> None:
    point = _point("llama-3.1-70b", "vendor-x")
    held = held_out_residuals([point], _residuals(own))[point]
    # Median of the other models' 3, 1 and 2 ms per layer, whatever llama's own residual is,
    # times llama's 80 layers.
    assert held.fitted and held.seconds == pytest.approx(0.002 * LAYERS["llama-3.1-70b"])
    assert (held.points, held.models) == (3, 2)


def test_nor_its_sources_other_models() -> None:
    # An InferenceX point of gpt-oss: gpt-oss's residuals and InferenceX's llama ones are left
    # out, leaving llama's from vendor-a and DeepSeek's from vendor-c.
    point = _point("gpt-oss-120b", "inferencex-run-123")
    held = held_out_residuals([point], _residuals(0.5))[point]
    per_layer = (0.05 + 0.002) / 2
    assert held.fitted and held.seconds == pytest.approx(per_layer * LAYERS["gpt-oss-120b"])
    assert (held.points, held.models) == (2, 2)


def test_one_model_leaves_nothing_to_fit_and_the_engines_own_value_is_used() -> None:
    only = [Residual("tensorrt-llm", "deepseek-r1", "inferencex", 0.2, 61)] * 3
    point = _point("deepseek-r1", "inferencex-run-9")
    held = held_out_residuals([point], only)[point]
    assert not held.fitted and held.seconds == 0.0  # the shipped stack fits none yet
    said = BENCHMARK["fitted_across_models"](only)
    assert said["tensorrt-llm"].startswith("not fitted: 3 points of one model")


def test_the_residual_is_fitted_per_layer_across_models() -> None:
    residuals = [
        Residual("sglang", "deepseek-r1", "inferencex", 0.061, 61),  # 1 ms per layer
        Residual("sglang", "qwen3-235b-a22b", "sglang-cookbook", 0.188, 94),  # 2 ms
    ]
    point = _point("llama-3.1-8b", "vendor-z", engine="sglang")
    held = held_out_residuals([point], residuals)[point]
    assert held.fitted and held.seconds == pytest.approx(0.0015 * 32)  # llama-3.1-8b: 32
    said = BENCHMARK["fitted_across_models"](residuals)["sglang"]
    assert said.startswith("1.50 ms per layer fitted on 2 points of 2 models")


def test_a_residual_fitted_below_zero_is_none() -> None:
    residuals = [
        Residual("vllm", "llama-3.1-8b", "s1", -0.2, 32),
        Residual("vllm", "qwen3-32b", "s2", -0.1, 64),
    ]
    point = _point("gpt-oss-120b", "s3", engine="vllm")
    assert held_out_residuals([point], residuals)[point].seconds == 0.0


def test_residuals_are_taken_at_low_load_from_the_bare_predictions() -> None:
    low = _point("llama-3.1-8b", "inferencex-run-1", clients=4)
    high = _point("llama-3.1-8b", "inferencex-run-1")
    measured = {low: {"ttft_s": 0.30}, high: {"ttft_s": 0.50}}
    bare = {low: {"ttft_s": 0.25}, high: {"ttft_s": 0.40}}
    (residual,) = BENCHMARK["residuals_of"]([low, high], measured, bare)
    assert residual.source == "inferencex" and residual.seconds == pytest.approx(0.05)
    assert residual.per_layer == pytest.approx(0.05 / 32)


def test_only_selects_points_by_their_label() -> None:
    label = BENCHMARK["_label"](_point("llama-3.1-70b", "vendor-a", clients=8))
    assert "tensorrt-llm h200 llama-3.1-70b" in label and label.endswith(" c8")


def test_each_point_carries_the_engine_release_its_source_states() -> None:
    published = BENCHMARK["load_published"]()
    versions = BENCHMARK["engine_versions"](published)
    points = BENCHMARK["points_of"](published)
    assert set(versions) == set(points)  # every point has one, figures of no point none
    releases = {(p.engine, v) for p, v in versions.items() if p.concurrency != BENCHMARK["OFFLINE"]}
    # InferenceX's runs with their image read: TensorRT-LLM 1.3.0rc14 and 1.1.0rc2.post2;
    # its dashboard's history rows without an image say nothing.
    assert {("tensorrt-llm", "1.3.0rc14"), ("tensorrt-llm", "1.1.0rc2.post2")} <= releases
    assert ("tensorrt-llm", "not stated") in releases


def test_the_median_gap_between_tokens_is_the_decode_step_between_prompts() -> None:
    """One client: every gap is a decode step, so the median gap is TPOT; sixteen clients whose
    prompts interrupt their decoding: TPOT averages those steps in, the median gap does not
    (the figure SGLang's cookbook prints beside TPOT)."""
    predict = BENCHMARK["predict"]
    alone = _point("llama-3.1-8b", "vendor-a", engine="sglang", clients=1)
    figures = predict(alone, itl=True)
    assert figures["inter_token_latency_s"] == pytest.approx(
        figures["time_per_output_token_s"], rel=0.01
    )
    busy = predict(_point("llama-3.1-8b", "vendor-a", engine="sglang", clients=16), itl=True)
    assert busy["inter_token_latency_s"] < busy["time_per_output_token_s"]
    assert "inter_token_latency_s" not in predict(alone)  # simulated only where asked
