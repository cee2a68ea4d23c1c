"""Process-wide state of the service: the estimate cache."""

from __future__ import annotations

from functools import lru_cache

from idealized_runtime.api.estimation import EstimateCache
from idealized_runtime.api.settings import get_settings


@lru_cache(maxsize=1)
def estimate_cache() -> EstimateCache:
    settings = get_settings()
    return EstimateCache(ttl_s=settings.fit_cache_ttl_s, max_entries=settings.max_cache_entries)


def invalidate_caches() -> None:
    """After a write that can change which fit, hardware or architecture an estimate uses."""
    estimate_cache().invalidate()
