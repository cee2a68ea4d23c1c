"""Prompt-only requests (0 output tokens) in the hardware model: alpha(p) alone, as in HELM."""

from __future__ import annotations

import numpy as np
import pytest

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.cost_model.hardware.counts import request_costs
from idealized_runtime.cost_model.hardware.roofline import (
    hardware_model_alpha,
    hardware_model_runtime,
)
from tests.deployments import deploy

ARCH, HW = get_architecture("llama-3.1-8b"), get_hardware("h100-sxm")


def test_zero_outputs_cost_the_prompt_pass_only():
    prompts = np.array([1, 100, 1000])
    alone = hardware_model_runtime(deploy(ARCH, HW), prompts, 0)
    np.testing.assert_allclose(alone, hardware_model_alpha(deploy(ARCH, HW), prompts))
    np.testing.assert_allclose(alone, hardware_model_runtime(deploy(ARCH, HW), prompts, 1))
    assert np.all(request_costs(ARCH, prompts, 0).decode.flops == 0)


def test_negative_outputs_and_empty_prompts_are_refused():
    for p, o in ((10, -1), (0, 5)):
        with pytest.raises(InputError, match="output token counts >= 0"):
            hardware_model_runtime(deploy(ARCH, HW), p, o)
