"""Memory the process gives back: glibc keeps the heap that a large request freed (a body of
tens of MB, a plan's simulation) for reuse, so the resident set stays at its peak; after such
a request ``trim_heap`` returns the free pages to the system."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def _libc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _libc_trim()


def trim_heap() -> None:
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class BoundedCache(Generic[K, V]):
    """A mapping of at most ``max_entries``, the least recently used dropped first."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def __getitem__(self, key: K) -> V:
        with self._lock:
            self._items.move_to_end(key)
            return self._items[key]

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def setdefault(self, key: K, value: V) -> V:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        self[key] = value
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
