"""Leave-one-model-out accuracy of the calibrated hardware model on the bundled A100 grid.

For each of the 13 Megatron A100 profiles: calibrate the efficiency factors on the other 12,
predict the held-out model's alpha(p) at all its profiled prompt sizes and its pooled beta from
its architecture alone, and compare with the measurement. The uncalibrated (ideal) roofline is
printed beside it, to show what calibration buys.

    python benchmarks/hardware_model_accuracy.py
"""

from __future__ import annotations

import time

import numpy as np

from idealized_runtime.core.catalog import MEGATRON_A100_STACK, get_hardware
from idealized_runtime.core.types import IDEAL
from idealized_runtime.cost_model.hardware.calibration import (
    leave_one_out,
    megatron_profiles,
    model_error,
)


def main() -> None:
    started = time.perf_counter()
    hardware = get_hardware(MEGATRON_A100_STACK.hardware)
    models = megatron_profiles()
    loo = leave_one_out(models, hardware)
    ideal = [model_error(m, hardware, IDEAL) for m in models]

    header = (
        f"{'model':28s} {'tp':>3s} | {'LOO alpha':>9s} {'(max)':>7s} {'LOO beta':>8s} |"
        f" {'ideal alpha':>11s} {'ideal beta':>10s}"
    )
    print(header)
    print("-" * len(header))
    for model, (error, _), raw in zip(models, loo, ideal, strict=True):
        print(
            f"{model.name:28s} {model.tp:3d} | {error.alpha_mape:9.1%} {error.alpha_max:7.1%} "
            f"{error.beta_error:8.1%} | {raw.alpha_mape:11.1%} {raw.beta_error:10.1%}"
        )
    alpha = np.array([e.alpha_mape for e, _ in loo])
    beta = np.array([e.beta_error for e, _ in loo])
    print("-" * len(header))
    print(
        f"{'mean':28s} {'':3s} | {alpha.mean():9.1%} {'':7s} {beta.mean():8.1%} |"
        f" {np.mean([e.alpha_mape for e in ideal]):11.1%}"
        f" {np.mean([e.beta_error for e in ideal]):10.1%}"
    )
    print(
        f"{'worst':28s} {'':3s} | {alpha.max():9.1%} {'':7s} {beta.max():8.1%} |"
        f" {max(e.alpha_mape for e in ideal):11.1%} {max(e.beta_error for e in ideal):10.1%}"
    )
    worst = [e.model for e, _ in loo if max(e.alpha_mape, e.beta_error) > 0.25]
    print(f"models worse than 25%: {', '.join(worst) or 'none'}")
    print(f"({len(models)} calibrations in {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
