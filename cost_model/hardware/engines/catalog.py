"""The shipped engine stacks (``data/engines/<name>.json``): per GPU the engine version and its
fitted kernels, the engine's scheduler defaults, and where the measurements came from.

``engine_names`` lists them, ``get_engine`` reads one, ``EngineStack.step_model`` builds the
step-time model of a deployment on it; ``python -m idealized_runtime.cost_model.hardware.engines``
refits them from the kernel database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from idealized_runtime.core.catalog import data_path
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.files import atomic_writer
from idealized_runtime.core.types import Deployment
from idealized_runtime.cost_model.hardware.engines.kernels import GpuKernels
from idealized_runtime.cost_model.hardware.engines.step import EngineStepModel, SchedulerDefaults
from idealized_runtime.cost_model.hardware.roofline import check_precision

ENGINES_DIR = "engines"


@dataclass(frozen=True)
class EngineStack:
    """An engine as a step-time model: its kernels per GPU, its scheduler, its provenance."""

    name: str
    description: str
    scheduler: SchedulerDefaults
    gpus: dict[str, GpuKernels]
    provenance: dict[str, Any] = field(default_factory=dict)
    notes: str = ""

    def kernels(self, gpu: str) -> GpuKernels:
        if gpu not in self.gpus:
            raise InputError(
                f"the {self.name} stack has no kernel measurements on {gpu}; it has "
                f"{', '.join(sorted(self.gpus))}"
            )
        return self.gpus[gpu]

    def step_model(self, deployment: Deployment) -> EngineStepModel:
        """The step times of ``deployment`` on this engine (its GPU must be measured)."""
        if deployment.pp > 1:
            raise InputError(f"the {self.name} stack models one pipeline stage (pp = 1)")
        check_precision(deployment.hardware, deployment.precision)  # e.g. nvfp4 off Blackwell
        domain = deployment.hardware.scale_up_gpus
        if domain is not None and deployment.tp > domain:
            raise InputError(
                f"tensor-parallel size {deployment.tp} spans {-(-deployment.tp // domain)} NVLink "
                f"domains of {domain} {deployment.hardware.name} GPUs; the {self.name} stack "
                "models collectives within one domain (use at most "
                f"{domain} GPUs per instance)"
            )
        return EngineStepModel(deployment, self.kernels(deployment.hardware.name), self.scheduler)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "scheduler": {f.name: getattr(self.scheduler, f.name) for f in fields(self.scheduler)},
            "provenance": self.provenance,
            "notes": self.notes,
            "gpus": {gpu: kernels.to_json() for gpu, kernels in sorted(self.gpus.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EngineStack:
        try:
            return cls(
                name=str(data["name"]),
                description=str(data.get("description", "")),
                scheduler=_scheduler(data["scheduler"]),
                gpus={gpu: GpuKernels.from_json(gpu, k) for gpu, k in dict(data["gpus"]).items()},
                provenance=dict(data.get("provenance", {})),
                notes=str(data.get("notes", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            if isinstance(error, InputError):
                raise
            raise InputError(f"not an engine stack file: missing or bad {error}") from None


def _scheduler(block: Mapping[str, Any]) -> SchedulerDefaults:
    """A stack file's scheduler block: fields it lacks take their defaults, and fields this
    version does not know (a file written by a newer one) are left out."""
    known = {f.name for f in fields(SchedulerDefaults)}
    return SchedulerDefaults(**{k: v for k, v in dict(block).items() if k in known})


def engines_dir() -> Path:
    return data_path(ENGINES_DIR)


@lru_cache(maxsize=1)
def shipped_engines() -> dict[str, EngineStack]:
    found = {}
    for path in sorted(engines_dir().glob("*.json")):
        engine = EngineStack.from_json(json.loads(path.read_text(encoding="utf-8")))
        found[engine.name] = engine
    return found


def engine_names() -> list[str]:
    return sorted(shipped_engines())


def get_engine(name: str) -> EngineStack:
    engines = shipped_engines()
    if name not in engines:
        raise InputError(f"unknown engine stack {name!r}; known: {', '.join(sorted(engines))}")
    return engines[name]


def save_engine(engine: EngineStack, directory: str | Path) -> Path:
    path = Path(directory) / f"{engine.name}.json"
    with atomic_writer(path) as handle:
        json.dump(engine.to_json(), handle, indent=1)
        handle.write("\n")
    return path
