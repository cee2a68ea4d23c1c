"""The shipped engine stacks (``data/engines/<name>.json``): per GPU the engine version and its
fitted kernels, the engine's scheduler defaults, and where the measurements came from.

``engine_names`` lists them, ``get_engine`` reads one, ``EngineStack.step_model`` builds the
step-time model of a deployment on it; ``python -m idealized_runtime.cost_model.hardware.engines``
refits them from the kernel database.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
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
    # The scheduler defaults the engine sizes by the GPU (SGLang's chunked prefill and CUDA
    # graph batch by the memory the GPU reports): per GPU, the fields that differ
    gpu_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)

    def defaults_for(self, deployment: Deployment) -> SchedulerDefaults:
        """The engine's defaults for ``deployment``: its own, those it sizes by the GPU
        (``gpu_defaults``), and graphs up to ``wide_tp_graph_max_batch`` at tensor-parallel size
        4 or more where the engine sizes them so."""
        scheduler = replace(self.scheduler, **self.gpu_defaults.get(deployment.hardware.name, {}))
        wide = scheduler.wide_tp_graph_max_batch
        if wide and deployment.tp >= 4 and wide > scheduler.cuda_graph_max_batch:
            scheduler = replace(scheduler, cuda_graph_max_batch=wide)
        return scheduler

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
        kernels = self.kernels(deployment.hardware.name)
        return EngineStepModel(deployment, kernels, self.defaults_for(deployment))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "scheduler": {f.name: getattr(self.scheduler, f.name) for f in fields(self.scheduler)},
            "provenance": self.provenance,
            "notes": self.notes,
            "scheduler_by_gpu": dict(sorted(self.gpu_defaults.items())),
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
                gpu_defaults=_gpu_defaults(data.get("scheduler_by_gpu", {})),
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


def _gpu_defaults(block: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A stack file's per-GPU scheduler defaults, the fields this version knows."""
    known = {f.name for f in fields(SchedulerDefaults)}
    return {
        str(gpu): {k: v for k, v in dict(values).items() if k in known}
        for gpu, values in dict(block).items()
    }


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
