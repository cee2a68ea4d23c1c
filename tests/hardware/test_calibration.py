"""The shipped A100 Megatron calibration: loads, reproduces its grid, transfers across GPUs."""

from __future__ import annotations

import numpy as np
import pytest

from idealized_runtime.core.catalog import get_architecture, get_hardware
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import IDEAL
from idealized_runtime.cost_model.hardware.calibration import (
    ProfileCalibration,
    load_calibration,
    megatron_profiles,
    model_error,
    pooled_beta,
    save_calibration,
    shipped_calibration,
)
from idealized_runtime.cost_model.hardware.roofline import hardware_model_runtime
from tests.deployments import deploy


def test_pooled_beta_recovers_a_slope() -> None:
    p = np.repeat([1.0, 100.0], 4)
    o = np.tile([1.0, 2.0, 4.0, 8.0], 2)
    runtime = 0.02 * o + np.where(p > 1, 0.5, 0.1)
    assert pooled_beta(p, o, runtime) == pytest.approx(0.02)


def test_shipped_calibration_reproduces_the_grid() -> None:
    calibration = shipped_calibration()
    hardware = get_hardware(calibration.hardware)
    errors = [model_error(m, hardware, calibration.efficiency) for m in megatron_profiles()]
    assert len(errors) == 13
    assert np.mean([e.alpha_mape for e in errors]) < 0.10
    assert np.mean([e.beta_error for e in errors]) < 0.06
    # ...and is far better than the uncalibrated roofline on the same data.
    ideal = [model_error(m, hardware, IDEAL) for m in megatron_profiles()]
    assert np.mean([e.beta_error for e in ideal]) > 0.3


def test_round_trip(tmp_path) -> None:
    calibration = shipped_calibration()
    path = tmp_path / "c.json"
    save_calibration(calibration, path)
    again = load_calibration(path)
    assert isinstance(again, ProfileCalibration)
    assert again.efficiency == calibration.efficiency
    assert again.models == calibration.models


def test_bad_calibration_file(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x"}')
    with pytest.raises(InputError):
        load_calibration(path)


def test_transfer_to_faster_hardware() -> None:
    efficiency = shipped_calibration().efficiency
    arch = get_architecture("llama-3.1-70b")
    a100, h100 = (
        float(hardware_model_runtime(deploy(arch, gpu, tp=4, efficiency=efficiency), 1000, 100))
        for gpu in (get_hardware("a100-80gb"), get_hardware("h100-sxm"))
    )
    assert h100 < a100
