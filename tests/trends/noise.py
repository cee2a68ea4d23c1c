"""Seeded round statistics of a steady provider: each round the median of a few requests whose
latency is lognormal around 1 with rare slow spikes (a neighbour's burst), as a probe sees it."""

from __future__ import annotations

import numpy as np


def steady_rounds(
    rng: np.random.Generator,
    rounds: int,
    sigma: float,
    requests: int = 3,
    spikes: float = 0.02,
) -> np.ndarray:
    """``rounds`` values: the median of ``requests`` requests each; a request is slowed by
    1 + Exp(1) with probability ``spikes``."""
    latency = np.exp(rng.normal(0.0, sigma, size=(rounds, requests)))
    slow = rng.random((rounds, requests)) < spikes
    latency = latency * np.where(slow, 1.0 + rng.exponential(1.0, (rounds, requests)), 1.0)
    return np.median(latency, axis=1)
