"""Estimates from stored fits: a small in-process cache of fits and hardware (so the hot
single-estimate path does not touch the database), and the cost-aware variants.

The arithmetic is the cost model's: runtimes come from
``cost_model.fitting.evaluate.predict_runtime`` (vectorized), accelerator counts from
``cost_model.hardware.planner.min_gpus`` and the GPU-seconds, joules and dollars from
``cost_model.hardware.estimate.cost_variants``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from fastapi import HTTPException, status
from numpy.typing import NDArray
from pydantic import BaseModel
from sqlalchemy.orm import Session

from idealized_runtime.api import crud
from idealized_runtime.api.memory import BoundedCache
from idealized_runtime.api.schemas import Metric
from idealized_runtime.core.catalog import helm_model_shapes
from idealized_runtime.core.errors import InputError
from idealized_runtime.core.types import Architecture, FittedCostModel, Hardware, Precision
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.cost_model.hardware.estimate import cost_variants
from idealized_runtime.cost_model.hardware.planner import min_gpus


@dataclass(frozen=True)
class ResolvedFit:
    id: int
    fit: FittedCostModel


@dataclass(frozen=True)
class CostColumns:
    """Cost variants of one or many runtimes on ``num_gpus`` x ``hardware``."""

    hardware: str
    num_gpus: int
    gpu_seconds: NDArray[np.float64]
    joules: NDArray[np.float64] | None
    dollars: NDArray[np.float64] | None


def not_found(detail: str) -> HTTPException:
    return HTTPException(status_code=status.HTTP_404_NOT_FOUND, detail=detail)


class EstimateCache:
    """Fits by id (immutable once stored), the current fit per (model, metric) for ``ttl_s``
    seconds, and the hardware / architecture catalog. Writes in this process call
    ``invalidate``; other server processes see new fits after at most ``ttl_s``."""

    def __init__(self, ttl_s: float, max_entries: int = 1024) -> None:
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        # Each bounded (least recently used dropped): requests name what they look up.
        self._by_id: BoundedCache[int, ResolvedFit] = BoundedCache(max_entries)
        self._current: BoundedCache[tuple[str, str], tuple[float, ResolvedFit]] = BoundedCache(
            max_entries
        )
        self._hardware: BoundedCache[str, Hardware] = BoundedCache(max_entries)
        self._architectures: BoundedCache[str, Architecture] = BoundedCache(max_entries)
        self._gpus: BoundedCache[tuple[str, str, str], int | None] = BoundedCache(max_entries)

    def invalidate(self) -> None:
        with self._lock:
            self._current.clear()
            self._hardware.clear()
            self._architectures.clear()
            self._gpus.clear()

    # The cached lookups return None on a miss; the ``load_*`` methods fill them from a session.

    def cached_fit(self, model: str, metric: Metric, fit_id: int | None) -> ResolvedFit | None:
        if fit_id is not None:
            found = self._by_id.get(fit_id)
            return found if found is not None and found.fit.model == model else None
        entry = self._current.get((model, metric))
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def load_fit(
        self, session: Session, model: str, metric: Metric, fit_id: int | None
    ) -> ResolvedFit:
        if fit_id is not None:
            row = crud.get_fit(session, fit_id)
            if row is None or row.model != model:
                raise not_found(f"no fit {fit_id} of model {model!r}")
            resolved = ResolvedFit(row.id, crud.fit_model(row))
            self._by_id[row.id] = resolved
            return resolved
        row = crud.current_fit(session, model, metric)
        if row is None:
            raise not_found(
                f"no {metric} fit of model {model!r}: create one with POST /v1/fits "
                "(GET /v1/fits lists the fitted models)"
            )
        resolved = self._by_id.setdefault(row.id, ResolvedFit(row.id, crud.fit_model(row)))
        with self._lock:
            self._current[(model, metric)] = (time.monotonic() + self.ttl_s, resolved)
        return resolved

    def cached_hardware(self, name: str) -> Hardware | None:
        return self._hardware.get(name)

    def load_hardware(self, session: Session, name: str) -> Hardware:
        row = crud.get_hardware(session, name)
        if row is None:
            raise not_found(f"unknown hardware {name!r}; GET /v1/hardware lists it")
        hardware = Hardware(**row.spec)
        self._hardware[name] = hardware
        return hardware

    def architecture_for(self, session: Session | None, model: str) -> Architecture | None:
        """The architecture of ``model``: its own name, or the profiled shape HELM uses."""
        candidates = [model, helm_model_shapes().get(model, "")]
        for name in candidates:
            cached = self._architectures.get(name)
            if cached is not None:
                return cached
        if session is None:
            return None
        for name in candidates:
            if name and (row := crud.get_architecture(session, name)) is not None:
                architecture = Architecture(**row.spec)
                self._architectures[name] = architecture
                return architecture
        return None

    @staticmethod
    def _gpus_key(model: str, fit: FittedCostModel, hardware: Hardware) -> tuple[str, str, str]:
        return (model, hardware.name, fit.stack.dtype if fit.stack else "")

    def gpus_known(self, model: str, fit: FittedCostModel, hardware: Hardware) -> bool:
        return self._gpus_key(model, fit, hardware) in self._gpus

    def gpus_needed(
        self, session: Session | None, model: str, fit: FittedCostModel, hardware: Hardware
    ) -> int | None:
        key = self._gpus_key(model, fit, hardware)
        if key in self._gpus:
            try:
                return self._gpus[key]
            except KeyError:  # dropped meanwhile
                pass
        if session is None:
            return None
        gpus = accelerators_for(self.architecture_for(session, model), fit, hardware)
        self._gpus[key] = gpus
        return gpus


def accelerators_for(
    architecture: Architecture | None, fit: FittedCostModel, hardware: Hardware
) -> int | None:
    """GPUs needed: the serving model's minimum for the architecture (full context, batch 1);
    else the fit's own stack when it ran on this hardware; else unknown."""
    dtype = fit.stack.dtype if fit.stack else "float16"
    if architecture is not None:
        try:
            return int(
                min_gpus(
                    architecture,
                    hardware,
                    context_tokens=architecture.max_context,
                    batch_size=1,
                    precision=Precision.from_dtype(dtype),
                )
            )
        except InputError:
            return None  # does not fit on any supported count of this accelerator
    if fit.stack is not None and fit.stack.hardware == hardware.name:
        return fit.stack.num_devices
    return None


def default_hardware_name(fit: FittedCostModel) -> str | None:
    """The accelerator a fit was measured on, when it names one."""
    if fit.stack is not None and fit.stack.hardware not in ("", "unknown", "cpu"):
        return fit.stack.hardware
    return None


def finite(values: NDArray[np.float64], what: str) -> NDArray[np.float64]:
    """``values``, or a 422 when one is not finite: a response never holds a null where the
    schema promises a number (JSON has no NaN or Infinity)."""
    if not np.isfinite(values).all():
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"{what} gives a value beyond floating-point range for these requests",
        )
    return values


ModelT = TypeVar("ModelT", bound=BaseModel)


def require_finite(out: ModelT) -> ModelT:
    """``out``, or a 422 when one of its numbers is NaN or infinite."""

    def numbers(value: Any) -> Iterator[float]:
        if isinstance(value, float):
            yield value
        elif isinstance(value, BaseModel):
            for item in value.__dict__.values():
                yield from numbers(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from numbers(item)

    if not all(math.isfinite(number) for number in numbers(out)):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "the estimate is beyond floating-point range (check the fit's or the hardware's "
            "stored figures)",
        )
    return out


def runtimes(fit: FittedCostModel, prompt_tokens: Any, output_tokens: Any) -> NDArray[np.float64]:
    values = np.asarray(predict_runtime(fit, prompt_tokens, output_tokens), dtype=np.float64)
    return finite(values, f"the {fit.method} fit of {fit.model!r}")


def cost_columns(runtime_s: NDArray[np.float64], num_gpus: int, hardware: Hardware) -> CostColumns:
    """GPU-seconds, joules and dollars of each runtime (arrays in, arrays out).

    ``cost_variants`` is scalar and linear in the runtime: evaluate it once per second of
    runtime and scale, instead of calling it per row. A rate the hardware catalog does not know
    (price or power 0) gives None, not 0."""
    per_second = cost_variants(1.0, num_gpus, hardware)
    what = f"the costs on {num_gpus} x {hardware.name}"
    return CostColumns(
        hardware=hardware.name,
        num_gpus=num_gpus,
        gpu_seconds=finite(runtime_s * per_second["gpu_seconds"], what),
        joules=finite(runtime_s * per_second["energy_j"], what) if hardware.board_power_w else None,
        dollars=(
            finite(runtime_s * per_second["cost_usd"], what) if hardware.hourly_price_usd else None
        ),
    )
