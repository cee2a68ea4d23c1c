"""One intra-op thread per test process: pytest-xdist already runs one process per core, and
oversubscribed OpenMP regions stall for whole scheduler time slices."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
