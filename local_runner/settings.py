"""The runner's profile settings: one value from the command through the checks, the generator,
the timer and the metadata.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.grids import GridPoint
from idealized_runtime.local_runner.layer_sampling import LayerSampling


@dataclass(frozen=True)
class ProfileSettings:
    """How a profile run times its grid: device and precision, tensor-parallel size, layer
    sampling and runs per point. One value from the command (``profile``, ``bench``) through the
    checks, the generator, the timer and the metadata; ``resume_record`` derives from it what
    must match to resume into a file, in the layout ``.meta.json`` has always had.

    It lives here rather than with the domain types of ``core.types``: only the profiler and the
    commands that start it use it (the cost model and the API read the CSV and its ``Provenance``,
    never these settings). The grid is not part of it: a run is given its points, which the
    resume check compares themselves. Progress bar, seed and command line change no timing and
    are not recorded as settings: they stay arguments of ``profile_grid``.
    """

    device: str = "cpu"
    dtype: str = "float32"
    tp_size: int = 1
    layers: int | None = None  # build and time this many layers, extrapolate to all; None: all
    repeats: int = 3  # timed runs per point (the median is kept)
    warmup: int = 1  # untimed runs per point
    weights: str | None = None  # int8, int4[-gN], fp8; None: the dtype
    kv_cache: str | None = None  # fp8, int8; None: the dtype

    def resume_record(self, arch: Architecture, points: Iterable[GridPoint]) -> dict[str, Any]:
        """What must match for a run to resume into an existing file (``.meta.json``'s
        ``settings``); the precision labels must be canonical (``check_profile`` makes them)."""
        record = {
            "architecture": arch.model_dump(mode="json"),
            "device": torch.device(self.device).type,
            "dtype": self.dtype,
            "tensor_parallel_size": self.tp_size,
            "layers": self.layers,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "grid": [asdict(point) for point in sorted(dict.fromkeys(points))],
        }
        # Only quantized runs record a precision, so files of dense runs resume as before.
        record.update(
            {k: v for k, v in (("weights", self.weights), ("kv_cache", self.kv_cache)) if v}
        )
        return record

    def sampling(self, arch: Architecture) -> LayerSampling:
        if self.layers is None or self.layers >= arch.num_layers:
            return LayerSampling(arch.num_layers, arch.num_layers, arch.num_layers)
        return LayerSampling(arch.num_layers, self.layers, max(1, self.layers // 2))
