"""Fitted cost models for tests: alpha(p) interpolated between two prompt sizes."""

from __future__ import annotations

from idealized_runtime.core.types import FitMethod, FittedCostModel, Provenance


def two_point_fit(
    model: str,
    alphas_s: tuple[float, float],
    beta_s: float,
    *,
    largest_prompt: int = 1000,
    method: FitMethod = "default",
    stack: Provenance | None = None,
) -> FittedCostModel:
    """A fit of ``model`` whose alpha(p) runs from ``alphas_s[0]`` at one prompt token to
    ``alphas_s[1]`` at ``largest_prompt``, with ``beta_s`` per further output token."""
    return FittedCostModel(
        model=model,
        method=method,
        alpha_rule="interpolate",
        prompt_sizes=[1, largest_prompt],
        prompt_runtimes_s=list(alphas_s),
        beta_s=beta_s,
        stack=stack,
    )
