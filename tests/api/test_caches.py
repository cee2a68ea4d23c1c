"""The service's in-process caches hold at most their bound, the least recently used dropped."""

from __future__ import annotations

from idealized_runtime.api.estimation import EstimateCache
from idealized_runtime.api.memory import BoundedCache, trim_heap


def test_a_bounded_cache_drops_the_least_recently_used() -> None:
    cache: BoundedCache[int, str] = BoundedCache(3)
    for key in range(3):
        cache[key] = str(key)
    assert cache.get(0) == "0"  # used: 1 is now the oldest
    cache[3] = "3"
    assert 1 not in cache and 0 in cache and len(cache) == 3
    assert cache.setdefault(0, "other") == "0"
    for key in range(100):
        cache[key + 10] = "x"
    assert len(cache) == 3


def test_the_estimate_cache_is_bounded() -> None:
    cache = EstimateCache(ttl_s=5.0, max_entries=4)
    for index in range(50):
        cache._hardware[f"gpu-{index}"] = object()  # type: ignore[assignment]
        cache._architectures[f"arch-{index}"] = object()  # type: ignore[assignment]
    assert len(cache._hardware) == 4 and len(cache._architectures) == 4
    assert cache.cached_hardware("gpu-49") is not None and cache.cached_hardware("gpu-0") is None


def test_trim_heap_runs() -> None:
    trim_heap()  # glibc: returns free heap pages; elsewhere: nothing to do
