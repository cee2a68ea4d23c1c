"""The engine step model's kernel costing per layer kind: sliding-window layers (gpt-oss every
other layer) attend to the window only."""

from __future__ import annotations

import pytest

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.types import Deployment
from idealized_runtime.cost_model.hardware.engines.catalog import get_engine

B200 = get_hardware("b200")


def test_sliding_window_layers_attend_to_the_window_only() -> None:
    """gpt-oss: every other layer attends to the last 128 positions. Up to the window the
    step costs what all-full attention would; beyond it only the 18 full layers grow."""
    arch = get_architecture("gpt-oss-120b")
    assert arch.sliding_window == 128 and arch.num_sliding_layers() == 18
    full = arch.model_copy(update={"layer_pattern": ("full",)})
    engine = get_engine("vllm")

    def step(architecture, context: float) -> float:  # type: ignore[no-untyped-def]
        deployment = Deployment(architecture=architecture, hardware=B200, precision=arch.precision)
        return float(engine.step_model(deployment).seconds(32, 32 * (context + 1), 0, 0, 0))

    assert step(arch, 100) == pytest.approx(step(full, 100), rel=1e-12)
    assert step(arch, 8000) < step(full, 8000)
    grown_sliding = step(arch, 16000) - step(arch, 8000)
    grown_full = step(full, 16000) - step(full, 8000)
    assert grown_sliding == pytest.approx(grown_full / 2, rel=1e-9)
    # A prompt chunk likewise: its sliding layers attend to at most the window per token.
    deployment = Deployment(architecture=arch, hardware=B200, precision=arch.precision)
    model = engine.step_model(deployment)
    long = float(model.seconds(0, 0, 8192, 8192 * 8193 / 2, 1))
    all_full = Deployment(architecture=full, hardware=B200, precision=arch.precision)
    assert long < float(engine.step_model(all_full).seconds(0, 0, 8192, 8192 * 8193 / 2, 1))
