"""Calibrate the roofline's efficiency factors on measured profiles of a stack.

A stack (runner + hardware) is far from the roofline in ways that do not depend on the model:
it reaches a fraction of peak FLOP/s and bandwidth, pays a host-side time per layer (kernel
launches, Python dispatch) that hides more or less behind GPU work, a latency per all-reduce,
and a fixed time per forward pass. ``calibrate`` fits those few numbers to the profiles of
several models at once (each at the tensor-parallel size it was profiled with); the result
predicts models that were never profiled, from their architecture alone, and transfers to other
GPUs by keeping the efficiencies and swapping the hardware peaks (``roofline.predict_*`` with
another ``Hardware``). Host-side overheads are kept in seconds: they belong to the CPU and the
framework, not to the GPU.

Targets per model, as in HELM: alpha(p) = runtime at o = 1 for every profiled prompt size, and
beta = the least-squares slope of runtime on o, pooled over prompt sizes. The fit minimises log
errors (relative, scale-free); each model's beta weighs as much as its whole alpha curve.

The shipped calibration of the paper's A100 Megatron-LM (2022) grid lives in
``data/calibrations/a100-megatron-2022.json``; regenerate it with
``python -m idealized_runtime.cost_model.hardware.calibration``.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import least_squares

from idealized_runtime.core.catalog import (
    MEGATRON_A100_STACK,
    REFERENCE_DIR,
    data_path,
    get_architecture,
    get_hardware,
    megatron_a100_measurements,
    megatron_profile_name,
)
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import (
    Architecture,
    Deployment,
    Dtype,
    Efficiency,
    Hardware,
    Measurement,
    Precision,
)
from idealized_runtime.cost_model.hardware.roofline import (
    hardware_model_alpha,
    hardware_model_runtime,
)

SHIPPED_CALIBRATION = "a100-megatron-2022"
CALIBRATIONS_DIR = "calibrations"

# The factors calibrate() fits, with bounds and a typical scale (for the optimiser's steps).
# interconnect stays 1.0: at batch 1 the all-reduces are latency-bound, so their bandwidth term
# cannot be told apart from the latency in these profiles.
FITTED: dict[str, tuple[float, float, float]] = {
    "compute": (0.05, 1.0, 0.1),
    "bandwidth": (0.05, 1.0, 0.1),
    "layer_overhead_s": (0.0, 5e-3, 1e-4),
    "allreduce_latency_s": (0.0, 1e-3, 1e-5),
    "fixed_overhead_s": (0.0, 0.05, 1e-3),
    "attention_score_passes": (0.0, 64.0, 1.0),
    "host_overlap": (1.0, 50.0, 1.0),
}
# Not fitted: how much slower GEMMs with unaligned dimensions run. Only one profiled model has
# any (yalm), so a fitted factor would be informed by yalm alone; it comes from the hardware's
# datasheet instead (``roofline.unaligned_factor``).
_START = Efficiency(
    compute=0.6,
    bandwidth=0.6,
    layer_overhead_s=5e-4,
    allreduce_latency_s=5e-5,
    fixed_overhead_s=1e-3,
    attention_score_passes=4.0,
    host_overlap=4.0,
)


@dataclass(frozen=True)
class ProfiledModel:
    """One model's profile reduced to HELM's targets, with the shape and TP it ran with."""

    name: str
    architecture: Architecture
    tp: int
    prompt_sizes: NDArray[np.float64]
    alpha_s: NDArray[np.float64]  # runtime at o = 1 per prompt size
    beta_s: float  # pooled slope of runtime on o
    grid_p: NDArray[np.float64]  # every (p, o) profiled, for the predicted pooled slope
    grid_o: NDArray[np.float64]


@dataclass(frozen=True)
class ModelError:
    model: str
    alpha_mape: float  # mean |predicted / measured - 1| over the profiled prompt sizes
    alpha_max: float
    beta_error: float  # |predicted / measured - 1|


@dataclass(frozen=True)
class ProfileCalibration:
    """Efficiency factors of one stack, with how well they reproduce its profiles."""

    name: str
    hardware: str
    runner: str
    dtype: Dtype
    efficiency: Efficiency
    models: tuple[str, ...]
    errors: tuple[ModelError, ...] = ()
    notes: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def alpha_mape(self) -> float:
        return float(np.mean([e.alpha_mape for e in self.errors])) if self.errors else 0.0

    @property
    def beta_mape(self) -> float:
        return float(np.mean([e.beta_error for e in self.errors])) if self.errors else 0.0

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "hardware": self.hardware,
            "runner": self.runner,
            "dtype": self.dtype,
            "efficiency": self.efficiency.to_dict(),
            "models": list(self.models),
            "in_sample": {
                "alpha_mape": self.alpha_mape,
                "beta_mape": self.beta_mape,
                "per_model": {
                    e.model: {
                        "alpha_mape": e.alpha_mape,
                        "alpha_max": e.alpha_max,
                        "beta_error": e.beta_error,
                    }
                    for e in self.errors
                },
            },
            "notes": self.notes,
            **self.extra,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> ProfileCalibration:
        try:
            per_model = data.get("in_sample", {}).get("per_model", {})
            return cls(
                name=data["name"],
                hardware=data["hardware"],
                runner=data["runner"],
                dtype=data["dtype"],
                efficiency=Efficiency.from_dict(data["efficiency"]),
                models=tuple(data["models"]),
                errors=tuple(ModelError(model=m, **v) for m, v in per_model.items()),
                notes=data.get("notes", ""),
            )
        except (KeyError, TypeError) as error:
            raise InputError(f"not a calibration file: missing or bad {error}") from None


# --- targets ----------------------------------------------------------------------------------


def pooled_beta(p: NDArray, o: NDArray, runtime: NDArray) -> float:
    """Slope of runtime on o with one intercept per prompt size (HELM's pooled beta)."""
    num = den = 0.0
    for size in np.unique(p):
        at = p == size
        if np.unique(o[at]).size < 2:
            continue
        oc = o[at] - o[at].mean()
        num += float(oc @ (runtime[at] - runtime[at].mean()))
        den += float(oc @ oc)
    if den == 0:
        raise InputError("beta needs at least two output lengths at some prompt size")
    return num / den


def profiled_models(
    measurements: Sequence[Measurement],
    tensor_parallel: Mapping[str, int],
    architectures: Mapping[str, Architecture] | None = None,
) -> list[ProfiledModel]:
    """Group measurements per model into HELM's targets (alpha at o = 1, pooled beta)."""
    by_model: dict[str, list[Measurement]] = {}
    for m in measurements:
        by_model.setdefault(m.model, []).append(m)
    models = []
    for name, rows in sorted(by_model.items()):
        arch = (architectures or {}).get(name) or get_architecture(name)
        p = np.array([r.num_prompt_tokens for r in rows], dtype=np.float64)
        o = np.array([r.num_output_tokens for r in rows], dtype=np.float64)
        y = np.array([r.runtime_s for r in rows], dtype=np.float64)
        first = o == 1
        if not first.any():
            raise InputError(f"model {name!r} has no timing with num_output_tokens = 1")
        sizes = np.unique(p[first])
        alpha = np.array([np.median(y[first & (p == s)]) for s in sizes])
        models.append(
            ProfiledModel(
                name=name,
                architecture=arch,
                tp=int(tensor_parallel.get(name, 1)),
                prompt_sizes=sizes,
                alpha_s=alpha,
                beta_s=pooled_beta(p, o, y),
                grid_p=p,
                grid_o=o,
            )
        )
    return models


def megatron_tensor_parallel_sizes() -> dict[str, int]:
    """Architecture name -> TP size each Megatron A100 profile was taken with."""
    path = data_path(REFERENCE_DIR, "megatron_a100_architectures.csv")
    with path.open(encoding="utf-8") as handle:
        return {
            megatron_profile_name(row["model"]): int(row["tensor_model_parallel_size"])
            for row in csv.DictReader(handle)
        }


def megatron_profiles() -> list[ProfiledModel]:
    """The bundled A100 Megatron grid, 13 models, as calibration targets."""
    return profiled_models(megatron_a100_measurements(), megatron_tensor_parallel_sizes())


# --- prediction and fit -----------------------------------------------------------------------


def predict_targets(
    model: ProfiledModel, hardware: Hardware, efficiency: Efficiency, dtype: Dtype = "float16"
) -> tuple[NDArray[np.float64], float]:
    """(alpha at the profiled prompt sizes, pooled beta over the profiled grid) predicted."""
    deployment = Deployment(
        architecture=model.architecture,
        hardware=hardware,
        tp=model.tp,
        precision=Precision.from_dtype(dtype),
        efficiency=efficiency,
    )
    alpha = hardware_model_alpha(deployment, model.prompt_sizes)
    grid = hardware_model_runtime(deployment, model.grid_p, model.grid_o)
    return alpha, pooled_beta(model.grid_p, model.grid_o, grid)


def model_error(
    model: ProfiledModel, hardware: Hardware, efficiency: Efficiency, dtype: Dtype = "float16"
) -> ModelError:
    alpha, beta = predict_targets(model, hardware, efficiency, dtype)
    relative = np.abs(alpha / model.alpha_s - 1.0)
    return ModelError(
        model=model.name,
        alpha_mape=float(relative.mean()),
        alpha_max=float(relative.max()),
        beta_error=abs(beta / model.beta_s - 1.0),
    )


def _efficiency(x: NDArray[np.float64], base: Efficiency) -> Efficiency:
    values = base.to_dict()
    values.update({name: float(v) for name, v in zip(FITTED, x, strict=True)})
    return Efficiency(**values)


def fit_efficiency(
    models: Sequence[ProfiledModel],
    hardware: Hardware,
    *,
    dtype: Dtype = "float16",
    start: Efficiency = _START,
) -> Efficiency:
    """Least squares on log errors of alpha(p) and beta over all ``models`` at once."""
    if not models:
        raise InputError("calibration needs at least one profiled model")
    lower = np.array([b[0] for b in FITTED.values()])
    upper = np.array([b[1] for b in FITTED.values()])
    scale = np.array([b[2] for b in FITTED.values()])
    x0 = np.clip([getattr(start, name) for name in FITTED], lower, upper)

    def residuals(x: NDArray[np.float64]) -> NDArray[np.float64]:
        eff = _efficiency(x, start)
        parts = []
        for m in models:
            alpha, beta = predict_targets(m, hardware, eff, dtype)
            parts.append(np.log(alpha / m.alpha_s))
            # Weight beta like the whole alpha curve: sqrt(n) on one residual.
            parts.append(np.array([np.log(beta / m.beta_s) * np.sqrt(m.prompt_sizes.size)]))
        return np.concatenate(parts)

    result = least_squares(residuals, x0, bounds=(lower, upper), x_scale=scale)
    return _efficiency(result.x, start)


def calibrate(
    models: Sequence[ProfiledModel],
    hardware: Hardware,
    *,
    name: str,
    runner: str,
    dtype: Dtype = "float16",
    notes: str = "",
) -> ProfileCalibration:
    """Fit a stack's efficiency factors and record the in-sample error per model."""
    efficiency = fit_efficiency(models, hardware, dtype=dtype)
    return ProfileCalibration(
        name=name,
        hardware=hardware.name,
        runner=runner,
        dtype=dtype,
        efficiency=efficiency,
        models=tuple(m.name for m in models),
        errors=tuple(model_error(m, hardware, efficiency, dtype) for m in models),
        notes=notes,
    )


def leave_one_out(
    models: Sequence[ProfiledModel], hardware: Hardware, *, dtype: Dtype = "float16"
) -> list[tuple[ModelError, Efficiency]]:
    """For each model: calibrate on the others, predict it from its architecture alone."""
    results = []
    for held_out in models:
        others = [m for m in models if m.name != held_out.name]
        efficiency = fit_efficiency(others, hardware, dtype=dtype)
        results.append((model_error(held_out, hardware, efficiency, dtype), efficiency))
    return results


# --- shipped calibrations ---------------------------------------------------------------------


def calibration_path(name: str = SHIPPED_CALIBRATION) -> Path:
    return data_path(CALIBRATIONS_DIR, f"{name}.json")


def load_calibration(path: str | Path) -> ProfileCalibration:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such calibration file") from None
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: not JSON ({error})") from None
    return ProfileCalibration.from_json(data)


def shipped_calibration(name: str = SHIPPED_CALIBRATION) -> ProfileCalibration:
    """A calibration shipped in ``data/calibrations/``."""
    return load_calibration(calibration_path(name))


def save_calibration(calibration: ProfileCalibration, path: str | Path) -> None:
    with atomic_writer(path) as handle:
        json.dump(calibration.to_json(), handle, indent=2, sort_keys=False)
        handle.write("\n")


def calibrate_megatron_a100() -> ProfileCalibration:
    """Calibrate on the paper's whole A100 Megatron grid (what ships as the default)."""
    hardware = get_hardware(MEGATRON_A100_STACK.hardware)
    return calibrate(
        megatron_profiles(),
        hardware,
        name=SHIPPED_CALIBRATION,
        runner=MEGATRON_A100_STACK.runner,
        dtype=MEGATRON_A100_STACK.dtype,
        notes=(
            "Megatron-LM (2022) on A100 80GB SXM, fp16, batch 1, 13 models at their profiled "
            "tensor-parallel sizes (HELM efficiency paper grid). Generated by "
            "`python -m idealized_runtime.cost_model.hardware.calibration`."
        ),
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parent.parent / "data" / CALIBRATIONS_DIR
                    / f"{SHIPPED_CALIBRATION}.json"),
        help="where to write the calibration JSON",
    )  # fmt: skip
    args = parser.parse_args(argv)
    calibration = calibrate_megatron_a100()
    save_calibration(calibration, args.out)
    print(f"wrote {args.out}: {calibration.efficiency}")
    print(f"in-sample alpha MAPE {calibration.alpha_mape:.1%}, beta {calibration.beta_mape:.1%}")


if __name__ == "__main__":
    main()
