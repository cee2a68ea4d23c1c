"""Pareto frontiers of serving: output tokens/s per GPU (what the fleet costs) against tokens/s
per user (what each user sees, 1 / TPOT), both to maximize, as InferenceX draws them.

A point is on the frontier when no other point serves at least as many tokens/s per GPU at
least as fast per user, and more of one. The frontier, by tokens/s per user ascending, has
throughput per GPU strictly descending; of points equal in both, the first given is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from idealized_runtime.core.types import Slo
from idealized_runtime.cost_model.planning.request import PlanPoint

T = TypeVar("T")


def pareto_frontier(
    points: Sequence[T], x: Callable[[T], float], y: Callable[[T], float]
) -> list[T]:
    """The points no other point dominates (both ``x`` and ``y`` to maximize), by ``x``
    ascending."""
    # By x descending (ties: higher y first, then given order): a point is on the frontier
    # exactly when its y beats every y seen before it.
    order = sorted(range(len(points)), key=lambda i: (-x(points[i]), -y(points[i]), i))
    kept: list[T] = []
    best = float("-inf")
    for i in order:
        if y(points[i]) > best:
            kept.append(points[i])
            best = y(points[i])
    return kept[::-1]


def serving_frontier(points: Sequence[PlanPoint]) -> list[PlanPoint]:
    """Throughput per GPU against tokens/s per user (see the module docstring)."""
    return pareto_frontier(
        points, lambda p: p.tokens_per_s_per_user, lambda p: p.output_tokens_per_s_per_gpu
    )


def meets(slo: Slo, ttft_s: float, tpot_s: float, output_tokens: float) -> bool:
    """Whether a request with these latencies meets every target of ``slo``."""
    e2e = ttft_s + max(output_tokens - 1, 0) * tpot_s
    return (
        (slo.ttft_s is None or ttft_s <= slo.ttft_s)
        and (slo.tpot_s is None or tpot_s <= slo.tpot_s)
        and (slo.e2e_s is None or e2e <= slo.e2e_s)
    )


def best_under_slo(points: Sequence[PlanPoint]) -> PlanPoint | None:
    """The point meeting the SLO with the most tokens/s per GPU (ties: fewer GPUs, then
    faster per user, then the first given)."""
    eligible = [p for p in points if p.meets_slo]
    if not eligible:
        return None
    return min(
        eligible,
        key=lambda p: (-p.output_tokens_per_s_per_gpu, p.gpus, -p.tokens_per_s_per_user),
    )
