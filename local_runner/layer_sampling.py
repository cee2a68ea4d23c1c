"""Layer sampling (models that do not fit): build ``k`` of the ``L`` layers, time every point with
the first ``k1 = k // 2`` and with all ``k`` layers, and extrapolate linearly in the layer count:
    t(L) = t(k) + (t(k) - t(k1)) / (k - k1) * (L - k)
The intercept keeps the embedding, LM head and per-request overheads fixed, where HELM's plain
``t(k) * L / k`` scales them up too. With k = 1 only the plain rule is possible. When noise makes
the shallow timing the longer one (a negative per-layer slope, e.g. short timings on a loaded
CPU), the point falls back to the proportional rule, which is positive whenever ``t(k)`` is.
The CSV's ``extrapolation`` column says which rule each row used: ``none`` (all layers were
run), ``two_depth`` or ``proportional``. A non-positive runtime is never written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from idealized_runtime.core.types import Architecture
from idealized_runtime.local_runner.timer import Timing


@dataclass(frozen=True)
class LayerSampling:
    """Which depths are timed: ``depth`` layers are built; with fewer than ``total`` layers each
    point is timed at ``shallow`` and at ``depth`` and extrapolated (module docstring)."""

    total: int
    depth: int
    shallow: int

    @property
    def sampled(self) -> bool:
        return self.depth < self.total

    def to_json(self) -> dict[str, Any]:
        return {
            "total_layers": self.total,
            "profiled_layers": [self.shallow, self.depth] if self.sampled else [self.total],
            "rule": (
                "none"
                if not self.sampled
                else "proportional (t * L / k)"
                if self.shallow == self.depth
                else "linear in layer count from two depths (proportional where noise gives a "
                "negative per-layer slope: see the extrapolation column)"
            ),
        }


def representative_sample(arch: Architecture, layers: int) -> bool:
    """Whether timing ``layers // 2`` and ``layers`` layers extrapolates to the whole model: the
    layers between the two depths (whose cost is extrapolated) must be typical ones, past the
    dense layers that open DeepSeek-style MoE models, and whole cycles of the attention pattern
    (Gemma 3's five sliding layers and one global)."""
    period, dense = len(arch.layer_pattern), arch.first_k_dense_layers
    if layers == 1:  # plain scaling: the one layer must stand for all of them
        return period == 1 and dense == 0
    shallow = layers // 2
    return shallow >= dense and (layers - shallow) % period == 0


def extrapolate_layers(
    shallow: Timing, deep: Timing, k1: int, k2: int, total_layers: int
) -> Timing:
    """Linear extrapolation in layer count from depths k1 < k2 to ``total_layers``.

    Falls back to the proportional rule ``t(k2) * L / k2`` when the two depths are equal or
    when a per-layer slope (of the runtime or of the TTFT) is negative: time cannot shrink
    with more layers, so a negative slope is noise, and extrapolating it could go below zero.
    """
    runtime_slope = (deep.runtime_s - shallow.runtime_s) / (k2 - k1) if k1 != k2 else -1.0
    ttft_slope = (deep.ttft_s - shallow.ttft_s) / (k2 - k1) if k1 != k2 else -1.0
    if runtime_slope < 0 or ttft_slope < 0 or not math.isfinite(runtime_slope + ttft_slope):
        scale = total_layers / k2
        return Timing(
            deep.runtime_s * scale,
            deep.std_s * scale,
            deep.ttft_s * scale,
            deep.repeats,
            "proportional",
        )
    extra_layers = total_layers - k2  # t(L) = t(k2) + slope * (L - k2) >= t(k2)
    w_deep = (total_layers - k1) / (k2 - k1)
    w_shallow = extra_layers / (k2 - k1)
    std = math.hypot(w_deep * deep.std_s, w_shallow * shallow.std_s)
    return Timing(
        deep.runtime_s + runtime_slope * extra_layers,
        std,
        deep.ttft_s + ttft_slope * extra_layers,
        deep.repeats,
        "two_depth",
    )
