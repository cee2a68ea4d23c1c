"""The leaderboard's arithmetic: a fit's runtime at a workload's mean tokens, the cost of 1,000
requests (GPU-seconds, dollars, kilojoules), means over present values, and Pareto frontiers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

from idealized_runtime.core.types import (
    FittedCostModel,
)
from idealized_runtime.cost_model.fitting.evaluate import predict_runtime
from idealized_runtime.leaderboard.rows import REQUESTS_PER_COST_UNIT, Cost, CostRates

# --- Pareto frontier ---------------------------------------------------------------------------


def pareto_front(points: Mapping[str, tuple[float, float]]) -> set[str]:
    """Names of the (runtime, accuracy) points that no other point dominates; lower runtime and
    higher accuracy are better. A point dominates another if it is at least as good in both and
    strictly better in one, so exact duplicates are all on the front.

    Sweep in order of increasing runtime: a point is on the front iff its accuracy beats every
    strictly faster point's and it is the most accurate among the points as fast as it.
    """
    by_runtime: dict[float, list[tuple[str, float]]] = defaultdict(list)
    for name, (runtime, accuracy) in points.items():
        by_runtime[runtime].append((name, accuracy))
    front: set[str] = set()
    best_faster = -math.inf
    for runtime in sorted(by_runtime):
        tied = by_runtime[runtime]
        best_here = max(accuracy for _, accuracy in tied)
        if best_here > best_faster:
            front.update(name for name, accuracy in tied if accuracy == best_here)
            best_faster = best_here
    return front


# --- metrics -----------------------------------------------------------------------------------


def runtime_at(
    fit: FittedCostModel | None, prompt: float | None, output: float | None
) -> float | None:
    if fit is None or prompt is None or output is None:
        return None
    # Mean token counts are fractional; the formulas hold for any p >= 1 and o >= 0 (o = 0:
    # prompt-only scenarios cost alpha(p), as in HELM; fractional o < 1 also has no decode step).
    return float(predict_runtime(fit, max(prompt, 1.0), max(output, 0.0)))


def cost_per_1000(runtime_s: float | None, num_gpus: int | None, rates: CostRates | None) -> Cost:
    """GPU-seconds, dollars and kilojoules of 1,000 requests of ``runtime_s`` on ``num_gpus``
    accelerators: the paper's cost-aware variant (runtime x accelerators needed)."""
    if runtime_s is None or num_gpus is None:
        return Cost()
    gpu_seconds = runtime_s * num_gpus * REQUESTS_PER_COST_UNIT
    usd = joules = None
    if rates is not None:
        if rates.usd_per_gpu_second is not None:
            usd = gpu_seconds * rates.usd_per_gpu_second
        if rates.joules_per_gpu_second is not None:
            joules = gpu_seconds * rates.joules_per_gpu_second
    return Cost(gpu_seconds=gpu_seconds, usd=usd, kilojoules=joules / 1000 if joules else None)


def mean_of_present(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None
